//! Minimal JSON scanning and splicing for the few members citestream reads
//! or adds.
//!
//! The rewriters never build a DOM of a chunk. A [`ObjectWalker`] steps
//! through an object's members, validating what it skips (the JSON
//! grammar, escapes, no raw control characters in strings, nesting at most
//! [`MAX_DEPTH`] deep) and reporting byte spans, so a rewriter can read a
//! value in place and splice new members in without re-serializing
//! anything. Invalid JSON is reported as [`Invalid`], and the rewriters
//! then forward the input unchanged.
//!
//! Two deliberate differences from `serde_json`, both so that text the
//! citation rules define is understood: invalid UTF-8 inside strings and
//! lone surrogate escapes are accepted (they count as U+FFFD in offsets),
//! and duplicate keys are not rejected.
//!
//! This module is public for the fuzz targets and for embedders who want
//! the same scanner; its API is small and may grow.

use std::borrow::Cow;
use std::ops::Range;

/// Nesting deeper than this is treated as invalid (serde_json's default
/// recursion limit is 128).
pub const MAX_DEPTH: u32 = 120;

/// The input is not valid JSON (or is nested deeper than [`MAX_DEPTH`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Invalid;

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("invalid JSON")
    }
}

impl std::error::Error for Invalid {}

/// Index of the first non-whitespace byte at or after `i`.
#[inline]
#[must_use]
pub fn skip_ws(b: &[u8], mut i: usize) -> usize {
    // Chunks rarely contain whitespace between tokens: one compare.
    if b.get(i).is_some_and(|&c| c > b' ') {
        return i;
    }
    while let Some(c) = b.get(i) {
        if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
            break;
        }
        i += 1;
    }
    i
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// High bit set in the lowest byte of `w` (little-endian) that is `"`, `\`
/// or below 0x20; bits above it may be false positives, so only the lowest
/// set bit is meaningful.
#[inline(always)]
fn string_special(w: u64) -> u64 {
    let q = w ^ (LO * u64::from(b'"'));
    let s = w ^ (LO * u64::from(b'\\'));
    ((q.wrapping_sub(LO) & !q) | (s.wrapping_sub(LO) & !s) | (w.wrapping_sub(LO * 0x20) & !w)) & HI
}

/// Validates the string starting at `b[i]` (which must be `"`).
///
/// Returns the index just after the closing quote and whether the string
/// contains a backslash escape. Scans eight bytes at a time.
///
/// # Errors
/// [`Invalid`] for an unterminated string, a raw control character, or a
/// malformed escape.
#[inline]
pub fn scan_string(b: &[u8], i: usize) -> Result<(usize, bool), Invalid> {
    if b.get(i) != Some(&b'"') {
        return Err(Invalid);
    }
    let mut i = i + 1;
    let mut escaped = false;
    loop {
        while let Some(word) = b.get(i..i + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            let m = string_special(u64::from_le_bytes(w));
            if m != 0 {
                i += (m.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        match *b.get(i).ok_or(Invalid)? {
            b'"' => return Ok((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                match b.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                    Some(b'u') => {
                        let hex = b.get(i + 2..i + 6).ok_or(Invalid)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return Err(Invalid);
                        }
                        i += 6;
                    }
                    _ => return Err(Invalid),
                }
            }
            c if c < 0x20 => return Err(Invalid),
            _ => i += 1,
        }
    }
}

/// Where to insert before the closing bracket at `close`: just after the
/// last token, before any whitespace, so pretty-printed JSON stays tidy.
#[inline]
#[must_use]
pub fn insert_point(b: &[u8], close: usize) -> usize {
    let mut p = close.min(b.len());
    while p > 0 && matches!(b[p - 1], b' ' | b'\t' | b'\n' | b'\r') {
        p -= 1;
    }
    p
}

/// Validates the number starting at `b[i]`; returns the index after it.
///
/// # Errors
/// [`Invalid`] when the bytes do not follow the JSON number grammar.
pub fn scan_number(b: &[u8], mut i: usize) -> Result<usize, Invalid> {
    let digits = |b: &[u8], mut i: usize| -> Result<usize, Invalid> {
        let s = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == s { Err(Invalid) } else { Ok(i) }
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(b, i)?,
        _ => return Err(Invalid),
    }
    if b.get(i) == Some(&b'.') {
        i = digits(b, i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(b, i)?;
    }
    Ok(i)
}

/// Validates the value starting at `b[i]` (no leading whitespace); returns
/// the index just after it.
///
/// # Errors
/// [`Invalid`] when it is not a valid JSON value or nests deeper than
/// [`MAX_DEPTH`] counting `depth` levels already entered.
pub fn scan_value(b: &[u8], i: usize, depth: u32) -> Result<usize, Invalid> {
    // One bit per open container: 1 = object, 0 = array.
    let mut stack: u128 = 0;
    let mut open: u32 = 0;
    let mut i = i;
    loop {
        // Parse one value at `i`.
        match b.get(i) {
            Some(b'{') | Some(b'[') => {
                let is_obj = b[i] == b'{';
                if depth + open + 1 > MAX_DEPTH {
                    return Err(Invalid);
                }
                stack = (stack << 1) | u128::from(is_obj);
                open += 1;
                i = skip_ws(b, i + 1);
                let close = if is_obj { b'}' } else { b']' };
                if b.get(i) == Some(&close) {
                    stack >>= 1;
                    open -= 1;
                    i += 1;
                } else {
                    if is_obj {
                        i = scan_key(b, i)?;
                    }
                    continue;
                }
            }
            Some(b'"') => i = scan_string(b, i)?.0,
            Some(b't') => i = literal(b, i, b"true")?,
            Some(b'f') => i = literal(b, i, b"false")?,
            Some(b'n') => i = literal(b, i, b"null")?,
            Some(_) => i = scan_number(b, i)?,
            None => return Err(Invalid),
        }
        // After a value: close containers or move to the next element.
        loop {
            if open == 0 {
                return Ok(i);
            }
            let is_obj = stack & 1 == 1;
            i = skip_ws(b, i);
            match b.get(i) {
                Some(b',') => {
                    i = skip_ws(b, i + 1);
                    if is_obj {
                        i = scan_key(b, i)?;
                    }
                    break;
                }
                Some(b'}') if is_obj => {}
                Some(b']') if !is_obj => {}
                _ => return Err(Invalid),
            }
            stack >>= 1;
            open -= 1;
            i += 1;
        }
    }
}

/// A key string, whitespace, `:`, whitespace; returns the value's start.
fn scan_key(b: &[u8], i: usize) -> Result<usize, Invalid> {
    let (i, _) = scan_string(b, i)?;
    let i = skip_ws(b, i);
    if b.get(i) != Some(&b':') {
        return Err(Invalid);
    }
    Ok(skip_ws(b, i + 1))
}

fn literal(b: &[u8], i: usize, lit: &[u8]) -> Result<usize, Invalid> {
    if b.get(i..i + lit.len()) == Some(lit) {
        Ok(i + lit.len())
    } else {
        Err(Invalid)
    }
}

/// One member of an object, as byte offsets into the scanned buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The key's raw bytes, between the quotes (escapes not decoded).
    pub key: Range<usize>,
    /// The key contains a backslash escape.
    pub key_escaped: bool,
    /// Where the value starts.
    pub value_start: usize,
    /// End of the previous member's value, if there was a previous member.
    pub prev_end: Option<usize>,
}

impl Member {
    /// Offset of the key's opening quote.
    #[must_use]
    pub fn start(&self) -> usize {
        self.key.start - 1
    }

    /// Whether the key equals `name` once escapes are decoded.
    #[must_use]
    pub fn key_is(&self, b: &[u8], name: &str) -> bool {
        let raw = &b[self.key.clone()];
        if self.key_escaped {
            decode_str(raw) == name
        } else {
            raw == name.as_bytes()
        }
    }
}

/// The span to delete to remove a member that ends at `value_end`, with its
/// separating comma, leaving valid JSON.
#[must_use]
pub fn removal_span(b: &[u8], m: &Member, value_end: usize) -> Range<usize> {
    if let Some(p) = m.prev_end {
        return p..value_end;
    }
    let j = skip_ws(b, value_end);
    if b.get(j) == Some(&b',') {
        m.start()..skip_ws(b, j + 1)
    } else {
        m.start()..value_end
    }
}

/// Steps through the members of one object without building anything.
///
/// ```
/// use citestream::json::ObjectWalker;
/// let b = br#"{"a": 1, "b": {"c": [true]}}"#;
/// let mut w = ObjectWalker::new(b, 0, 0).unwrap();
/// let mut keys = Vec::new();
/// while let Some(m) = w.next_member().unwrap() {
///     keys.push(String::from_utf8(b[m.key.clone()].to_vec()).unwrap());
///     w.skip_value().unwrap();
/// }
/// assert_eq!(keys, ["a", "b"]);
/// assert_eq!(w.close(), b.len() - 1);
/// ```
#[derive(Debug)]
pub struct ObjectWalker<'a> {
    b: &'a [u8],
    i: usize,
    depth: u32,
    members: u32,
    last_end: Option<usize>,
    done: bool,
}

impl<'a> ObjectWalker<'a> {
    /// Starts at the `{` at `b[i]`; `depth` counts the containers around it.
    ///
    /// # Errors
    /// [`Invalid`] if `b[i]` is not `{` or the nesting is too deep.
    pub fn new(b: &'a [u8], i: usize, depth: u32) -> Result<Self, Invalid> {
        if b.get(i) != Some(&b'{') || depth + 1 > MAX_DEPTH {
            return Err(Invalid);
        }
        Ok(ObjectWalker {
            b,
            i: i + 1,
            depth: depth + 1,
            members: 0,
            last_end: None,
            done: false,
        })
    }

    /// The nesting depth inside this object (for nested walkers).
    #[must_use]
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Moves to the next member and returns it, positioned at its value; the
    /// caller then consumes the value with [`skip_value`](Self::skip_value)
    /// or reads it and calls [`value_end`](Self::value_end). `None` after the
    /// closing brace.
    ///
    /// # Errors
    /// [`Invalid`] on a syntax error.
    pub fn next_member(&mut self) -> Result<Option<Member>, Invalid> {
        if self.done {
            return Ok(None);
        }
        let b = self.b;
        let mut i = skip_ws(b, self.i);
        if b.get(i) == Some(&b'}') {
            self.i = i;
            self.done = true;
            return Ok(None);
        }
        if self.members > 0 {
            if b.get(i) != Some(&b',') {
                return Err(Invalid);
            }
            i = skip_ws(b, i + 1);
        }
        let (key_end, key_escaped) = scan_string(b, i)?;
        let mut j = skip_ws(b, key_end);
        if b.get(j) != Some(&b':') {
            return Err(Invalid);
        }
        j = skip_ws(b, j + 1);
        self.members += 1;
        self.i = j;
        Ok(Some(Member {
            key: i + 1..key_end - 1,
            key_escaped,
            value_start: j,
            prev_end: self.last_end,
        }))
    }

    /// Skips (validating) the current member's value; returns its end.
    ///
    /// # Errors
    /// [`Invalid`] when the value is not valid JSON.
    pub fn skip_value(&mut self) -> Result<usize, Invalid> {
        let end = scan_value(self.b, self.i, self.depth)?;
        self.value_end(end);
        Ok(end)
    }

    /// Records that the current member's value, read by the caller, ends at
    /// `end`.
    pub fn value_end(&mut self, end: usize) {
        self.i = end;
        self.last_end = Some(end);
    }

    /// Offset of the closing `}` (valid once `next_member` returned `None`).
    #[must_use]
    pub fn close(&self) -> usize {
        self.i
    }

    /// Whether the object has members (so an added member needs a comma).
    #[must_use]
    pub fn has_members(&self) -> bool {
        self.members > 0
    }
}

/// Steps through the elements of one array.
#[derive(Debug)]
pub struct ArrayWalker<'a> {
    b: &'a [u8],
    i: usize,
    depth: u32,
    count: u32,
    done: bool,
}

impl<'a> ArrayWalker<'a> {
    /// Starts at the `[` at `b[i]`.
    ///
    /// # Errors
    /// [`Invalid`] if `b[i]` is not `[` or the nesting is too deep.
    pub fn new(b: &'a [u8], i: usize, depth: u32) -> Result<Self, Invalid> {
        if b.get(i) != Some(&b'[') || depth + 1 > MAX_DEPTH {
            return Err(Invalid);
        }
        Ok(ArrayWalker {
            b,
            i: i + 1,
            depth: depth + 1,
            count: 0,
            done: false,
        })
    }

    /// The nesting depth inside this array.
    #[must_use]
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Moves to the next element and returns its start; the caller consumes
    /// it like an [`ObjectWalker`] member. `None` after the closing bracket.
    ///
    /// # Errors
    /// [`Invalid`] on a syntax error.
    pub fn next_element(&mut self) -> Result<Option<usize>, Invalid> {
        if self.done {
            return Ok(None);
        }
        let b = self.b;
        let mut i = skip_ws(b, self.i);
        if b.get(i) == Some(&b']') {
            self.i = i;
            self.done = true;
            return Ok(None);
        }
        if self.count > 0 {
            if b.get(i) != Some(&b',') {
                return Err(Invalid);
            }
            i = skip_ws(b, i + 1);
        }
        self.count += 1;
        self.i = i;
        Ok(Some(i))
    }

    /// Skips (validating) the current element; returns its end.
    ///
    /// # Errors
    /// [`Invalid`] when the element is not valid JSON.
    pub fn skip_value(&mut self) -> Result<usize, Invalid> {
        let end = scan_value(self.b, self.i, self.depth)?;
        self.i = end;
        Ok(end)
    }

    /// Records that the current element ends at `end`.
    pub fn value_end(&mut self, end: usize) {
        self.i = end;
    }

    /// Offset of the closing `]` (valid once `next_element` returned `None`).
    #[must_use]
    pub fn close(&self) -> usize {
        self.i
    }

    /// Number of elements seen.
    #[must_use]
    pub fn len(&self) -> u32 {
        self.count
    }

    /// Whether no element was seen.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Decodes a raw JSON string body (between the quotes) leniently: invalid
/// escapes, lone surrogates and invalid UTF-8 become U+FFFD. Borrows when
/// there is nothing to decode.
#[must_use]
pub fn decode_str(raw: &[u8]) -> Cow<'_, str> {
    if memchr::memchr(b'\\', raw).is_none() {
        return String::from_utf8_lossy(raw);
    }
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    let mut pending_high: Option<u16> = None;
    while i < raw.len() {
        let Some(k) = memchr::memchr(b'\\', &raw[i..]) else {
            flush_high(&mut out, &mut pending_high);
            out.push_str(&String::from_utf8_lossy(&raw[i..]));
            break;
        };
        if k > 0 {
            flush_high(&mut out, &mut pending_high);
            out.push_str(&String::from_utf8_lossy(&raw[i..i + k]));
        }
        i += k;
        let c = raw.get(i + 1).copied();
        let simple = match c {
            Some(b'"') => Some('"'),
            Some(b'\\') => Some('\\'),
            Some(b'/') => Some('/'),
            Some(b'b') => Some('\u{8}'),
            Some(b'f') => Some('\u{c}'),
            Some(b'n') => Some('\n'),
            Some(b'r') => Some('\r'),
            Some(b't') => Some('\t'),
            _ => None,
        };
        if let Some(ch) = simple {
            flush_high(&mut out, &mut pending_high);
            out.push(ch);
            i += 2;
            continue;
        }
        let hex = raw
            .get(i + 2..i + 6)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
        let Some(hex) = (c == Some(b'u')).then_some(hex).flatten() else {
            flush_high(&mut out, &mut pending_high);
            out.push('\u{FFFD}');
            i += 1;
            continue;
        };
        let u = hex.iter().fold(0u16, |acc, &h| (acc << 4) | hex_val(h));
        i += 6;
        match u {
            0xD800..=0xDBFF => {
                flush_high(&mut out, &mut pending_high);
                pending_high = Some(u);
            }
            0xDC00..=0xDFFF => match pending_high.take() {
                Some(h) => {
                    let cp = 0x10000 + ((u32::from(h) - 0xD800) << 10) + (u32::from(u) - 0xDC00);
                    out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                }
                None => out.push('\u{FFFD}'),
            },
            _ => {
                flush_high(&mut out, &mut pending_high);
                out.push(char::from_u32(u32::from(u)).unwrap_or('\u{FFFD}'));
            }
        }
    }
    flush_high(&mut out, &mut pending_high);
    Cow::Owned(out)
}

fn flush_high(out: &mut String, pending: &mut Option<u16>) {
    if pending.take().is_some() {
        out.push('\u{FFFD}');
    }
}

fn hex_val(h: u8) -> u16 {
    match h {
        b'0'..=b'9' => u16::from(h - b'0'),
        b'a'..=b'f' => u16::from(h - b'a' + 10),
        _ => u16::from(h - b'A' + 10),
    }
}

/// Parses a JSON number that is a plain non-negative integer fitting `u32`.
#[must_use]
pub fn parse_u32(raw: &[u8]) -> Option<u32> {
    if raw.is_empty() || raw.len() > 10 || (raw.len() > 1 && raw[0] == b'0') {
        return None;
    }
    let mut v: u64 = 0;
    for &d in raw {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(d - b'0');
    }
    u32::try_from(v).ok()
}

/// Edits to apply to a buffer: replace spans (sorted, non-overlapping) with
/// new bytes. Used to splice members into an object without re-serializing.
#[derive(Debug, Default)]
pub struct Splice {
    edits: Vec<(Range<usize>, Vec<u8>)>,
}

impl Splice {
    /// No edits.
    #[must_use]
    pub fn new() -> Self {
        Splice::default()
    }

    /// Replaces `span` with `with` (an empty span inserts).
    pub fn replace(&mut self, span: Range<usize>, with: impl Into<Vec<u8>>) {
        self.edits.push((span, with.into()));
    }

    /// Whether there is nothing to do.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.edits.is_empty()
    }

    /// Applies the edits to `b`, appending the result to `out`. Edits are
    /// applied in span order; an edit overlapping an earlier one is dropped
    /// (callers never produce overlaps).
    pub fn apply(&mut self, b: &[u8], out: &mut Vec<u8>) {
        self.edits.sort_by_key(|(r, _)| (r.start, r.end));
        let mut at = 0;
        for (r, with) in &self.edits {
            if r.start < at || r.end > b.len() {
                continue;
            }
            out.extend_from_slice(&b[at..r.start]);
            out.extend_from_slice(with);
            at = r.end;
        }
        out.extend_from_slice(&b[at..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(s: &str) -> bool {
        let b = s.as_bytes();
        let i = skip_ws(b, 0);
        matches!(scan_value(b, i, 0), Ok(end) if skip_ws(b, end) == b.len())
    }

    #[test]
    fn validates_like_serde_json() {
        for s in [
            "{}",
            "[]",
            "[1,2]",
            r#"{"a":[{"b":null}],"c":"\u00e9\n"}"#,
            "-0.5e+3",
            "true",
            r#" { "a" : 1 } "#,
            "[[[]]]",
            r#""\/""#,
        ] {
            assert!(valid(s), "{s}");
            assert!(serde_json::from_str::<serde_json::Value>(s).is_ok(), "{s}");
        }
        for s in [
            "{",
            "[1,]",
            "{\"a\"}",
            "{\"a\":}",
            "01",
            "1.",
            "-",
            "tru",
            "\"\\x\"",
            "\"a\nb\"",
            "[1 2]",
            "{\"a\":1,}",
            "{,}",
            "\"\\u12g4\"",
            "[}",
            "{]",
        ] {
            assert!(!valid(s), "{s}");
            assert!(serde_json::from_str::<serde_json::Value>(s).is_err(), "{s}");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(!valid(&deep));
    }

    #[test]
    fn decodes_escapes() {
        assert_eq!(
            decode_str(br"a\u00e9\ud83d\ude00\n\/"),
            "a\u{e9}\u{1F600}\n/"
        );
        assert_eq!(decode_str(br"\ud83d"), "\u{FFFD}");
        assert_eq!(decode_str(br"\ude00x"), "\u{FFFD}x");
        assert_eq!(decode_str(br"\ud83d\u0041"), "\u{FFFD}A");
    }

    #[test]
    fn removal_keeps_json_valid() {
        for (src, key, want) in [
            (r#"{"a":1,"b":2,"c":3}"#, "b", r#"{"a":1,"c":3}"#),
            (r#"{"a":1, "b":2}"#, "a", r#"{"b":2}"#),
            (r#"{"a":1, "b":2}"#, "b", r#"{"a":1}"#),
            (r#"{ "a" : 1 }"#, "a", r#"{  }"#),
        ] {
            let b = src.as_bytes();
            let mut w = ObjectWalker::new(b, 0, 0).unwrap();
            let mut sp = Splice::new();
            while let Some(m) = w.next_member().unwrap() {
                let end = w.skip_value().unwrap();
                if m.key_is(b, key) {
                    sp.replace(removal_span(b, &m, end), Vec::new());
                }
            }
            let mut out = Vec::new();
            sp.apply(b, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }
}

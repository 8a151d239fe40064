//! The validating skipper: whitespace, strings, numbers and whole values,
//! checked against the JSON grammar and reported as end offsets.
//!
//! Everything else in [`crate::json`] that steps over a value calls
//! [`scan_value`] or [`scan_string`]; they never allocate and never
//! recurse (nesting is a bit stack, at most [`MAX_DEPTH`] deep).

use super::string::simple_escape;
use super::{Invalid, MAX_DEPTH};

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
///
/// Two byte tests instead of three: `"` (0x22) XOR 0x02 is 0x20 while the
/// control characters stay below 0x20 (XOR 0x02 permutes 0x00–0x1F), so
/// one "byte below 0x21" test on `w ^ 0x02…` finds both; a "byte is zero"
/// test on `w ^ 0x5C…` finds `\`. (`x - 0x21… & !x & 0x80…` flags the
/// lowest byte below 0x21 exactly; borrows only make false positives above
/// it.)
#[inline(always)]
fn string_special(w: u64) -> u64 {
    let t = w ^ (LO * 0x02);
    let s = w ^ (LO * u64::from(b'\\'));
    ((t.wrapping_sub(LO * 0x21) & !t) | (s.wrapping_sub(LO) & !s)) & HI
}

/// Validates the string starting at `b[i]` (which must be `"`).
///
/// Returns the index just after the closing quote and whether the string
/// contains a backslash escape. Scans sixteen bytes at a time with SSE2,
/// eight (a SWAR word) elsewhere.
///
/// # Errors
/// [`Invalid`] for an unterminated string, a raw control character, or a
/// malformed escape.
#[inline(always)]
pub fn scan_string(b: &[u8], i: usize) -> Result<(usize, bool), Invalid> {
    if b.get(i) != Some(&b'"') {
        return Err(Invalid);
    }
    // With SSE2, sixteen bytes after the quote in one block test (below
    // that, the words).
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "sse2",
        not(citestream_disable_simd)
    ))]
    {
        if let Some(block) = b.get(i + 1..).and_then(<[u8]>::first_chunk::<16>) {
            return string_block(b, i + 1, block);
        }
    }
    // Most strings of a chunk (keys, short tokens) end within the word
    // after the opening quote without an escape: one word test, inlined
    // into the caller, then the second word; the loop (out of line) goes
    // on from where these tests stopped, without testing a word again.
    let mut at = i + 1;
    if let Some(word) = b.get(at..at + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let m = string_special(u64::from_le_bytes(w));
        if m == 0 {
            at += 8;
        } else {
            let k = (m.trailing_zeros() / 8) as usize;
            if w[k & 7] == b'"' {
                return Ok((at + k + 1, false));
            }
            return string_rest(b, at + k);
        }
    }
    string_second(b, at)
}

/// The end of the string starting at `b[i]` (a `"`) when it is short and
/// plain, from one block test without a loop or a call: with SSE2, closed
/// without an escape within the sixteen bytes after the quote, or within
/// the last sixteen bytes of `b` when fewer remain after the quote (the
/// end of an event); without, within the word after the quote. Then
/// [`scan_string`] gives `Ok((end, false))`; `None` says nothing (ask
/// [`scan_string`]).
#[inline(always)]
#[must_use]
pub fn short_string_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let at = i + 1;
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "sse2",
        not(citestream_disable_simd)
    ))]
    {
        // (The bytes before `at` in the last block are not the string's:
        // masked off, without a shift by a variable count.)
        // (From 16 on, none: the string has no byte in the block.)
        const FROM: [u32; 32] = {
            let mut m = [0; 32];
            let mut k = 0;
            while k < 32 {
                m[k] = !0 << k;
                k += 1;
            }
            m
        };
        let from = at.min(b.len().checked_sub(16)?);
        let block = b.get(from..)?.first_chunk::<16>()?;
        let m = super::simd::special_mask(block) & FROM[(at - from) & 31];
        if m == 0 {
            return None;
        }
        let k = m.trailing_zeros() as usize;
        (block[k & 15] == b'"').then_some(from + k + 1)
    }
    #[cfg(not(all(
        target_arch = "x86_64",
        target_feature = "sse2",
        not(citestream_disable_simd)
    )))]
    {
        let w = *b.get(at..)?.first_chunk::<8>()?;
        let m = string_special(u64::from_le_bytes(w));
        if m == 0 {
            return None;
        }
        let k = (m.trailing_zeros() / 8) as usize;
        (w[k & 7] == b'"').then_some(at + k + 1)
    }
}

/// [`scan_string`] past the opening quote at `at - 1`, `block` the
/// sixteen bytes from `at`, inlined into the caller: most strings of a
/// chunk (keys, short tokens) end within them without an escape, so one
/// SSE2 block test ([`super::simd`]) ends them without a call; the loop
/// (out of line) goes on from where this test stopped, without testing a
/// byte again.
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "sse2",
    not(citestream_disable_simd)
))]
#[inline(always)]
fn string_block(b: &[u8], at: usize, block: &[u8; 16]) -> Result<(usize, bool), Invalid> {
    let m = super::simd::special_mask(block);
    if m == 0 {
        return string_rest(b, at + 16);
    }
    let k = m.trailing_zeros() as usize;
    if block[k & 15] == b'"' {
        return Ok((at + k + 1, false));
    }
    string_rest(b, at + k)
}

/// [`scan_string`] past its first word (nothing before `at` is special):
/// one more word tested before the loop, so that keys and values of 8 to
/// 15 bytes (`finish_reason`, `prompt_tokens`, a reasoning token) end
/// without a call.
#[inline]
fn string_second(b: &[u8], at: usize) -> Result<(usize, bool), Invalid> {
    if let Some(word) = b.get(at..at + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let m = string_special(u64::from_le_bytes(w));
        if m == 0 {
            return string_rest(b, at + 8);
        }
        let k = (m.trailing_zeros() / 8) as usize;
        if w[k & 7] == b'"' {
            return Ok((at + k + 1, false));
        }
        return string_rest(b, at + k);
    }
    string_rest(b, at)
}

/// [`scan_string`] of the string whose opening quote is before `i`, for a
/// caller whose own scan found nothing special (`"`, `\\`, a control
/// character) between the quote and `i`: the index after the closing
/// quote and whether the string holds an escape from `i` on.
///
/// # Errors
/// As [`scan_string`], for the bytes from `i`.
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "sse2",
    not(citestream_disable_simd)
))]
#[inline]
pub fn scan_string_rest(b: &[u8], i: usize) -> Result<(usize, bool), Invalid> {
    string_rest(b, i)
}

/// The rest of the string whose opening quote is before `i` (nothing
/// before `i` is special), as [`scan_string`] returns it.
fn string_rest(b: &[u8], mut i: usize) -> Result<(usize, bool), Invalid> {
    let mut escaped = false;
    loop {
        #[cfg(all(
            target_arch = "x86_64",
            target_feature = "sse2",
            not(citestream_disable_simd)
        ))]
        {
            i = plain_end(b, i);
        }
        #[cfg(not(all(
            target_arch = "x86_64",
            target_feature = "sse2",
            not(citestream_disable_simd)
        )))]
        {
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
        }
        match *b.get(i).ok_or(Invalid)? {
            b'"' => return Ok((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                match b.get(i + 1) {
                    Some(&e) if simple_escape(e).is_some() => i += 2,
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

/// Index of the first byte at or after `i` that is `"`, `\` or below
/// 0x20, or the end of `b`: sixteen bytes per step with SSE2
/// ([`super::simd`]), a byte per step for inputs shorter than sixteen
/// bytes.
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "sse2",
    not(citestream_disable_simd)
))]
#[inline(always)]
fn plain_end(b: &[u8], mut i: usize) -> usize {
    if let Some(j) = super::simd::special_from(b, i) {
        return j;
    }
    while b
        .get(i)
        .is_some_and(|&c| c != b'"' && c != b'\\' && c >= 0x20)
    {
        i += 1;
    }
    i
}

/// [`scan_string`]'s reference, a byte at a time, the grammar as written
/// (its end offset, escape flag and errors are `scan_string`'s): for the
/// tests and the fuzz targets, which compare the two.
///
/// # Errors
/// As [`scan_string`].
#[cfg(any(test, fuzzing))]
pub fn naive_string(b: &[u8], i: usize) -> Result<(usize, bool), Invalid> {
    if b.get(i) != Some(&b'"') {
        return Err(Invalid);
    }
    // One byte per step through three states: plain text, just after a
    // backslash, inside a `\u` escape with `hex_due` digits still due.
    let (mut escaped, mut after_backslash, mut hex_due) = (false, false, 0u8);
    for (k, &c) in b.iter().enumerate().skip(i + 1) {
        if hex_due > 0 {
            if !c.is_ascii_hexdigit() {
                return Err(Invalid);
            }
            hex_due -= 1;
        } else if after_backslash {
            after_backslash = false;
            match c {
                b'u' => hex_due = 4,
                _ if simple_escape(c).is_some() => {}
                _ => return Err(Invalid),
            }
        } else if c == b'"' {
            return Ok((k + 1, escaped));
        } else if c == b'\\' {
            (escaped, after_backslash) = (true, true);
        } else if c < 0x20 {
            return Err(Invalid);
        }
    }
    // The input ended inside the string (or inside an escape).
    Err(Invalid)
}

/// Validates the number starting at `b[i]`; returns the index after it.
///
/// # Errors
/// [`Invalid`] when the bytes do not follow the JSON number grammar.
pub fn scan_number(b: &[u8], mut i: usize) -> Result<usize, Invalid> {
    let digits = |b: &[u8], i: usize| -> Result<usize, Invalid> {
        let end = digits_end(b, i);
        if end == i { Err(Invalid) } else { Ok(end) }
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

/// High bit set in the lowest byte of `w` that is not an ASCII digit (bits
/// above it may be false positives). With `t = w ^ 0x30…` a digit is a byte
/// `t` below 10: `t + 0x76` sets the high bit exactly when `t` is 10 to
/// 0x89, `t` itself has it from 0x80 on; a carry out of a byte only comes
/// from a byte already flagged.
#[inline(always)]
fn non_digit(w: u64) -> u64 {
    let t = w ^ (LO * 0x30);
    (t.wrapping_add(LO * 0x76) | t) & HI
}

/// How many ASCII digits the little-endian word `w` starts with (8 when
/// all its bytes are).
#[inline(always)]
#[must_use]
pub fn leading_digits(w: u64) -> usize {
    (non_digit(w).trailing_zeros() / 8) as usize
}

/// The end of the run of ASCII digits starting at `b[i]` (eight at a time).
#[inline]
#[must_use]
pub fn digits_end(b: &[u8], mut i: usize) -> usize {
    while let Some(word) = b.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let m = non_digit(u64::from_le_bytes(w));
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
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

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(s: &str) -> bool {
        let b = s.as_bytes();
        let i = skip_ws(b, 0);
        matches!(scan_value(b, i, 0), Ok(end) if skip_ws(b, end) == b.len())
    }

    #[test]
    fn string_special_finds_the_lowest_special_byte() {
        let special = |c: u8| c == b'"' || c == b'\\' || c < 0x20;
        for c in 0..=255u8 {
            for at in 0..8 {
                for fill in [b'a', 0x21, 0x23, 0x5B, 0x5D, 0x80, 0xFF, b' '] {
                    let mut w = [fill; 8];
                    w[at] = c;
                    let m = string_special(u64::from_le_bytes(w));
                    let want = w.iter().position(|&b| special(b));
                    let got = (m != 0).then(|| (m.trailing_zeros() / 8) as usize);
                    assert_eq!(got, want, "byte {c:#x} at {at} in {fill:#x}");
                }
            }
        }
    }

    #[test]
    fn scan_string_matches_a_bytewise_reference() {
        // Each special byte at each position of a body of up to 64 bytes
        // (the first words, the SSE2 blocks and the SWAR words), the
        // string at several offsets in the input, and inputs that end at
        // the string's end or a few bytes after it (the SSE2 path's last,
        // overlapping block) or inside it; where `short_string_end`
        // answers, the same.
        let specials: [&[u8]; 9] = [
            b"\"",
            b"\\",
            b"\\n",
            b"\\u00e9",
            b"\\u00g9",
            b"\\x",
            b"\n",
            b"\x1f",
            b"\xc3\xa9",
        ];
        let tails: [&[u8]; 6] = [
            b"",
            b"\"",
            b"\"}",
            b"\"12345",
            b"\"123456789abcd",
            b"\"\"\"\\",
        ];
        let mut short = 0;
        for len in 0..64 {
            for at in 0..=len {
                for special in specials {
                    for off in [0, 1, 7, 8, 15, 16] {
                        let mut s = vec![b'x'; off];
                        s.push(b'"');
                        s.extend(std::iter::repeat_n(b'a', at));
                        s.extend_from_slice(special);
                        s.extend(std::iter::repeat_n(b'b', len - at));
                        for tail in tails {
                            let mut t = s.clone();
                            t.extend_from_slice(tail);
                            let want = naive_string(&t, off);
                            let text = String::from_utf8_lossy(&t);
                            assert_eq!(scan_string(&t, off), want, "{off} {text:?}");
                            if let Some(end) = short_string_end(&t, off) {
                                assert_eq!(want, Ok((end, false)), "{off} {text:?}");
                                short += 1;
                            }
                        }
                    }
                }
            }
        }
        // (`short_string_end` answers for the strings that close early.)
        assert!(short > 10_000, "{short}");
    }

    #[test]
    fn non_digit_finds_the_lowest_non_digit() {
        for c in 0..=255u8 {
            for at in 0..8 {
                for fill in [b'0', b'5', b'9'] {
                    let mut w = [fill; 8];
                    w[at] = c;
                    let m = non_digit(u64::from_le_bytes(w));
                    let want = w.iter().position(|b| !b.is_ascii_digit());
                    let got = (m != 0).then(|| (m.trailing_zeros() / 8) as usize);
                    assert_eq!(got, want, "byte {c:#x} at {at}");
                }
            }
        }
        for s in [
            "0",
            "12345678",
            "123456789",
            "1234567890123456789x",
            "12a",
            "x",
        ] {
            let want = s.bytes().take_while(u8::is_ascii_digit).count();
            assert_eq!(digits_end(s.as_bytes(), 0), want, "{s}");
        }
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
}

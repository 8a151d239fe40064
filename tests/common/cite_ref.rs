//! A slow, deliberately plain reference for the citation marker rules
//! (docs/reference/responses.md, "Markers"), written independently of `citestream::cite`.
//!
//! It works on whole contents: decode everything to a `Vec<char>`, split it
//! into lines, classify lines into fenced blocks and paragraphs, resolve
//! inline code spans on each whole paragraph, then look at every `[`.

use citestream::cite::{Marker, OffsetUnit};

const REPLACEMENT: char = '\u{FFFD}';

/// Something the JSON decoder read, before surrogate pairing.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Piece {
    Char(char),
    /// The code unit of a complete `\uXXXX` escape.
    Unit(u16),
}

/// Decodes the body of a JSON string (escapes not yet decoded).
///
/// Raw bytes between escapes are UTF-8 decoded lossily. A backslash followed
/// by something that is not a valid escape gives one U+FFFD for the part up
/// to the offending byte, which is then read normally. Surrogate escapes
/// pair up only when a high one is directly followed by a low one; every
/// other surrogate is one U+FFFD.
pub fn decode_json(escaped: &[u8]) -> Vec<char> {
    let mut pieces = Vec::new();
    let mut raw = Vec::new();
    let mut i = 0;
    while i < escaped.len() {
        if escaped[i] != b'\\' {
            raw.push(escaped[i]);
            i += 1;
            continue;
        }
        flush_raw(&mut raw, &mut pieces);
        let simple = match escaped.get(i + 1) {
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
        if let Some(c) = simple {
            pieces.push(Piece::Char(c));
            i += 2;
        } else if escaped.get(i + 1) == Some(&b'u') {
            let after_u = escaped.get(i + 2..).unwrap_or(&[]);
            let hex_digits = after_u
                .iter()
                .take(4)
                .take_while(|b| b.is_ascii_hexdigit())
                .count();
            if hex_digits == 4 {
                let hex = std::str::from_utf8(&after_u[..4]).unwrap();
                pieces.push(Piece::Unit(u16::from_str_radix(hex, 16).unwrap()));
                i += 6;
            } else {
                // `\u` plus the hex digits that were there: one U+FFFD.
                pieces.push(Piece::Char(REPLACEMENT));
                i += 2 + hex_digits;
            }
        } else {
            // A lone backslash (invalid escape or end of input).
            pieces.push(Piece::Char(REPLACEMENT));
            i += 1;
        }
    }
    flush_raw(&mut raw, &mut pieces);

    let mut out = Vec::new();
    let mut k = 0;
    while k < pieces.len() {
        match pieces[k] {
            Piece::Char(c) => out.push(c),
            Piece::Unit(high @ 0xD800..=0xDBFF) => {
                if let Some(&Piece::Unit(low @ 0xDC00..=0xDFFF)) = pieces.get(k + 1) {
                    let scalar =
                        0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                    out.push(char::from_u32(scalar).unwrap());
                    k += 2;
                    continue;
                }
                out.push(REPLACEMENT);
            }
            Piece::Unit(unit) => out.push(char::from_u32(u32::from(unit)).unwrap_or(REPLACEMENT)),
        }
        k += 1;
    }
    out
}

fn flush_raw(raw: &mut Vec<u8>, pieces: &mut Vec<Piece>) {
    pieces.extend(String::from_utf8_lossy(raw).chars().map(Piece::Char));
    raw.clear();
}

/// Decodes UTF-8 text lossily.
pub fn decode_text(text: &[u8]) -> Vec<char> {
    String::from_utf8_lossy(text).chars().collect()
}

/// A line of the content: char indices `start..end`, the LF excluded.
#[derive(Clone, Copy, Debug)]
struct LineRange {
    start: usize,
    end: usize,
}

fn split_lines(text: &[char]) -> Vec<LineRange> {
    let mut lines = Vec::new();
    let mut start = 0;
    for (i, &c) in text.iter().enumerate() {
        if c == '\n' {
            lines.push(LineRange { start, end: i });
            start = i + 1;
        }
    }
    lines.push(LineRange {
        start,
        end: text.len(),
    });
    lines
}

fn is_blank(line: &[char]) -> bool {
    line.iter().all(|&c| c == ' ' || c == '\t' || c == '\r')
}

fn leading_spaces(line: &[char]) -> usize {
    line.iter().take_while(|&&c| c == ' ').count()
}

/// `Some((fence char, run length))` when the line opens a fenced block.
fn fence_opening(line: &[char]) -> Option<(char, usize)> {
    let indent = leading_spaces(line);
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ch = *rest.first()?;
    if ch != '`' && ch != '~' {
        return None;
    }
    let run = rest.iter().take_while(|&&c| c == ch).count();
    (run >= 3).then_some((ch, run))
}

fn fence_closes(line: &[char], ch: char, len: usize) -> bool {
    let indent = leading_spaces(line);
    if indent > 3 {
        return false;
    }
    let rest = &line[indent..];
    let run = rest.iter().take_while(|&&c| c == ch).count();
    run >= len && is_blank(&rest[run..])
}

/// Which characters are code (inside a fenced block or an inline span).
fn code_mask(text: &[char]) -> Vec<bool> {
    let mut code = vec![false; text.len()];
    let mut fence: Option<(char, usize)> = None;
    let mut paragraph: Vec<LineRange> = Vec::new();
    for line in split_lines(text) {
        let chars = &text[line.start..line.end];
        match fence {
            Some((ch, len)) => {
                code[line.start..line.end].fill(true);
                if fence_closes(chars, ch, len) {
                    fence = None;
                }
            }
            None => {
                if let Some(opening) = fence_opening(chars) {
                    mark_code_spans(text, &paragraph, &mut code);
                    paragraph.clear();
                    code[line.start..line.end].fill(true);
                    fence = Some(opening);
                } else if is_blank(chars) {
                    mark_code_spans(text, &paragraph, &mut code);
                    paragraph.clear();
                } else {
                    paragraph.push(line);
                }
            }
        }
    }
    mark_code_spans(text, &paragraph, &mut code);
    code
}

/// Resolves the inline code spans of one paragraph (consecutive lines).
fn mark_code_spans(text: &[char], paragraph: &[LineRange], code: &mut [bool]) {
    let (Some(first), Some(last)) = (paragraph.first(), paragraph.last()) else {
        return;
    };
    // Maximal backtick runs as (start, length).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = first.start;
    while i < last.end {
        if text[i] == '`' {
            let len = text[i..last.end].iter().take_while(|&&c| c == '`').count();
            runs.push((i, len));
            i += len;
        } else {
            i += 1;
        }
    }
    let mut r = 0;
    while r < runs.len() {
        let (open_at, len) = runs[r];
        match (r + 1..runs.len()).find(|&s| runs[s].1 == len) {
            Some(s) => {
                let close_end = runs[s].0 + len;
                code[open_at..close_end].fill(true);
                r = s + 1;
            }
            None => r += 1,
        }
    }
}

fn width(c: char, unit: OffsetUnit) -> u64 {
    match unit {
        OffsetUnit::Chars => 1,
        OffsetUnit::Utf16 => c.len_utf16() as u64,
        OffsetUnit::Bytes => c.len_utf8() as u64,
    }
}

/// Length of the decoded content in `unit`.
pub fn length(text: &[char], unit: OffsetUnit) -> u64 {
    text.iter().map(|&c| width(c, unit)).sum()
}

/// The markers of a decoded content.
pub fn markers(text: &[char], max_number: u32, unit: OffsetUnit) -> Vec<Marker> {
    let code = code_mask(text);
    // offset[i] = position of char i in `unit`.
    let mut offset = Vec::with_capacity(text.len() + 1);
    let mut at = 0;
    for &c in text {
        offset.push(at);
        at += width(c, unit);
    }
    offset.push(at);

    let mut found = Vec::new();
    for i in 0..text.len() {
        if text[i] != '[' || (i > 0 && text[i - 1] == '\\') {
            continue;
        }
        let digits: String = text[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let close = i + 1 + digits.len();
        if digits.is_empty()
            || digits.len() > 4
            || digits.starts_with('0')
            || text.get(close) != Some(&']')
        {
            continue;
        }
        let number: u32 = digits.parse().unwrap();
        if number < 1 || number > max_number {
            continue;
        }
        if code[i..=close].iter().any(|&c| c) {
            continue;
        }
        found.push(Marker {
            number,
            start: offset[i],
            end: offset[close + 1],
        });
    }
    found
}

/// Markers of a raw JSON string body.
pub fn markers_json(escaped: &[u8], max_number: u32, unit: OffsetUnit) -> Vec<Marker> {
    markers(&decode_json(escaped), max_number, unit)
}

/// Markers of UTF-8 text.
pub fn markers_text(text: &[u8], max_number: u32, unit: OffsetUnit) -> Vec<Marker> {
    markers(&decode_text(text), max_number, unit)
}

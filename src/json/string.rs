//! String and number values: decoding a string's raw body, writing a
//! string literal, reading a small integer.

use std::borrow::Cow;

/// The JSON escape table: the byte a one-letter escape (`\n`, `\"`, ...)
/// stands for, given the letter after the backslash; `None` for `u` (a
/// `\uXXXX` escape) and for every letter JSON has no escape for. The one
/// copy: the decoder here, the string scans of [`super::skip`] and the
/// marker tracker's decoding ([`crate::cite`]) all read it.
#[inline]
#[must_use]
pub(crate) const fn simple_escape(b: u8) -> Option<u8> {
    match b {
        b'"' | b'\\' | b'/' => Some(b),
        b'b' => Some(0x08),
        b'f' => Some(0x0C),
        b'n' => Some(b'\n'),
        b'r' => Some(b'\r'),
        b't' => Some(b'\t'),
        _ => None,
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
        if let Some(ch) = c.and_then(simple_escape) {
            flush_high(&mut out, &mut pending_high);
            out.push(char::from(ch));
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

/// Appends `s` as a JSON string literal (quotes included), escaped as
/// serde_json escapes it.
pub fn push_json_str(out: &mut String, s: &str) {
    // serde_json's escaping is the reference; a `str` never fails to
    // serialize.
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\"")));
}

/// The decoded value of a string token (quotes included), `None` when
/// `token` is not a string token.
#[must_use]
pub fn decode_token(token: &[u8]) -> Option<String> {
    match token {
        [b'"', body @ .., b'"'] => Some(decode_str(body).into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

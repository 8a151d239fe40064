//! A minimal scanner over JSON text that serde_json has already validated.
//!
//! It finds where the members of an object and the elements of an array lie
//! in the original bytes, so the request module can splice (cut out, insert)
//! without re-serializing anything. Every function is defensive: on input
//! that is not valid JSON it returns `None` instead of panicking, but the
//! results are only meaningful on validated input.

use std::ops::Range;

/// One member of a JSON object: byte ranges of the key literal (quotes
/// included) and of the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) key: Range<usize>,
    pub(crate) value: Range<usize>,
}

pub(crate) fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

pub(crate) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|&c| is_ws(c)) {
        i += 1;
    }
    i
}

/// `i` is at an opening quote; returns the index just after the closing one.
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        match *b.get(j)? {
            b'"' => return Some(j + 1),
            b'\\' => j += 2,
            _ => j += 1,
        }
    }
}

/// `i` is at the first byte of a value; returns the index just after it.
pub(crate) fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *b.get(j)? {
                    b'"' => {
                        j = skip_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while let Some(&c) = b.get(j) {
                if is_ws(c) || matches!(c, b',' | b'}' | b']') {
                    break;
                }
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

/// The members of the object whose `{` is at `i`, in order.
pub(crate) fn members(b: &[u8], i: usize) -> Option<Vec<Member>> {
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut out = Vec::new();
    let mut j = skip_ws(b, i + 1);
    if b.get(j) == Some(&b'}') {
        return Some(out);
    }
    loop {
        let ks = j;
        let ke = skip_string(b, ks)?;
        j = skip_ws(b, ke);
        if b.get(j) != Some(&b':') {
            return None;
        }
        let vs = skip_ws(b, j + 1);
        let ve = skip_value(b, vs)?;
        out.push(Member {
            key: ks..ke,
            value: vs..ve,
        });
        j = skip_ws(b, ve);
        match *b.get(j)? {
            b',' => j = skip_ws(b, j + 1),
            b'}' => return Some(out),
            _ => return None,
        }
    }
}

/// The elements of the array whose `[` is at `i`, in order.
pub(crate) fn elements(b: &[u8], i: usize) -> Option<Vec<Range<usize>>> {
    if b.get(i) != Some(&b'[') {
        return None;
    }
    let mut out = Vec::new();
    let mut j = skip_ws(b, i + 1);
    if b.get(j) == Some(&b']') {
        return Some(out);
    }
    loop {
        let e = skip_value(b, j)?;
        out.push(j..e);
        j = skip_ws(b, e);
        match *b.get(j)? {
            b',' => j = skip_ws(b, j + 1),
            b']' => return Some(out),
            _ => return None,
        }
    }
}

/// True when the key literal `raw` (quotes included) decodes to `name`.
pub(crate) fn key_is(raw: &[u8], name: &str) -> bool {
    if !raw.contains(&b'\\') {
        return raw.len() == name.len() + 2 && raw.get(1..raw.len() - 1) == Some(name.as_bytes());
    }
    decode_str(raw).is_some_and(|s| s == name)
}

/// Looks up member `name` in a member list; the last one wins (serde_json's
/// `Value` semantics for duplicate keys).
pub(crate) fn find<'m>(b: &[u8], ms: &'m [Member], name: &str) -> Option<&'m Member> {
    ms.iter()
        .rev()
        .find(|m| b.get(m.key.clone()).is_some_and(|k| key_is(k, name)))
}

/// Decodes a JSON string literal (quotes included). A lone surrogate escape
/// becomes U+FFFD instead of an error. Returns `None` if `raw` is not a
/// string literal.
pub(crate) fn decode_str(raw: &[u8]) -> Option<String> {
    if raw.len() < 2 || raw.first() != Some(&b'"') || raw.last() != Some(&b'"') {
        return None;
    }
    let inner = raw.get(1..raw.len() - 1)?;
    if !inner.contains(&b'\\') {
        return Some(String::from_utf8_lossy(inner).into_owned());
    }
    let mut out: Vec<u8> = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let c = inner[i];
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = *inner.get(i + 1)?;
        i += 2;
        let ch = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = hex4(inner.get(i..i + 4)?)?;
                i += 4;
                if (0xD800..0xDC00).contains(&hi) {
                    let lo = if inner.get(i) == Some(&b'\\') && inner.get(i + 1) == Some(&b'u') {
                        inner.get(i + 2..i + 6).and_then(hex4)
                    } else {
                        None
                    };
                    match lo {
                        Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                            i += 6;
                            let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                            char::from_u32(cp).unwrap_or('\u{FFFD}')
                        }
                        _ => '\u{FFFD}',
                    }
                } else {
                    char::from_u32(hi).unwrap_or('\u{FFFD}')
                }
            }
            _ => return None,
        };
        let mut buf = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn hex4(h: &[u8]) -> Option<u32> {
    if h.len() != 4 {
        return None;
    }
    let mut v = 0u32;
    for &c in h {
        let d = (c as char).to_digit(16)?;
        v = v * 16 + d;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_elements() {
        let b = br#" { "a" : [1, {"x":"]}"}] , "b\"":"s\\" ,"c":-1.5e3,"d":{}} "#;
        let ms = members(b, 1).unwrap();
        assert_eq!(ms.len(), 4);
        assert_eq!(&b[ms[0].value.clone()], br#"[1, {"x":"]}"}]"#);
        assert_eq!(&b[ms[1].key.clone()], br#""b\"""#);
        assert_eq!(&b[ms[2].value.clone()], b"-1.5e3");
        let els = elements(b, ms[0].value.start).unwrap();
        assert_eq!(els.len(), 2);
        assert_eq!(&b[els[1].clone()], br#"{"x":"]}"}"#);
        assert!(find(b, &ms, "d").is_some());
        assert!(find(b, &ms, "b\"").is_some());
    }

    #[test]
    fn decode_lenient() {
        assert_eq!(decode_str(br#""a\u00e9\ud83d\ude00\n""#).unwrap(), "aé😀\n");
        assert_eq!(decode_str(br#""\ud800x""#).unwrap(), "\u{FFFD}x");
        assert_eq!(decode_str(br#""\udc00""#).unwrap(), "\u{FFFD}");
        assert_eq!(decode_str(br#""\ud800\u0041""#).unwrap(), "\u{FFFD}A");
        assert!(key_is(br#""web\u005fsearch""#, "web_search"));
        assert!(!key_is(br#""web_searc""#, "web_search"));
    }

    #[test]
    fn garbage_never_panics() {
        for b in [
            &b"{"[..],
            b"{\"a\"",
            b"{\"a\":",
            b"[1,",
            b"\"\\",
            b"{\"a\":1,}",
            b"[",
            b"}",
        ] {
            let _ = members(b, 0);
            let _ = elements(b, 0);
            let _ = skip_value(b, 0);
            let _ = decode_str(b);
        }
    }
}

//! Lookups in JSON text already known to be valid (a request body that
//! serde_json accepted): the members of an object, the elements of an
//! array, a member by name. Any nesting depth (serde_json accepts request
//! bodies nested deeper than [`MAX_DEPTH`](super::MAX_DEPTH) when it skips
//! them), no validation: on text that is not valid JSON these return
//! `None` or meaningless spans, never panic. For untrusted text use the
//! validating [`ObjectWalker`](super::ObjectWalker) instead.

use std::ops::Range;

use super::{Field, Member, skip_ws};

/// `b[i]` is an opening quote; returns the index just after the closing
/// one.
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

/// `b[i]` is the first byte of a value of valid JSON text; returns the
/// index just after it (iterative, any depth).
#[must_use]
pub fn skip_valid(b: &[u8], i: usize) -> Option<usize> {
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
                if matches!(c, b' ' | b'\t' | b'\n' | b'\r' | b',' | b'}' | b']') {
                    break;
                }
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

/// The members of the valid object whose `{` is at `b[i]`, in order.
#[must_use]
pub fn members(b: &[u8], i: usize) -> Option<Vec<Field>> {
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut out = Vec::new();
    let mut j = skip_ws(b, i + 1);
    if b.get(j) == Some(&b'}') {
        return Some(out);
    }
    let mut prev_end = None;
    loop {
        let key_end = skip_string(b, j)?;
        let key = j + 1..key_end - 1;
        let key_escaped = b[key.clone()].contains(&b'\\');
        j = skip_ws(b, key_end);
        if b.get(j) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, j + 1);
        let end = skip_valid(b, value_start)?;
        out.push(Field {
            member: Member {
                key,
                key_escaped,
                value_start,
                prev_end,
            },
            end,
        });
        prev_end = Some(end);
        j = skip_ws(b, end);
        match *b.get(j)? {
            b',' => j = skip_ws(b, j + 1),
            b'}' => return Some(out),
            _ => return None,
        }
    }
}

/// The spans of the elements of the valid array whose `[` is at `b[i]`,
/// in order.
#[must_use]
pub fn elements(b: &[u8], i: usize) -> Option<Vec<Range<usize>>> {
    if b.get(i) != Some(&b'[') {
        return None;
    }
    let mut out = Vec::new();
    let mut j = skip_ws(b, i + 1);
    if b.get(j) == Some(&b']') {
        return Some(out);
    }
    loop {
        let e = skip_valid(b, j)?;
        out.push(j..e);
        j = skip_ws(b, e);
        match *b.get(j)? {
            b',' => j = skip_ws(b, j + 1),
            b']' => return Some(out),
            _ => return None,
        }
    }
}

/// The member named `name` in `fields`; with duplicate keys the last one
/// (serde_json's `Value` semantics).
#[must_use]
pub fn find<'f>(b: &[u8], fields: &'f [Field], name: &str) -> Option<&'f Field> {
    fields.iter().rev().find(|f| f.key_is(b, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::decode_token;

    #[test]
    fn members_and_elements() {
        let b = br#" { "a" : [1, {"x":"]}"}] , "b\"":"s\\" ,"c":-1.5e3,"d":{}} "#;
        let ms = members(b, 1).unwrap();
        assert_eq!(ms.len(), 4);
        assert_eq!(ms[0].value_in(b), br#"[1, {"x":"]}"}]"#);
        assert!(ms[1].key_is(b, "b\""));
        assert_eq!(ms[2].value_in(b), b"-1.5e3");
        assert_eq!(ms[2].member.prev_end, Some(ms[1].end));
        let els = elements(b, ms[0].value().start).unwrap();
        assert_eq!(els.len(), 2);
        assert_eq!(&b[els[1].clone()], br#"{"x":"]}"}"#);
        assert!(find(b, &ms, "d").is_some());
        assert!(find(b, &ms, "b\"").is_some());
        assert!(find(b, &ms, "e").is_none());
    }

    #[test]
    fn escaped_keys_and_tokens() {
        let b = br#"{"web\u005fsearch":true,"s":"a\u00e9\ud83d\ude00\n"}"#;
        let ms = members(b, 0).unwrap();
        assert!(ms[0].key_is(b, "web_search"));
        assert!(!ms[0].key_is(b, "web_searc"));
        assert_eq!(decode_token(ms[1].value_in(b)).unwrap(), "aé😀\n");
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
            let _ = skip_valid(b, 0);
            let _ = decode_token(b);
        }
    }
}

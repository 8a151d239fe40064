//! Splicing: edits to a buffer (insert, replace, remove a member) that
//! leave the rest of it byte for byte as it was.

use std::ops::Range;

use super::{Member, skip_ws};

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

    /// The length of a `len`-byte buffer once the edits are applied (as
    /// [`apply`](Self::apply) writes it when no edit overlaps another), to
    /// size the output buffer exactly.
    #[must_use]
    pub fn len_after(&self, len: usize) -> usize {
        self.edits.iter().fold(len, |n, (r, with)| {
            (n + with.len()).saturating_sub(r.end.saturating_sub(r.start))
        })
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
    use crate::json::ObjectWalker;

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

//! The template learner: the shape of a recent chunk, so that the next
//! chunks of the same shape are recognised with a few comparisons instead
//! of a scan (the hot path of [`ChatStream`](crate::ChatStream)).

use std::ops::Range;

use crate::json;

/// Largest chunk a [`ChunkTemplate`] is learned from.
pub(crate) const MAX_TEMPLATE: usize = 4096;

/// How many chunk shapes a stream keeps (content and reasoning chunks
/// alternate in some streams; `n` > 1 interleaves choices).
pub(crate) const TEMPLATES: usize = 4;

/// The shape of a recent chunk without a finish, learned so the next ones
/// can be checked with a few comparisons instead of a full scan.
///
/// Chunks of one stream are nearly identical: the same `id`, `model`,
/// `created`, keys and punctuation; only string and number values vary
/// (the content, reasoning text, `obfuscation` padding, a running `usage`).
/// A template is the learned chunk cut at those tokens ("holes"): the
/// strings and numbers of the delta and of the choice (not its `index`),
/// and the top-level ones other than the envelope's. A chunk made of the same literal segments with a valid JSON
/// token of the same kind (string or number) in each hole parses exactly
/// like the chunk the template was learned from, except for those values:
/// it is valid JSON with one choice, the learned index, without
/// `finish_reason`, its content (if the template has a content hole) in
/// that hole.
/// Anything else takes the full scan.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChunkTemplate {
    /// The literal segments, concatenated.
    pub(crate) literal: Vec<u8>,
    /// End of each segment in `literal`; holes lie between segments.
    pub(crate) seg_ends: Vec<usize>,
    /// Per hole: a string (else a number).
    pub(crate) strings: Vec<bool>,
    pub(crate) content_hole: Option<usize>,
    pub(crate) index: u32,
    pub(crate) valid: bool,
}

impl ChunkTemplate {
    /// `Some((index, content))` if `d` matches: the choice index and the
    /// content's raw body, when the template has a content hole.
    #[inline]
    pub(crate) fn matches(&self, d: &[u8]) -> Option<(u32, Option<Range<usize>>)> {
        if !self.valid {
            return None;
        }
        let mut pos = 0;
        let mut lit = 0;
        let mut content = None;
        let last = self.seg_ends.len() - 1;
        for (h, &end) in self.seg_ends.iter().enumerate() {
            let seg = &self.literal[lit..end];
            if !d.get(pos..)?.starts_with(seg) {
                return None;
            }
            pos += seg.len();
            lit = end;
            if h == last {
                return (pos == d.len()).then_some((self.index, content));
            }
            if self.strings[h] {
                let (s_end, _) = json::scan_string(d, pos).ok()?;
                if Some(h) == self.content_hole {
                    content = Some(pos + 1..s_end - 1);
                }
                pos = s_end;
            } else {
                if !matches!(d.get(pos), Some(b'-' | b'0'..=b'9')) {
                    return None;
                }
                pos = json::scan_number(d, pos).ok()?;
            }
        }
        None
    }

    /// Learns from a chunk the fast scan found to have one choice (`index`)
    /// and no finish: `content` is the content's raw body, `holes` the
    /// other varying string and number tokens.
    pub(crate) fn learn(
        &mut self,
        d: &[u8],
        index: u32,
        content: Option<&Range<usize>>,
        holes: &[Range<usize>],
    ) {
        const MAX_HOLES: usize = 32;
        self.valid = false;
        if d.len() > MAX_TEMPLATE || holes.len() >= MAX_HOLES {
            return;
        }
        let content_tok = content.map(|c| c.start - 1..c.end + 1);
        let mut cuts: [Range<usize>; MAX_HOLES] = Default::default();
        cuts[..holes.len()].clone_from_slice(holes);
        let mut n = holes.len();
        if let Some(t) = &content_tok {
            cuts[n] = t.clone();
            n += 1;
        }
        let cuts = &mut cuts[..n];
        cuts.sort_by_key(|r| r.start);
        self.literal.clear();
        self.seg_ends.clear();
        self.strings.clear();
        self.content_hole = None;
        let mut at = 0;
        for (k, h) in cuts.iter().enumerate() {
            if h.start < at {
                return;
            }
            self.literal.extend_from_slice(&d[at..h.start]);
            self.seg_ends.push(self.literal.len());
            self.strings.push(d[h.start] == b'"');
            if Some(h) == content_tok.as_ref() {
                self.content_hole = Some(k);
            }
            at = h.end;
        }
        self.literal.extend_from_slice(&d[at..]);
        self.seg_ends.push(self.literal.len());
        self.index = index;
        self.valid = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::chat::scan::fast_scan;

    /// The template learned from `d` the way the handler learns it.
    fn learned(d: &str) -> ChunkTemplate {
        let (mut cs, mut holes) = (Vec::new(), Vec::new());
        assert!(fast_scan(d.as_bytes(), &mut cs, &mut holes).unwrap());
        let [c] = &cs[..] else { panic!("one choice") };
        let mut t = ChunkTemplate::default();
        t.learn(d.as_bytes(), c.index.unwrap(), c.content.as_ref(), &holes);
        t
    }

    fn content<'d>(t: &ChunkTemplate, d: &'d str) -> Option<Option<&'d str>> {
        Some(t.matches(d.as_bytes())?.1.map(|r| &d[r]))
    }

    const CHUNK: &str = r#"{"id":"c1","choices":[{"index":2,"delta":{"content":"Hi"},"finish_reason":null}],"obfuscation":"ab"}"#;

    #[test]
    fn matches_chunks_of_the_same_shape() {
        let t = learned(CHUNK);
        assert!(t.valid);
        assert_eq!(t.index, 2);
        // Holes: the content, the obfuscation.
        assert_eq!(t.seg_ends.len(), 3);
        assert_eq!(t.strings, [true, true]);
        assert_eq!(content(&t, CHUNK), Some(Some("Hi")));
        let other = CHUNK
            .replace("Hi", r#"a \"[1]\" \u00e9"#)
            .replace("ab", "xyz");
        assert_eq!(content(&t, &other), Some(Some(r#"a \"[1]\" \u00e9"#)));
    }

    #[test]
    fn anything_else_is_no_match() {
        let t = learned(CHUNK);
        for d in [
            CHUNK.replace("c1", "c2"),
            CHUNK.replace("null", r#""stop""#),
            CHUNK.replace(r#""Hi""#, "null"),
            CHUNK.replace("Hi", "a\nb"),
            CHUNK.replace(r#""ab""#, r#""ab"#),
            format!("{CHUNK} "),
            CHUNK[..CHUNK.len() - 1].to_owned(),
            String::new(),
        ] {
            assert_eq!(content(&t, &d), None, "{d:?}");
        }
        assert_eq!(content(&ChunkTemplate::default(), CHUNK), None);
    }

    #[test]
    fn numbers_are_holes_but_not_the_index() {
        let d = r#"{"id":"p","created":5,"choices":[{"index":1,"delta":{"content":"a"}}],"usage":{"prompt_tokens":3,"completion_tokens":7,"total_tokens":10,"cost":0.25}}"#;
        let t = learned(d);
        let other = d
            .replace(":7,", ":17,")
            .replace(":10,", ":20,")
            .replace("0.25", "-1.5e-3");
        assert_eq!(t.matches(other.as_bytes()).map(|m| m.0), Some(1));
        for bad in [
            d.replace(r#""index":1"#, r#""index":2"#),
            d.replace(r#""index":1"#, r#""index":1.5"#),
            d.replace(":7,", r#":"7","#),
            d.replace(":7,", ":07,"),
            d.replace(r#""created":5"#, r#""created":6"#),
        ] {
            assert_eq!(t.matches(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn a_chunk_without_content_has_no_content_hole() {
        let d = r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#;
        let t = learned(d);
        assert_eq!(t.content_hole, None);
        assert_eq!(content(&t, &d.replace("assistant", "tool")), Some(None));
    }

    #[test]
    fn large_chunks_are_not_learned() {
        let big = CHUNK.replace("Hi", &"x".repeat(MAX_TEMPLATE));
        assert!(!learned(&big).valid);
        let mut t = learned(CHUNK);
        t.learn(big.as_bytes(), 0, None, &[]);
        assert!(!t.valid, "a failed learn forgets the old template");
    }
}

//! The whole-body rewriter for `/v1/chat/completions`
//! (`chat.completion` objects): `annotations` on each
//! `choices[i].message` (ours appended after any upstream ones; an empty
//! array when there are none), top-level `sources` and/or `citations`;
//! every other byte stays where it was.

use std::borrow::Cow;

use crate::cite::{Marker, MarkerTracker};
use crate::json::{self, ArrayWalker, Field, Invalid, ObjectWalker, Splice};
use crate::rewrite::RewriteOptions;
use crate::rewrite::additions::{
    Existing, finish_body, push_annotations, splice_annotations, whole_body,
};
use crate::sources::{AnnotationShape, Sources};

/// Rewrites a whole (non-streamed) `chat.completion` body.
///
/// Returns the body unchanged (borrowed) when it is not a JSON object with a
/// `choices` array (an error body, say), when it is not valid JSON, or when
/// there are no sources.
///
/// ```
/// use citestream::{RewriteOptions, Sources, chat};
/// let sources = Sources::from_json(br#"[{"title":"T","url":"u"}]"#).unwrap();
/// let body = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"A [1]."}}]}"#;
/// let out = chat::rewrite_body(body, &sources, &RewriteOptions::new());
/// assert_eq!(
///     std::str::from_utf8(&out).unwrap(),
///     r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"A [1].","annotations":[{"type":"url_citation","url_citation":{"start_index":2,"end_index":5,"url":"u","title":"T"}}]}}],"sources":[{"index":1,"title":"T","url":"u"}]}"#
/// );
/// ```
///
/// # Panics
///
/// Never panics, on any input.
#[must_use]
pub fn rewrite_body<'a>(body: &'a [u8], sources: &Sources, opts: &RewriteOptions) -> Cow<'a, [u8]> {
    whole_body(body, sources, |b| rewrite_body_inner(b, sources, opts))
}

fn rewrite_body_inner(
    b: &[u8],
    sources: &Sources,
    opts: &RewriteOptions,
) -> Result<Option<Vec<u8>>, Invalid> {
    let start = json::skip_ws(b, 0);
    let mut w = ObjectWalker::new(b, start, 0)?;
    let mut st = Body {
        b,
        sources,
        opts,
        sp: Splice::new(),
        cited: vec![false; sources.len() + 1],
    };
    let mut existing = Existing::default();
    let mut saw_choices = false;
    while let Some(m) = w.next_member()? {
        if m.key_is(b, "choices") && b[m.value_start] == b'[' {
            saw_choices = true;
            let end = st.choices(m.value_start, w.depth())?;
            w.value_end(end);
            continue;
        }
        let end = w.skip_value()?;
        existing.note(b, &m, end);
    }
    let close = w.close();
    if json::skip_ws(b, close + 1) != b.len() || !saw_choices {
        return Ok(None);
    }
    let top = (close, w.has_members());
    let out = finish_body(b, top, &existing, (sources, opts), &st.cited, st.sp);
    Ok(Some(out))
}

/// The body being rewritten and what the rewrite has gathered.
struct Body<'a> {
    b: &'a [u8],
    sources: &'a Sources,
    opts: &'a RewriteOptions,
    sp: Splice,
    /// Source numbers cited by any choice.
    cited: Vec<bool>,
}

impl Body<'_> {
    /// The `choices` array at `b[at]`; returns its end.
    fn choices(&mut self, at: usize, depth: u32) -> Result<usize, Invalid> {
        let b = self.b;
        let mut a = ArrayWalker::new(b, at, depth)?;
        while let Some(el) = a.next_element()? {
            if b[el] != b'{' {
                a.skip_value()?;
                continue;
            }
            let mut w = ObjectWalker::new(b, el, a.depth())?;
            while let Some(m) = w.next_member()? {
                if !(m.key_is(b, "message") && b[m.value_start] == b'{') {
                    w.skip_value()?;
                    continue;
                }
                let end = self.message(m.value_start, w.depth())?;
                w.value_end(end);
            }
            a.value_end(w.close() + 1);
        }
        Ok(a.close() + 1)
    }

    /// One `choices[i].message` object (at `b[at]`): its content's markers
    /// counted in `cited`, its `annotations` spliced in; returns its end.
    fn message(&mut self, at: usize, depth: u32) -> Result<usize, Invalid> {
        let b = self.b;
        let mut mw = ObjectWalker::new(b, at, depth)?;
        let mut tracker = MarkerTracker::new(self.sources.len() as u32, self.opts.offsets);
        let mut annotations: Option<Field> = None;
        // With duplicate keys the last one counts (as in serde_json and the
        // streaming path).
        let mut content = None;
        while let Some(mm) = mw.next_member()? {
            let end = mw.skip_value()?;
            if mm.key_is(b, "content") {
                content = (b[mm.value_start] == b'"').then(|| mm.value_start + 1..end - 1);
            } else if mm.key_is(b, "annotations") {
                annotations = Some(Field { member: mm, end });
            }
        }
        if let Some(r) = content {
            tracker.push_json(&b[r]);
        }
        tracker.finish();
        let markers = tracker.take_markers();
        for mk in &markers {
            if let Some(x) = self.cited.get_mut(mk.number as usize) {
                *x = true;
            }
        }
        if self.opts.dialect.sources {
            let close = (mw.close(), mw.has_members());
            self.annotations(&markers, annotations, close);
        }
        Ok(mw.close() + 1)
    }

    /// Splices `markers`' annotations into a message: appended inside an
    /// upstream `annotations` array, replacing any other upstream value, or
    /// as a new member before the message's closing brace `close.0`
    /// (`close.1`: the message has members).
    fn annotations(&mut self, markers: &[Marker], upstream: Option<Field>, close: (usize, bool)) {
        let mut ours = Vec::new();
        push_annotations(AnnotationShape::Nested, &mut ours, self.sources, markers);
        splice_annotations(self.b, &mut self.sp, &ours, upstream.as_ref(), close);
    }
}

//! The objects that carry a Responses answer whole: a content part, an
//! output item, the `output` array, the response object. Both the
//! whole-body rewriter and the stream's snapshot events
//! (`response.content_part.done`, `response.output_item.done`,
//! `response.completed` / `response.incomplete`) splice our annotations
//! into them here, so the two cannot place them differently; where the
//! markers come from is the caller's ([`PartMarkers`]).

use std::borrow::Cow;
use std::ops::Range;

use crate::cite::{Marker, MarkerTracker, OffsetUnit};
use crate::json::{self, ArrayWalker, Field, Invalid, ObjectWalker, Splice};
use crate::rewrite::RewriteOptions;
use crate::rewrite::additions::{
    Existing, add_top_level, annotations_len, cited_set, push_annotations, splice_annotations,
    whole_body,
};
use crate::sources::{AnnotationShape, Sources};

/// The markers of one text part, by its place in the response
/// (`output_index`, `content_index`).
pub(super) trait PartMarkers {
    /// The markers of the `output_text` part `content_index` of output item
    /// `output_index`, whose `text` member's raw body (escapes not decoded)
    /// is `text` when it has one.
    fn markers(&mut self, output_index: u32, content_index: u32, text: Option<&[u8]>) -> &[Marker];
}

/// What the splices need besides the text.
pub(super) struct Ctx<'a, P> {
    pub(super) sources: &'a Sources,
    pub(super) opts: &'a RewriteOptions,
    pub(super) markers: P,
    pub(super) sp: Splice,
}

impl<P: PartMarkers> Ctx<'_, P> {
    /// The content part object at `b[at]` (`depth` containers around it):
    /// when it is an `output_text` part, its markers appended to its
    /// `annotations`. Returns its end.
    pub(super) fn part(
        &mut self,
        b: &[u8],
        at: usize,
        depth: u32,
        (o, i): (u32, u32),
    ) -> Result<usize, Invalid> {
        let mut w = ObjectWalker::new(b, at, depth)?;
        let mut is_text = false;
        let mut text = None;
        let mut annotations = None;
        while let Some(m) = w.next_member()? {
            let end = w.skip_value()?;
            if m.key_is(b, "type") {
                is_text = &b[m.value_start..end] == b"\"output_text\"";
            } else if m.key_is(b, "text") {
                text = (b[m.value_start] == b'"').then(|| m.value_start + 1..end - 1);
            } else if m.key_is(b, "annotations") {
                annotations = Some(Field { member: m, end });
            }
        }
        if is_text {
            let text = text.map(|r: Range<usize>| &b[r]);
            let markers = self.markers.markers(o, i, text);
            if !markers.is_empty() && self.opts.dialect.sources {
                // (Sized once: a long answer's array is not grown copy by copy.)
                let shape = AnnotationShape::Flat;
                let mut ours = Vec::with_capacity(annotations_len(shape, self.sources, markers));
                push_annotations(shape, &mut ours, self.sources, markers);
                let close = (w.close(), w.has_members());
                splice_annotations(b, &mut self.sp, &ours, annotations.as_ref(), close);
            }
        }
        Ok(w.close() + 1)
    }

    /// The output item object at `b[at]`, `output_index` `o`: when it is a
    /// `message`, each of its `content` parts. Returns its end.
    pub(super) fn item(
        &mut self,
        b: &[u8],
        at: usize,
        depth: u32,
        o: u32,
    ) -> Result<usize, Invalid> {
        let mut w = ObjectWalker::new(b, at, depth)?;
        let mut is_message = false;
        let mut content = None;
        while let Some(m) = w.next_member()? {
            let end = w.skip_value()?;
            if m.key_is(b, "type") {
                is_message = &b[m.value_start..end] == b"\"message\"";
            } else if m.key_is(b, "content") && b[m.value_start] == b'[' {
                content = Some(m.value_start);
            }
        }
        if let (true, Some(c)) = (is_message, content) {
            let mut a = ArrayWalker::new(b, c, w.depth())?;
            let mut i = 0u32;
            while let Some(el) = a.next_element()? {
                if b[el] == b'{' {
                    let end = self.part(b, el, a.depth(), (o, i))?;
                    a.value_end(end);
                } else {
                    a.skip_value()?;
                }
                i = i.saturating_add(1);
            }
        }
        Ok(w.close() + 1)
    }

    /// The `output` array at `b[at]`: each item. Returns its end.
    fn output(&mut self, b: &[u8], at: usize, depth: u32) -> Result<usize, Invalid> {
        let mut a = ArrayWalker::new(b, at, depth)?;
        let mut o = 0u32;
        while let Some(el) = a.next_element()? {
            if b[el] == b'{' {
                let end = self.item(b, el, a.depth(), o)?;
                a.value_end(end);
            } else {
                a.skip_value()?;
            }
            o = o.saturating_add(1);
        }
        Ok(a.close() + 1)
    }

    /// The response object at `b[at]`: the annotations in its `output`,
    /// and the top-level `sources` / `citations` (an upstream member of the
    /// same name replaced) once `cited` (indexed by source number) tells
    /// the cited sources. Returns whether it is a response object
    /// (`"object": "response"`) and its end.
    pub(super) fn response(
        &mut self,
        b: &[u8],
        at: usize,
        depth: u32,
        cited: impl FnOnce(&mut P) -> Vec<bool>,
    ) -> Result<(bool, usize), Invalid> {
        let mut w = ObjectWalker::new(b, at, depth)?;
        let mut existing = Existing::default();
        let mut is_response = false;
        while let Some(m) = w.next_member()? {
            if m.key_is(b, "output") && b[m.value_start] == b'[' {
                let end = self.output(b, m.value_start, w.depth())?;
                w.value_end(end);
                continue;
            }
            let end = w.skip_value()?;
            if m.key_is(b, "object") {
                is_response = &b[m.value_start..end] == b"\"response\"";
            } else {
                existing.note(b, &m, end);
            }
        }
        if is_response {
            let cited = cited(&mut self.markers);
            let top = (w.close(), w.has_members());
            add_top_level(
                b,
                top,
                &existing,
                self.sources,
                self.opts,
                &cited,
                &mut self.sp,
            );
        }
        Ok((is_response, w.close() + 1))
    }
}

/// The markers of a whole body's parts, counted from their text.
struct FromText {
    max: u32,
    unit: OffsetUnit,
    scratch: Vec<Marker>,
    cited: Vec<Marker>,
}

impl PartMarkers for FromText {
    fn markers(&mut self, _: u32, _: u32, text: Option<&[u8]>) -> &[Marker] {
        let mut t = MarkerTracker::new(self.max, self.unit);
        if let Some(text) = text {
            t.push_json(text);
        }
        t.finish();
        self.scratch = t.take_markers();
        self.cited.extend_from_slice(&self.scratch);
        &self.scratch
    }
}

/// Rewrites a whole (non-streamed) Responses API body
/// (`"object": "response"`): each `output_text` part of each `message`
/// item of `output` gets one flat
/// `{"type":"url_citation","start_index","end_index","url","title"}` per
/// marker appended to its `annotations` (upstream ones kept; offsets in
/// that part's `text`), and the response gets top-level `sources` and/or
/// `citations`. Every other byte stays where it was; a part without
/// markers is left as it is.
///
/// Returns the body unchanged (borrowed) for anything else: error bodies,
/// invalid JSON, or no sources.
///
/// ```
/// use citestream::{RewriteOptions, Sources, responses};
/// let sources = Sources::from_json(br#"[{"title":"T","url":"u"}]"#).unwrap();
/// let body = br#"{"object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"A [1].","annotations":[]}]}]}"#;
/// let out = responses::rewrite_body(body, &sources, &RewriteOptions::new());
/// assert_eq!(
///     std::str::from_utf8(&out).unwrap(),
///     r#"{"object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"A [1].","annotations":[{"type":"url_citation","start_index":2,"end_index":5,"url":"u","title":"T"}]}]}],"sources":[{"index":1,"title":"T","url":"u"}]}"#
/// );
/// ```
///
/// # Panics
///
/// Never panics, on any input.
#[must_use]
pub fn rewrite_body<'a>(body: &'a [u8], sources: &Sources, opts: &RewriteOptions) -> Cow<'a, [u8]> {
    whole_body(body, sources, |b| body_inner(b, sources, opts))
}

fn body_inner(
    b: &[u8],
    sources: &Sources,
    opts: &RewriteOptions,
) -> Result<Option<Vec<u8>>, Invalid> {
    let mut ctx = Ctx {
        sources,
        opts,
        markers: FromText {
            max: sources.len() as u32,
            unit: opts.offsets,
            scratch: Vec::new(),
            cited: Vec::new(),
        },
        sp: Splice::new(),
    };
    let start = json::skip_ws(b, 0);
    let (is_response, end) = ctx.response(b, start, 0, |m| cited_set(sources, &m.cited))?;
    if !is_response || json::skip_ws(b, end) != b.len() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(b.len() + 1024);
    ctx.sp.apply(b, &mut out);
    Ok(Some(out))
}

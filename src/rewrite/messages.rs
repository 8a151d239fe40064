//! `/v1/messages` (Anthropic Messages API): the streaming and the
//! whole-body rewriter.
//!
//! On this endpoint the answer stays a `text` content block and there are no
//! annotations: `sources` and/or `citations` go at the top level of the
//! message object (whole bodies) or of the `message_delta` event's data
//! (streams), and nowhere else.
//!
//! # Streaming ([`MessagesStream`])
//!
//! `message_start`, `content_block_start`, `ping`, `content_block_delta`
//! (text, thinking, `input_json_delta`, `citations_delta`, signatures),
//! `content_block_stop`, `message_stop`, `error` and anything else pass
//! through byte for byte, as slices of the input. The first `message_delta`
//! event gets our members spliced in before its closing brace; it keeps its
//! `event: message_delta` line (the official SDKs drop events without it)
//! and all its framing. A stream without `message_delta` gets no additions.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::cite::MarkerTracker;
use crate::json::{self, Invalid, ObjectWalker, Splice};
use crate::rewrite::RewriteOptions;
use crate::rewrite::additions::{
    Existing, add_top_level, cited_set, finish_body, splice_event, whole_body,
};
use crate::rewrite::driver::{Handler, Out, SseRewriter};
use crate::sources::Sources;
use crate::sse::{Frame, FrameKind, FrameRef, Parser};

/// Streaming rewriter for `/v1/messages` event streams.
///
/// Same sans-IO contract as [`ChatStream`](crate::ChatStream): `feed`,
/// drain `next_output`, `finish`, drain again.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use citestream::{MessagesStream, RewriteOptions, Sources};
///
/// let sources = Arc::new(Sources::from_json(br#"[{"title":"T","url":"u"}]"#).unwrap());
/// let mut rw = MessagesStream::new(sources, RewriteOptions::new());
/// rw.feed(Bytes::from_static(b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n"));
/// rw.finish();
/// let mut out = Vec::new();
/// while let Some(b) = rw.next_output() {
///     out.extend_from_slice(&b);
/// }
/// assert_eq!(
///     std::str::from_utf8(&out).unwrap(),
///     "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"sources\":[{\"index\":1,\"title\":\"T\",\"url\":\"u\"}]}\n\n"
/// );
/// ```
///
/// # Panics
///
/// Never panics, on any input.
pub type MessagesStream = SseRewriter<MessagesHandler>;

/// The per-frame state of a [`MessagesStream`] (everything but the
/// parser).
#[derive(Debug)]
pub struct MessagesHandler {
    sources: Arc<Sources>,
    opts: RewriteOptions,
    /// Tracks cited numbers (only with `only_cited`).
    tracker: Option<MarkerTracker>,
    done: bool,
    out: Out,
}

impl MessagesStream {
    /// A rewriter adding `sources` as configured by `opts` (`offsets` and
    /// `n` do not apply to this endpoint). With no sources it adds nothing.
    #[must_use]
    pub fn new(sources: Arc<Sources>, opts: RewriteOptions) -> Self {
        let tracker = (opts.only_cited && opts.dialect.citations)
            .then(|| MarkerTracker::new(sources.len() as u32, opts.offsets));
        let parser = Parser::with_config(&opts.sse);
        SseRewriter::with_handler(
            parser,
            MessagesHandler {
                sources,
                opts,
                tracker,
                done: false,
                out: Out::default(),
            },
        )
    }
}

impl Handler for MessagesHandler {
    const NAME: &'static str = "MessagesStream";

    #[inline]
    fn handle(&mut self, f: &FrameRef<'_>) {
        match f.kind() {
            FrameKind::Event if !self.done && !self.sources.is_empty() => self.event(f),
            _ => self.out.pass(f),
        }
    }

    fn out(&mut self) -> &mut Out {
        &mut self.out
    }

    fn end(&mut self) {}

    fn sources_emitted(&self) -> bool {
        self.done
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("done", &self.done);
    }
}

impl MessagesHandler {
    fn event(&mut self, f: &FrameRef<'_>) {
        let ty = f.event_type();
        if ty == b"content_block_delta" {
            if let Some(t) = self.tracker.as_mut() {
                track_text_delta(f.data(), t);
            }
            return self.out.pass(f);
        }
        if ty == b"content_block_stop" {
            if let Some(t) = self.tracker.as_mut() {
                // Blocks are separate paragraphs, as in `rewrite_body`.
                t.push_json(b"\\n\\n");
            }
            return self.out.pass(f);
        }
        if ty != b"message_delta" && ty != b"message" {
            return self.out.pass(f);
        }
        let d = f.data();
        match self.delta_patch(d) {
            Ok(Some(mut sp)) => {
                self.done = true;
                let Frame::Event(e) = f.to_frame() else {
                    return self.out.pass(f);
                };
                if e.data_range().is_none() {
                    // Re-framed: a split CRLF's LF must not follow it.
                    self.out.swallow_line_end = e.raw().ends_with(b"\r");
                }
                self.out.push(splice_event(&e, &mut sp));
            }
            Ok(None) | Err(Invalid) => self.out.pass(f),
        }
    }

    /// The edits that add our members to a `message_delta` object, or
    /// `None` when `d` is some other event.
    fn delta_patch(&mut self, d: &[u8]) -> Result<Option<Splice>, Invalid> {
        let mut w = ObjectWalker::new(d, json::skip_ws(d, 0), 0)?;
        let mut existing = Existing::default();
        let mut is_delta = false;
        while let Some(m) = w.next_member()? {
            let end = w.skip_value()?;
            if m.key_is(d, "type") {
                is_delta = &d[m.value_start..end] == b"\"message_delta\"";
            } else {
                existing.note(d, &m, end);
            }
        }
        let close = w.close();
        if !is_delta || json::skip_ws(d, close + 1) != d.len() {
            return Ok(None);
        }
        let cited = self.cited();
        let mut sp = Splice::new();
        add_top_level(
            d,
            (close, w.has_members()),
            &existing,
            &self.sources,
            &self.opts,
            &cited,
            &mut sp,
        );
        Ok(Some(sp))
    }

    fn cited(&mut self) -> Vec<bool> {
        let markers = self.tracker.as_mut().map(|t| {
            t.finish();
            t.markers()
        });
        cited_set(&self.sources, markers.unwrap_or_default())
    }
}

/// Reads the object at `b[at]` (inside `depth` containers): the raw body
/// of its `text` member when its `type` is the string token `ty`, and the
/// object's end. The one text-block scan of this endpoint: content blocks
/// (`"text"`) of whole bodies, deltas (`"text_delta"`) of streams.
fn typed_text(
    b: &[u8],
    at: usize,
    depth: u32,
    ty: &[u8],
) -> Result<(Option<Range<usize>>, usize), Invalid> {
    let mut w = ObjectWalker::new(b, at, depth)?;
    let mut is_ty = false;
    let mut text = None;
    while let Some(m) = w.next_member()? {
        let end = w.skip_value()?;
        if m.key_is(b, "type") {
            is_ty = &b[m.value_start..end] == ty;
        } else if m.key_is(b, "text") && b[m.value_start] == b'"' {
            text = Some(m.value_start + 1..end - 1);
        }
    }
    Ok((text.filter(|_| is_ty), w.close() + 1))
}

/// Feeds the `delta.text` of a `text_delta` content block delta to `t`.
fn track_text_delta(d: &[u8], t: &mut MarkerTracker) {
    let Ok(mut w) = ObjectWalker::new(d, json::skip_ws(d, 0), 0) else {
        return;
    };
    while let Ok(Some(m)) = w.next_member() {
        if m.key_is(d, "delta") && d.get(m.value_start) == Some(&b'{') {
            if let Ok((Some(r), _)) = typed_text(d, m.value_start, 1, b"\"text_delta\"") {
                t.push_json(&d[r]);
            }
            return;
        }
        if w.skip_value().is_err() {
            return;
        }
    }
}

/// Rewrites a whole (non-streamed) Messages API response: top-level
/// `sources` and/or `citations` on a `"type": "message"` object; every
/// other byte stays where it was.
///
/// Returns the body unchanged (borrowed) for anything else: error bodies
/// (`"type": "error"`), invalid JSON, or no sources.
///
/// ```
/// use citestream::{RewriteOptions, Sources, messages};
/// let sources = Sources::from_json(br#"[{"title":"T","url":"u"}]"#).unwrap();
/// let body = br#"{"type":"message","content":[{"type":"text","text":"A [1]."}]}"#;
/// let out = messages::rewrite_body(body, &sources, &RewriteOptions::new());
/// assert!(out.ends_with(br#","sources":[{"index":1,"title":"T","url":"u"}]}"#));
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
    let mut w = ObjectWalker::new(b, json::skip_ws(b, 0), 0)?;
    let mut existing = Existing::default();
    let mut is_message = false;
    let mut tracker = MarkerTracker::new(sources.len() as u32, opts.offsets);
    while let Some(m) = w.next_member()? {
        let end = w.skip_value()?;
        if m.key_is(b, "type") {
            is_message = &b[m.value_start..end] == b"\"message\"";
        } else if m.key_is(b, "content") && b[m.value_start] == b'[' {
            track_text_blocks(b, m.value_start, &mut tracker)?;
        } else {
            existing.note(b, &m, end);
        }
    }
    let close = w.close();
    if !is_message || json::skip_ws(b, close + 1) != b.len() {
        return Ok(None);
    }
    tracker.finish();
    let cited = cited_set(sources, tracker.markers());
    let top = (close, w.has_members());
    let out = finish_body(b, top, &existing, (sources, opts), &cited, Splice::new());
    Ok(Some(out))
}

/// Feeds the text of every `text` block of a `content` array to `t`.
fn track_text_blocks(b: &[u8], at: usize, t: &mut MarkerTracker) -> Result<(), Invalid> {
    let mut a = json::ArrayWalker::new(b, at, 1)?;
    while let Some(el) = a.next_element()? {
        if b[el] != b'{' {
            a.skip_value()?;
            continue;
        }
        let (text, end) = typed_text(b, el, a.depth(), b"\"text\"")?;
        if let Some(r) = text {
            t.push_json(&b[r]);
            // Blocks are separate paragraphs.
            t.push_json(b"\\n\\n");
        }
        a.value_end(end);
    }
    Ok(())
}

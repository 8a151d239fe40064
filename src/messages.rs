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
use std::sync::Arc;

use bytes::Bytes;

use crate::chat::{Existing, add_top_level, splice_event};
use crate::cite::MarkerTracker;
use crate::json::{self, Invalid, ObjectWalker, Splice};
use crate::options::{Driver, Handler, Out, RewriteOptions};
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
pub struct MessagesStream {
    d: Driver<Core>,
}

/// Everything but the parser (see [`crate::ChatStream`]'s layout).
struct Core {
    sources: Arc<Sources>,
    opts: RewriteOptions,
    /// Tracks cited numbers (only with `only_cited`).
    tracker: Option<MarkerTracker>,
    done: bool,
    out: Out,
}

impl fmt::Debug for MessagesStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessagesStream")
            .field("parser", &self.d.parser)
            .field("done", &self.d.h.done)
            .finish_non_exhaustive()
    }
}

impl MessagesStream {
    /// A rewriter adding `sources` as configured by `opts` (`offsets` and
    /// `n` do not apply to this endpoint). With no sources it adds nothing.
    #[must_use]
    pub fn new(sources: Arc<Sources>, opts: RewriteOptions) -> Self {
        let tracker = (opts.only_cited && opts.dialect.citations)
            .then(|| MarkerTracker::new(sources.len() as u32, opts.offsets));
        let parser = Parser::with_config(&opts.sse);
        MessagesStream {
            d: Driver::new(
                parser,
                Core {
                    sources,
                    opts,
                    tracker,
                    done: false,
                    out: Out::default(),
                },
            ),
        }
    }

    /// Queues an input piece (any size, split anywhere).
    pub fn feed(&mut self, chunk: Bytes) {
        self.d.feed(chunk);
    }

    /// Whether the `message_delta` event got our members.
    #[must_use]
    pub fn sources_emitted(&self) -> bool {
        self.d.h.done
    }

    /// Ends the input; an unterminated last event's bytes are queued for
    /// [`next_output`](MessagesStream::next_output).
    pub fn finish(&mut self) {
        self.d.finish();
    }

    /// The next piece of output, or `None` when more input is needed
    /// (unchanged neighbouring events of one input piece come out as one
    /// slice of it).
    #[must_use]
    pub fn next_output(&mut self) -> Option<Bytes> {
        self.d.next_output()
    }
}

impl Handler for Core {
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
}

impl Core {
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
                let mut data = Vec::with_capacity(d.len() + 512);
                sp.apply(d, &mut data);
                let Frame::Event(e) = f.to_frame() else {
                    return self.out.pass(f);
                };
                if e.data_range().is_none() {
                    // Re-framed: a split CRLF's LF must not follow it.
                    self.out.swallow_line_end = e.raw().ends_with(b"\r");
                }
                self.out.push(splice_event(&e, &data));
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
        let mut cited = vec![false; self.sources.len() + 1];
        if let Some(t) = self.tracker.as_mut() {
            t.finish();
            for m in t.markers() {
                if let Some(c) = cited.get_mut(m.number as usize) {
                    *c = true;
                }
            }
        }
        cited
    }
}

/// Feeds the `delta.text` of a `text_delta` content block delta to `t`.
fn track_text_delta(d: &[u8], t: &mut MarkerTracker) {
    let Ok(mut w) = ObjectWalker::new(d, json::skip_ws(d, 0), 0) else {
        return;
    };
    while let Ok(Some(m)) = w.next_member() {
        if m.key_is(d, "delta") && d.get(m.value_start) == Some(&b'{') {
            let Ok(mut dw) = ObjectWalker::new(d, m.value_start, 1) else {
                return;
            };
            let mut text = None;
            let mut is_text = false;
            while let Ok(Some(dm)) = dw.next_member() {
                let Ok(end) = dw.skip_value() else { return };
                if dm.key_is(d, "type") {
                    is_text = &d[dm.value_start..end] == b"\"text_delta\"";
                } else if dm.key_is(d, "text") && d[dm.value_start] == b'"' {
                    text = Some(dm.value_start + 1..end - 1);
                }
            }
            if let (true, Some(r)) = (is_text, text) {
                t.push_json(&d[r]);
            }
            return;
        }
        if w.skip_value().is_err() {
            return;
        }
    }
}

impl crate::StreamRewriter for MessagesStream {
    fn feed(&mut self, chunk: Bytes) {
        MessagesStream::feed(self, chunk);
    }
    fn next_output(&mut self) -> Option<Bytes> {
        MessagesStream::next_output(self)
    }
    fn finish(&mut self) {
        MessagesStream::finish(self);
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
    if sources.is_empty() {
        return Cow::Borrowed(body);
    }
    match body_inner(body, sources, opts) {
        Ok(Some(v)) => Cow::Owned(v),
        Ok(None) | Err(Invalid) => Cow::Borrowed(body),
    }
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
    let mut cited = vec![false; sources.len() + 1];
    for m in tracker.markers() {
        if let Some(c) = cited.get_mut(m.number as usize) {
            *c = true;
        }
    }
    let mut sp = Splice::new();
    add_top_level(
        b,
        (close, w.has_members()),
        &existing,
        sources,
        opts,
        &cited,
        &mut sp,
    );
    let mut out = Vec::with_capacity(b.len() + 1024);
    sp.apply(b, &mut out);
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
        let mut w = ObjectWalker::new(b, el, a.depth())?;
        let mut is_text = false;
        let mut text = None;
        while let Some(m) = w.next_member()? {
            let end = w.skip_value()?;
            if m.key_is(b, "type") {
                is_text = &b[m.value_start..end] == b"\"text\"";
            } else if m.key_is(b, "text") && b[m.value_start] == b'"' {
                text = Some(m.value_start + 1..end - 1);
            }
        }
        if let (true, Some(r)) = (is_text, text) {
            t.push_json(&b[r]);
            // Blocks are separate paragraphs.
            t.push_json(b"\\n\\n");
        }
        a.value_end(w.close() + 1);
    }
    Ok(())
}

//! `/v1/responses` (the OpenAI Responses API): the streaming and the
//! whole-body rewriter.
//!
//! A *text part* is one `output_text` content part of a `message` output
//! item, named by its (`output_index`, `content_index`) (the stream also
//! gives its `item_id`); its text is, streamed, the concatenation of its
//! `response.output_text.delta` events' `delta`, whole, its `text`. Each
//! part's text goes through its own [`MarkerTracker`], so offsets count in
//! that part's text, streamed and whole alike. Annotations are flat, as
//! the Responses API writes them:
//! `{"type":"url_citation","start_index","end_index","url","title"}`.
//!
//! # Streaming ([`ResponsesStream`])
//!
//! Events are forwarded as they arrive; content is never held back. Per
//! event the rewriter reads the data's top-level `type`,
//! `sequence_number`, `output_index`, `content_index`, `item_id`, `delta`,
//! `obfuscation` and `annotation_index`; a text delta shaped like the
//! part's last one (the same bytes but its `delta`, `obfuscation` and
//! `sequence_number`) is recognised by a learned template instead, in
//! the input piece before the SSE parser sees it, with the same output
//! (`fused.rs`). Then:
//!
//! * before each part's `response.output_text.done`, when its text has
//!   markers, one `response.output_text.annotation.added` event per marker
//!   (`item_id`, `output_index`, `content_index`, `annotation_index`
//!   counting on after the upstream's own `annotation.added` events for
//!   that part, `annotation`), written `event: <type>\ndata: <json>\n\n`
//!   (the `event:` line only when the `done` event has one);
//! * the same annotations appended to the part's `annotations` in the
//!   snapshots after it: `response.content_part.done` (`part`),
//!   `response.output_item.done` (`item.content[i]`) and
//!   `response.completed` / `response.incomplete`
//!   (`response.output[j].content[i]`, where a part whose `done` never came
//!   gets its markers too);
//! * `sources` and/or `citations` on the `response` object of the first
//!   `response.completed` / `response.incomplete`, and nowhere else (an
//!   upstream member of the same name there is replaced);
//! * `sequence_number`s stay consecutive: once events have been inserted,
//!   every later event's number is raised by the count inserted before it
//!   (a splice of its digits: the event goes out as the slice before the
//!   number, the new digits and the slice after it, no copy of the event);
//!   an inserted event takes the number its place calls for (the `done`
//!   event's own number, before it is raised); a stream without numbers
//!   gets inserted events without one;
//! * everything else passes through byte for byte, as slices of the input:
//!   deltas of any kind, reasoning, tool calls, `response.failed`, `error`,
//!   comments, `[DONE]`, unknown events, invalid JSON, events over the size
//!   limit. A stream that never reaches `response.completed` /
//!   `response.incomplete` (failed, an error event, cut) gets no `sources`;
//!   annotation events already sent stay.
//!
//! With the `citations` dialect alone there are no annotations (they
//! belong to the `sources` dialect, as on chat): only `citations` on the
//! final response.
//!
//! Memory: per text part a few words, its tracker until its `done`, and
//! its markers; at most [`MAX_PARTS`] parts are tracked (later ones pass
//! through without annotations).
//!
//! # Whole bodies ([`rewrite_body`])
//!
//! The same placement on the `"object": "response"` body: each
//! `output_text` part's `annotations` (ours appended), top-level
//! `sources` and/or `citations`.
//!
//! # Files
//!
//! * `mod.rs` (here): [`ResponsesHandler`], what the stream does per event;
//! * `fused.rs`: the fused path of the text deltas (a learned template of
//!   the `response.output_text.delta` event, matched in the input pieces
//!   before the SSE parser; the same output), and `fused_tests.rs`, its
//!   differential tests against the general path;
//! * `snapshot.rs`: the splices into a part, an item, `output`, the
//!   response object (shared by the snapshot events and whole bodies), and
//!   [`rewrite_body`].

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::cite::{Marker, MarkerTracker};
use crate::json::{self, Cursor, Invalid, ObjectWalker, Splice};
use crate::rewrite::RewriteOptions;
use crate::rewrite::additions::{annotations_len, cited_set, splice_event};
use crate::rewrite::driver::{Handler, Out, SseRewriter, Tail};
use crate::sources::{AnnotationShape, Sources, decimal};
use crate::sse::{FrameKind, FrameRef, Parser};

mod fused;
#[cfg(test)]
mod fused_tests;
mod snapshot;

pub use snapshot::rewrite_body;
use snapshot::{Ctx, PartMarkers};

/// The most text parts a stream's rewriter tracks; later parts pass
/// through without annotations.
pub const MAX_PARTS: usize = 1024;

/// Streaming rewriter for `/v1/responses` event streams.
///
/// Same sans-IO contract as [`ChatStream`](crate::ChatStream): `feed`,
/// drain `next_output`, `finish`, drain again. The module docs say what it
/// adds where.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use citestream::{ResponsesStream, RewriteOptions, Sources};
///
/// let sources = Arc::new(Sources::from_json(br#"[{"title":"T","url":"u"}]"#).unwrap());
/// let mut rw = ResponsesStream::new(sources, RewriteOptions::new());
/// rw.feed(Bytes::from_static(
///     b"event: response.output_text.delta\n\
///       data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"output_index\":0,\"content_index\":0,\"delta\":\"A [1].\",\"sequence_number\":4}\n\n\
///       event: response.output_text.done\n\
///       data: {\"type\":\"response.output_text.done\",\"item_id\":\"m\",\"output_index\":0,\"content_index\":0,\"text\":\"A [1].\",\"sequence_number\":5}\n\n",
/// ));
/// rw.finish();
/// let mut out = Vec::new();
/// while let Some(b) = rw.next_output() {
///     out.extend_from_slice(&b);
/// }
/// let out = String::from_utf8(out).unwrap();
/// assert!(out.contains(
///     "event: response.output_text.annotation.added\n\
///      data: {\"type\":\"response.output_text.annotation.added\",\"sequence_number\":5,\"item_id\":\"m\",\"output_index\":0,\"content_index\":0,\"annotation_index\":0,\"annotation\":{\"type\":\"url_citation\",\"start_index\":2,\"end_index\":5,\"url\":\"u\",\"title\":\"T\"}}\n\n"
/// ));
/// assert!(out.ends_with("\"text\":\"A [1].\",\"sequence_number\":6}\n\n"));
/// ```
///
/// # Panics
///
/// Never panics, on any input.
pub type ResponsesStream = SseRewriter<ResponsesHandler>;

/// One text part of a stream.
#[derive(Debug)]
struct Part {
    output_index: u32,
    content_index: u32,
    /// Until the part's `response.output_text.done`.
    tracker: Option<MarkerTracker>,
    /// Ours, once the tracker is finished.
    markers: Vec<Marker>,
    /// The upstream's own annotations for the part (`annotation.added`).
    upstream: u64,
}

/// The per-frame state of a [`ResponsesStream`] (everything but the
/// parser).
#[derive(Debug)]
pub struct ResponsesHandler {
    sources: Arc<Sources>,
    opts: RewriteOptions,
    parts: Vec<Part>,
    /// The part the last delta went to (looked up first).
    last: usize,
    /// Events inserted so far: every later `sequence_number` is raised by
    /// this much.
    shift: u64,
    /// The top-level additions are out (or queued).
    done: bool,
    /// Where raised sequence numbers are written, split off as `Bytes`
    /// (an allocation only when its capacity runs out).
    digits: BytesMut,
    /// The fused path's template and state (`fused.rs`).
    fused: fused::Fused,
    out: Out,
}

/// Room for raised sequence numbers: a few hundred at a time.
const DIGITS_ARENA: usize = 4096;

impl ResponsesStream {
    /// A rewriter adding `sources` as configured by `opts` (`n` does not
    /// apply to this endpoint). With no sources it adds nothing.
    #[must_use]
    pub fn new(sources: Arc<Sources>, opts: RewriteOptions) -> Self {
        let parser = Parser::with_config(&opts.sse);
        SseRewriter::with_handler(
            parser,
            ResponsesHandler {
                sources,
                opts,
                parts: Vec::new(),
                last: 0,
                shift: 0,
                done: false,
                digits: BytesMut::new(),
                fused: fused::Fused::default(),
                out: Out::default(),
            },
        )
    }
}

/// The event types the rewriter acts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Ty {
    #[default]
    Other,
    Delta,
    Annotation,
    TextDone,
    PartDone,
    ItemDone,
    /// `response.completed` or `response.incomplete`.
    Final,
}

/// What the rewriter reads of one event's data (a JSON object): spans of
/// the members it may need (compact, so a scan is cheap to set up),
/// numbers parsed only when asked for.
#[derive(Debug, Default)]
struct Scan {
    ty: Ty,
    /// The `sequence_number` value's span.
    seq: Option<Span>,
    output_index: Option<Span>,
    content_index: Option<Span>,
    /// The `item_id` value's span (a string token, quotes included).
    item_id: Option<Span>,
    /// The `delta` string's raw body.
    delta: Option<Span>,
    /// The `obfuscation` string's span (quotes included).
    obfuscation: Option<Span>,
    annotation_index: Option<Span>,
    /// Where the `part`, `item`, `response` object values start.
    part: Option<u32>,
    item: Option<u32>,
    response: Option<u32>,
}

/// A byte span of an event's data (at most [`u32::MAX`] bytes; larger
/// events pass through unread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span(u32, u32);

impl Span {
    fn of(r: Range<usize>) -> Self {
        Span(r.start as u32, r.end as u32)
    }

    fn range(self) -> Range<usize> {
        self.0 as usize..self.1 as usize
    }
}

impl Scan {
    /// Notes the member `key` whose value is `d[v]`.
    #[inline(always)]
    fn member(&mut self, d: &[u8], key: &[u8], v: Range<usize>) {
        let first = d[v.start];
        let at = v.start as u32;
        match key {
            b"type" => self.ty = event_ty(&d[v]),
            b"delta" if first == b'"' => self.delta = Some(Span::of(v.start + 1..v.end - 1)),
            b"sequence_number" => self.seq = Some(Span::of(v)),
            b"output_index" => self.output_index = Some(Span::of(v)),
            b"content_index" => self.content_index = Some(Span::of(v)),
            b"item_id" if first == b'"' => self.item_id = Some(Span::of(v)),
            b"obfuscation" if first == b'"' => self.obfuscation = Some(Span::of(v)),
            b"annotation_index" => self.annotation_index = Some(Span::of(v)),
            b"part" if first == b'{' => self.part = Some(at),
            b"item" if first == b'{' => self.item = Some(at),
            b"response" if first == b'{' => self.response = Some(at),
            _ => {}
        }
    }

    /// The `sequence_number`: its span and value.
    fn seq(&self, d: &[u8]) -> Option<(Range<usize>, u64)> {
        let r = self.seq?.range();
        integer(&d[r.clone()]).map(|n| (r, n))
    }

    /// The `output_index`.
    fn output(&self, d: &[u8]) -> Option<u32> {
        json::parse_u32(&d[self.output_index?.range()])
    }

    /// (`output_index`, `content_index`).
    fn place(&self, d: &[u8]) -> Option<(u32, u32)> {
        Some((
            self.output(d)?,
            json::parse_u32(&d[self.content_index?.range()])?,
        ))
    }

    /// The `annotation_index`.
    fn annotation_index(&self, d: &[u8]) -> Option<u64> {
        integer(&d[self.annotation_index?.range()])
    }
}

/// The type token (quotes included) of each event we act on.
#[inline]
fn event_ty(token: &[u8]) -> Ty {
    match token {
        b"\"response.output_text.delta\"" => Ty::Delta,
        b"\"response.output_text.annotation.added\"" => Ty::Annotation,
        b"\"response.output_text.done\"" => Ty::TextDone,
        b"\"response.content_part.done\"" => Ty::PartDone,
        b"\"response.output_item.done\"" => Ty::ItemDone,
        b"\"response.completed\"" | b"\"response.incomplete\"" => Ty::Final,
        _ => Ty::Other,
    }
}

/// A non-negative integer token (at most 19 digits, no leading zero).
fn integer(token: &[u8]) -> Option<u64> {
    let ok = !token.is_empty()
        && token.len() <= 19
        && token.iter().all(u8::is_ascii_digit)
        && (token[0] != b'0' || token.len() == 1);
    ok.then(|| {
        token
            .iter()
            .fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'))
    })
}

/// Reads the event data `d` (validating all of it); [`Invalid`] when it is
/// not one JSON object. Token by token with a [`Cursor`]; an escaped key
/// takes the general walk ([`scan_escaped`]).
#[inline]
fn scan(d: &[u8], sc: &mut Scan) -> Result<(), Invalid> {
    if d.len() > u32::MAX as usize {
        return Err(Invalid);
    }
    let mut c = Cursor::new(d);
    c.ws();
    c.eat(b'{')?;
    c.ws();
    if !c.empty(b'}') {
        loop {
            let Some(k) = c.key()? else {
                return scan_escaped(d, sc);
            };
            let start = c.i;
            c.skip(1)?;
            sc.member(d, &d[k], start..c.i);
            if !c.more(b'}')? {
                break;
            }
        }
    }
    c.ws();
    if c.i != d.len() {
        return Err(Invalid);
    }
    Ok(())
}

/// [`scan`] of data with an escaped key: the keys decoded.
#[cold]
fn scan_escaped(d: &[u8], sc: &mut Scan) -> Result<(), Invalid> {
    *sc = Scan::default();
    let mut w = ObjectWalker::new(d, json::skip_ws(d, 0), 0)?;
    while let Some(m) = w.next_member()? {
        let end = w.skip_value()?;
        let key = json::decode_str(&d[m.key.clone()]);
        sc.member(d, key.as_bytes(), m.value_start..end);
    }
    if json::skip_ws(d, w.close() + 1) != d.len() {
        return Err(Invalid);
    }
    Ok(())
}

/// The recorded markers of a stream's parts, for the snapshot splices.
struct Recorded<'a>(&'a [Part]);

impl PartMarkers for Recorded<'_> {
    fn markers(&mut self, o: u32, c: u32, _: Option<&[u8]>) -> &[Marker] {
        self.0
            .iter()
            .find(|p| p.output_index == o && p.content_index == c)
            .map_or(&[], |p| &p.markers[..])
    }
}

impl Handler for ResponsesHandler {
    const NAME: &'static str = "ResponsesStream";
    const FUSED: bool = true;

    #[inline]
    fn handle(&mut self, f: &FrameRef<'_>) {
        if f.kind() != FrameKind::Event || self.sources.is_empty() {
            return self.out.pass(f);
        }
        // A delta shaped like the learned one: no JSON read.
        if self.template_hit(f.raw()) {
            return self.out.pass(f);
        }
        let mut sc = Scan::default();
        match scan(f.data(), &mut sc) {
            Ok(()) => self.event(f, &sc),
            Err(Invalid) => self.out.pass(f),
        }
    }

    fn out(&mut self) -> &mut Out {
        &mut self.out
    }

    fn end(&mut self) {}

    fn sources_emitted(&self) -> bool {
        self.done
    }

    // Inlined into both callers in the driver (the piece's rest, a
    // straddling event).
    #[inline(always)]
    fn fast_events(&mut self, rest: &[u8], max_event: usize) -> usize {
        self.fused_events(rest, max_event)
    }

    #[inline]
    fn fast_tail(&mut self, tail: &[u8]) -> Tail {
        self.fused_tail(tail)
    }

    #[inline]
    fn fast_straddle(&mut self, tail: &[u8], head: &[u8], limit: usize) -> usize {
        self.fused_straddle(tail, head, limit)
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("parts", &self.parts.len())
            .field("shift", &self.shift)
            .field("done", &self.done);
    }
}

impl ResponsesHandler {
    fn event(&mut self, f: &FrameRef<'_>, sc: &Scan) {
        match sc.ty {
            Ty::Delta => {
                if let (Some(k), Some(r)) = (self.part(f.data(), sc), sc.delta) {
                    if let Some(t) = self.parts[k].tracker.as_mut() {
                        t.push_json(&f.data()[r.range()]);
                        // (A part still open: later deltas like this one
                        // take the fused path.)
                        self.learn(f, sc, k);
                    }
                }
                self.emit(f, sc, None);
            }
            Ty::Annotation => {
                if let Some(k) = self.part(f.data(), sc) {
                    let p = &mut self.parts[k];
                    p.upstream = match sc.annotation_index(f.data()) {
                        Some(i) => p.upstream.max(i.saturating_add(1)),
                        None => p.upstream.saturating_add(1),
                    };
                }
                self.emit(f, sc, None);
            }
            Ty::TextDone => {
                if let Some(k) = self.part(f.data(), sc) {
                    self.finish_part(k);
                    if self.opts.dialect.sources && !self.parts[k].markers.is_empty() {
                        self.annotation_events(f, sc, k);
                    }
                }
                self.emit(f, sc, None);
            }
            Ty::PartDone | Ty::ItemDone | Ty::Final => self.snapshot(f, sc),
            Ty::Other => self.emit(f, sc, None),
        }
    }

    /// The part an event names, created on first sight (`None` when the
    /// event names none, or past [`MAX_PARTS`]).
    fn part(&mut self, d: &[u8], sc: &Scan) -> Option<usize> {
        let (o, c) = sc.place(d)?;
        let is = |p: &Part| p.output_index == o && p.content_index == c;
        if self.parts.get(self.last).is_some_and(is) {
            return Some(self.last);
        }
        let k = match self.parts.iter().position(is) {
            Some(k) => k,
            None if self.parts.len() < MAX_PARTS => {
                self.parts.push(Part {
                    output_index: o,
                    content_index: c,
                    tracker: Some(MarkerTracker::new(
                        self.sources.len() as u32,
                        self.opts.offsets,
                    )),
                    markers: Vec::new(),
                    upstream: 0,
                });
                self.parts.len() - 1
            }
            None => return None,
        };
        self.last = k;
        Some(k)
    }

    /// Ends part `k`'s text: its markers are final.
    fn finish_part(&mut self, k: usize) {
        let p = &mut self.parts[k];
        if let Some(mut t) = p.tracker.take() {
            t.finish();
            p.markers = t.take_markers();
        }
    }

    /// Queues one `response.output_text.annotation.added` event per marker
    /// of part `k`, before the `done` event `f`; later numbers go up.
    fn annotation_events(&mut self, f: &FrameRef<'_>, sc: &Scan, k: usize) {
        let d = f.data();
        let p = &self.parts[k];
        let event_line = f.event_field().is_some();
        // (Sized once: the fixed members of one event at their longest,
        // the item id, and the annotations themselves.)
        let id = sc.item_id.map_or(0, |r| r.range().len());
        let shape = AnnotationShape::Flat;
        let size = annotations_len(shape, &self.sources, &p.markers);
        let mut out = Vec::with_capacity(p.markers.len() * (280 + id) + size);
        let mut buf = [0u8; 20];
        for (n, m) in p.markers.iter().enumerate() {
            if event_line {
                out.extend_from_slice(b"event: response.output_text.annotation.added\n");
            }
            out.extend_from_slice(b"data: {\"type\":\"response.output_text.annotation.added\"");
            if let Some((_, seq)) = sc.seq(d) {
                out.extend_from_slice(b",\"sequence_number\":");
                let v = seq.saturating_add(self.shift).saturating_add(n as u64);
                out.extend_from_slice(decimal(v, &mut buf));
            }
            if let Some(r) = sc.item_id {
                out.extend_from_slice(b",\"item_id\":");
                out.extend_from_slice(&d[r.range()]);
            }
            out.extend_from_slice(b",\"output_index\":");
            out.extend_from_slice(decimal(u64::from(p.output_index), &mut buf));
            out.extend_from_slice(b",\"content_index\":");
            out.extend_from_slice(decimal(u64::from(p.content_index), &mut buf));
            out.extend_from_slice(b",\"annotation_index\":");
            out.extend_from_slice(decimal(p.upstream.saturating_add(n as u64), &mut buf));
            out.extend_from_slice(b",\"annotation\":");
            let s = &self.sources;
            s.push_annotation_as(AnnotationShape::Flat, &mut out, m.number, m.start, m.end);
            out.extend_from_slice(b"}\n\n");
        }
        if sc.seq.is_some() {
            self.shift = self.shift.saturating_add(p.markers.len() as u64);
        }
        self.out.push(Bytes::from(out));
    }

    /// A snapshot event (`content_part.done`, `output_item.done`, the final
    /// response): our annotations spliced in, and on the first final one
    /// the top-level additions.
    fn snapshot(&mut self, f: &FrameRef<'_>, sc: &Scan) {
        let d = f.data();
        if sc.ty == Ty::Final {
            if self.done {
                return self.emit(f, sc, None);
            }
            // Parts whose `done` never came: their markers so far.
            for k in 0..self.parts.len() {
                self.finish_part(k);
            }
        }
        let mut ctx = Ctx {
            sources: &self.sources,
            opts: &self.opts,
            markers: Recorded(&self.parts),
            sp: Splice::new(),
        };
        let sources = &self.sources;
        let done = match (sc.ty, sc.part, sc.item, sc.response) {
            (Ty::PartDone, Some(at), _, _) => sc
                .place(d)
                .map(|oc| ctx.part(d, at as usize, 1, oc).map(|_| false)),
            (Ty::ItemDone, _, Some(at), _) => sc
                .output(d)
                .map(|o| ctx.item(d, at as usize, 1, o).map(|_| false)),
            (Ty::Final, _, _, Some(at)) => Some(
                ctx.response(d, at as usize, 1, |m| {
                    cited_set(sources, m.0.iter().flat_map(|p| &p.markers))
                })
                .map(|(is_response, _)| is_response),
            ),
            _ => None,
        };
        match done {
            Some(Ok(done)) => {
                let sp = ctx.sp;
                self.done |= done;
                self.emit(f, sc, (!sp.is_empty()).then_some(sp));
            }
            // (A splice of a snapshot that does not walk: as it came.)
            Some(Err(Invalid)) | None => self.emit(f, sc, None),
        }
    }

    /// Forwards `f` with `sp` applied and its `sequence_number` raised by
    /// the events inserted so far: a slice of the input when neither
    /// applies; the slices around the new digits when only the number
    /// changes; else written fresh (spliced into its framing).
    #[inline]
    fn emit(&mut self, f: &FrameRef<'_>, sc: &Scan, sp: Option<Splice>) {
        let bump = match sc.seq.is_some() && self.shift > 0 {
            true => sc
                .seq(f.data())
                .map(|(r, v)| (r, v.saturating_add(self.shift))),
            false => None,
        };
        match (sp, bump) {
            (None, None) => self.out.pass(f),
            (None, Some((r, v))) => match (f.piece(), f.data_range()) {
                (Some((piece, at)), Some(dr)) => {
                    let (s, e) = (at + dr.start + r.start, at + dr.start + r.end);
                    let digits = self.digits(v);
                    self.out.pass_span(piece, at, s);
                    self.out.push(digits);
                    self.out.pass_span(piece, e, at + f.raw().len());
                }
                _ => {
                    let mut sp = Splice::new();
                    sp.replace(r, decimal(v, &mut [0u8; 20]).to_vec());
                    self.write(f, sp);
                }
            },
            (Some(mut sp), bump) => {
                if let Some((r, v)) = bump {
                    sp.replace(r, decimal(v, &mut [0u8; 20]).to_vec());
                }
                self.write(f, sp);
            }
        }
    }

    /// `f` with `sp` applied, queued.
    fn write(&mut self, f: &FrameRef<'_>, mut sp: Splice) {
        if f.data_range().is_none() {
            // Re-framed: a split CRLF's LF must not follow it.
            self.out.swallow_line_end = f.raw().ends_with(b"\r");
        }
        self.out.push(splice_event(f, &mut sp));
    }

    /// `v` in decimal, split off the digits arena.
    fn digits(&mut self, v: u64) -> Bytes {
        let mut buf = [0u8; 20];
        let d = decimal(v, &mut buf);
        if self.digits.capacity() - self.digits.len() < d.len() {
            self.digits.reserve(DIGITS_ARENA);
        }
        self.digits.extend_from_slice(d);
        self.digits.split().freeze()
    }
}

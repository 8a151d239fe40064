//! `/v1/chat/completions`: the streaming and the whole-body rewriter.
//!
//! Both feed each choice's content to a [`MarkerTracker`], the single
//! source of truth for offsets, so streamed and whole responses cannot
//! disagree.
//!
//! # Streaming ([`ChatStream`])
//!
//! Events are forwarded as they arrive; nothing is held back. For each
//! chunk the rewriter reads only `choices[].index`,
//! `choices[].delta.content` and `choices[].finish_reason` (plus the
//! envelope `id`, `object`, `created`, `model`, `system_fingerprint` when a
//! choice finishes) with the chunk scanner (`scan.rs`). A chunk it does not
//! change goes out as the very same bytes (a slice of the input). Then:
//!
//! * before the first `finish_reason` chunk of each choice with at least one
//!   marker, one synthesized chunk
//!   `{"id",…,"choices":[{"index":i,"delta":{"annotations":[…]},"finish_reason":null}]}`;
//! * on the finish chunk of the n-th choice to finish, top-level `sources`
//!   and/or `citations`, spliced in before its closing brace (an upstream
//!   member of the same name in that chunk is replaced);
//! * a finish chunk that also carries content for a choice with annotations
//!   is split: the content part (`finish_reason: null`, without `usage`),
//!   the annotations, then the finish chunk with an empty `delta`;
//! * a stream that ends (`[DONE]` or end of input) after some but fewer than
//!   `n` finishes gets the top-level additions on a synthesized chunk with
//!   `choices: []` just before `[DONE]` or the end;
//! * everything else (usage-only chunks, `[DONE]`, comments, errors,
//!   unknown events, invalid JSON, events over the size limit) passes
//!   through byte for byte.
//!
//! # Whole bodies ([`rewrite_body`])
//!
//! `annotations` on each `choices[i].message` (ours appended after any
//! upstream ones; an empty array when there are none), top-level `sources`
//! and/or `citations`; every other byte stays where it was.
//!
//! # Files
//!
//! * `scan.rs`: the chunk scanner (the fast scan and the full scan), with
//!   `scan/prefix.rs`, the validated start of a recent chunk;
//! * `template.rs`: the template learner (the hot path), with
//!   `template/learn.rs` (learning a shape) and `template/nums.rs` (the
//!   numbers-then-content walk);
//! * `fused.rs`: learning and matching templates for [`ChatHandler`], on
//!   parsed events and on whole events in the input pieces (the fused
//!   path, before the SSE parser);
//! * `mod.rs` (here): [`ChatHandler`], what the stream does per chunk, and
//!   the cold path of finish chunks;
//! * `body.rs`: the whole-body rewriter.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::cite::{Marker, MarkerTracker};
use crate::json::{self, Holes, Invalid, Splice};
use crate::rewrite::additions::{
    Existing, add_top_level, annotations_len, cited_set, event_with_top_level, push_annotations,
    reframe, splice_event,
};
use crate::rewrite::driver::{Handler, Out, SseRewriter, Tail};
use crate::rewrite::{MAX_CHOICES, RewriteOptions};
use crate::sources::{AnnotationShape, Sources, decimal};
use crate::sse::{self, FrameKind, FrameRef, Parser};

mod body;
mod fused;
pub(crate) mod scan;
pub(crate) mod template;

pub use body::rewrite_body;
use scan::{
    ChoiceScan, ChoiceScans, ChunkScan, ENVELOPE, ENVELOPE_KEYS, FastChoice, FastChoices, FastScan,
    ScanPrefix, fast_scan, has_finish, scan_chunk,
};
use template::{ChunkTemplate, Contents, TEMPLATES};

#[derive(Clone, Debug)]
struct ChoiceState {
    tracker: MarkerTracker,
    finished: bool,
    markers: Vec<Marker>,
}

/// Streaming rewriter for `/v1/chat/completions` (`chat.completion.chunk`
/// events over SSE).
///
/// # Contract
///
/// Sans-IO: [`feed`](ChatStream::feed) input pieces as they arrive and
/// drain [`next_output`](ChatStream::next_output) until `None` after each;
/// call [`finish`](ChatStream::finish) at the end of the input and drain
/// again. The concatenation of the outputs is the rewritten stream.
/// Unchanged events come out as slices of the input (no copy); memory is
/// bounded by the SSE event size limit plus a few bytes per choice and the
/// markers found; the content itself is never kept.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use citestream::{ChatStream, RewriteOptions, Sources};
///
/// let sources = Arc::new(Sources::from_json(br#"[{"title":"T","url":"https://t/"}]"#).unwrap());
/// let mut rw = ChatStream::new(sources, RewriteOptions::new());
/// let mut out = Vec::new();
/// for piece in [
///     &br#"data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi [1]"},"finish_reason":null}]}"#[..],
///     b"\n\ndata: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
///     b"data: [DONE]\n\n",
/// ] {
///     rw.feed(Bytes::copy_from_slice(piece));
///     while let Some(b) = rw.next_output() {
///         out.extend_from_slice(&b);
///     }
/// }
/// rw.finish();
/// while let Some(b) = rw.next_output() {
///     out.extend_from_slice(&b);
/// }
/// let out = String::from_utf8(out).unwrap();
/// assert!(out.contains(r#"{"id":"c","choices":[{"index":0,"delta":{"annotations":[{"type":"url_citation","url_citation":{"start_index":3,"end_index":6,"url":"https://t/","title":"T"}}]},"finish_reason":null}]}"#));
/// assert!(out.contains(r#""finish_reason":"stop"}],"sources":[{"index":1,"title":"T","url":"https://t/"}]}"#));
/// ```
///
/// # Panics
///
/// Never panics, on any input.
pub type ChatStream = SseRewriter<ChatHandler>;

/// Where the walk of a held tail stopped ([`ChatHandler::fused_tail`]):
/// the template, the literal segment and byte to go on from in the next
/// piece, the contents found in the tail.
#[derive(Clone, Debug, Default)]
struct HeldTail {
    template: usize,
    k: usize,
    lit: usize,
    contents: Contents,
}

/// The per-frame state of a [`ChatStream`]: everything but the parser, so
/// frames lent by the parser can be handled while this state changes.
#[derive(Debug)]
pub struct ChatHandler {
    sources: Arc<Sources>,
    opts: RewriteOptions,
    choices: Vec<ChoiceState>,
    finished: u32,
    top_done: bool,
    /// Envelope members of the latest finish chunk, for a trailing chunk.
    last_envelope: Vec<u8>,
    out: Out,
    /// The choices of the last fast scan (inline: no allocation).
    fast: FastChoices,
    /// The varying tokens of the last fast scan (inline: no allocation).
    holes: Holes,
    /// The envelope of a recent chunk, validated (for the fast scan).
    prefix: ScanPrefix,
    templates: [ChunkTemplate; TEMPLATES],
    /// The template slot to learn into next.
    next_template: usize,
    /// The content bodies of the last template match.
    found: Contents,
    /// The template slot that matched last.
    last_hit: usize,
    /// For each template slot, the slot that took the last straddling
    /// event after it (tried first on a held tail: `n` > 1 choices take
    /// turns).
    next_hit: [usize; TEMPLATES],
    /// Where the walk of a held tail stopped.
    held: HeldTail,
    /// Whether the last parsed chunk matched a template: then the next
    /// one tries them before [`has_finish`].
    parsed_hits: bool,
    /// Whether whole events are recognised in the input pieces
    /// ([`Handler::fast_events`]); off only to test that path against the
    /// parser's.
    fused: bool,
}

impl ChatStream {
    /// A rewriter adding `sources` as configured by `opts`. With no sources
    /// it adds nothing (the stream passes through unchanged).
    #[must_use]
    pub fn new(sources: Arc<Sources>, opts: RewriteOptions) -> Self {
        let parser = Parser::with_config(&opts.sse);
        SseRewriter::with_handler(
            parser,
            ChatHandler {
                sources,
                opts,
                choices: Vec::new(),
                finished: 0,
                top_done: false,
                last_envelope: Vec::new(),
                out: Out::default(),
                fast: FastChoices::default(),
                holes: Holes::default(),
                prefix: ScanPrefix::default(),
                templates: Default::default(),
                next_template: 0,
                found: Contents::default(),
                last_hit: 0,
                next_hit: [0, 1, 2, 3],
                held: HeldTail::default(),
                parsed_hits: false,
                fused: true,
            },
        )
    }
}

impl Handler for ChatHandler {
    const NAME: &'static str = "ChatStream";
    const FUSED: bool = true;

    #[inline]
    fn handle(&mut self, f: &FrameRef<'_>) {
        match f.kind() {
            FrameKind::Event => self.event(f),
            _ => self.out.pass(f),
        }
    }

    fn out(&mut self) -> &mut Out {
        &mut self.out
    }

    fn end(&mut self) {
        self.flush_pending_top();
    }

    fn sources_emitted(&self) -> bool {
        self.top_done
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
        d.field("choices", &self.choices.len())
            .field("finished", &self.finished)
            .field("top_done", &self.top_done);
    }
}

impl ChatHandler {
    #[inline]
    fn event(&mut self, f: &FrameRef<'_>) {
        if self.sources.is_empty() || f.event_type() != b"message" {
            return self.out.pass(f);
        }
        let d = f.data();
        if d == b"[DONE]" {
            self.flush_pending_top();
            return self.out.pass(f);
        }
        // The hot path: a chunk shaped like a recent one, tried before the
        // finish search while parsed chunks match templates (every event
        // is parsed at small reads); after it otherwise (a parsed chunk is
        // then one the fused path did not take, often a finish chunk,
        // which no template matches).
        let hits = self.parsed_hits;
        if hits && self.template_hit(f.raw(), d) {
            return self.out.pass(f);
        }
        self.parsed_hits = false;
        if has_finish(d) {
            return self.slow_path(f);
        }
        if !hits && self.template_hit(f.raw(), d) {
            self.parsed_hits = true;
            return self.out.pass(f);
        }
        match fast_scan(d, &mut self.fast, &mut self.holes, Some(&mut self.prefix)) {
            // (Invalid or without choices: nothing to read.)
            Err(Invalid) | Ok(FastScan::NoChoices) => self.out.pass(f),
            Ok(FastScan::Read) => {
                let opening = self.opening_chunk();
                for k in 0..self.fast.len() {
                    let FastChoice { index, content } = self.fast[k].clone();
                    let Some(st) = index.and_then(|i| self.choice(i)) else {
                        continue;
                    };
                    if st.finished {
                        continue;
                    }
                    if let Some(r) = content {
                        st.tracker.push_json(&d[r]);
                    }
                }
                if !opening {
                    self.learn(f);
                }
                self.out.pass(f);
            }
            // An escaped key, a finish or many choices: the full scan.
            Ok(FastScan::Defer) => self.slow_path(f),
        }
    }

    /// The complete scan of a chunk, for finish chunks and chunks with
    /// escaped keys.
    fn slow_path(&mut self, f: &FrameRef<'_>) {
        // (A finish chunk's scan: once or twice per stream, not kept.)
        let mut scan = ChunkScan::default();
        let mut scans = ChoiceScans::default();
        match scan_chunk(f.data(), &mut scan, &mut scans, Some(&self.prefix)) {
            Ok(()) => self.chunk(f, &scan, &mut scans),
            Err(Invalid) => self.out.pass(f),
        }
    }

    #[inline]
    fn choice(&mut self, index: u32) -> Option<&mut ChoiceState> {
        // A choice seen before (every chunk but a choice's first): inlined.
        if (index as usize) < self.choices.len() {
            return Some(&mut self.choices[index as usize]);
        }
        self.new_choice(index)
    }

    /// [`choice`](Self::choice) of an index not seen yet (up to
    /// `MAX_CHOICES`): adds its state and those before it.
    #[cold]
    #[inline(never)]
    fn new_choice(&mut self, index: u32) -> Option<&mut ChoiceState> {
        if index >= MAX_CHOICES {
            return None;
        }
        let i = index as usize;
        while self.choices.len() <= i {
            self.choices.push(ChoiceState {
                tracker: MarkerTracker::new(self.sources.len() as u32, self.opts.offsets),
                finished: false,
                markers: Vec::new(),
            });
        }
        Some(&mut self.choices[i])
    }

    fn chunk(&mut self, e: &FrameRef<'_>, scan: &ChunkScan, scans: &mut [ChoiceScan]) {
        let d = e.data();
        let mut finishing = false;
        for c in scans.iter() {
            let Some(st) = c.index.and_then(|i| self.choice(i)) else {
                continue;
            };
            if st.finished {
                continue;
            }
            if let Some(r) = &c.content {
                st.tracker.push_json(&d[r.clone()]);
            }
            finishing |= c.finish.is_some();
        }
        if !finishing {
            return self.out.pass(e);
        }
        self.finish_chunk(e, scan, scans);
    }

    /// The cold path: at least one choice finishes in this chunk.
    ///
    /// Each piece goes out as soon as it is written, each into a buffer
    /// of its exact size (no growth, no intermediate copy).
    fn finish_chunk(&mut self, e: &FrameRef<'_>, scan: &ChunkScan, scans: &mut [ChoiceScan]) {
        let d = e.data();
        self.finished += self.end_choices(scans);
        let scans = &*scans;
        let envelope = Envelope {
            d,
            spans: &scan.envelope,
        };
        let top = !self.top_done && self.finished >= self.opts.n;
        self.top_done |= top;
        if !self.top_done {
            // (For a trailing chunk: only while the additions are due.)
            self.last_envelope.clear();
            envelope.write(&mut self.last_envelope);
        }

        let annotate = self.opts.dialect.sources;
        let marked = |h: &Self, i: u32| annotate && !h.choices[i as usize].markers.is_empty();
        let split = scans.iter().any(|c| {
            c.ending
                && c.index.is_some_and(|i| marked(self, i))
                && c.content.as_ref().is_some_and(|r| !r.is_empty())
        });
        if split {
            self.out.push(content_part(e, scan, scans));
        }
        for idx in scans.iter().filter(|c| c.ending).filter_map(|c| c.index) {
            if marked(self, idx) {
                let chunk = self.annotations_chunk(&envelope, idx);
                self.out.push(chunk);
            }
        }
        // The finish chunk itself.
        let mut sp = Splice::new();
        if split {
            if let Some(r) = &scan.choices {
                sp.replace(r.clone(), finishing_choices(d, scans));
            }
        }
        if top && !split && scan.existing.is_empty() {
            // The common finish chunk: written once, at its exact size.
            let cited = self.cited_set();
            let grown = event_with_top_level(
                e,
                (scan.close, scan.has_members),
                &self.sources,
                &self.opts,
                &cited,
            );
            if let Some(ev) = grown {
                return self.out.push(ev);
            }
        }
        if top {
            let cited = self.cited_set();
            add_top_level(
                d,
                (scan.close, scan.has_members),
                &scan.existing,
                &self.sources,
                &self.opts,
                &cited,
                &mut sp,
            );
        }
        if split {
            let mut data = Vec::with_capacity(sp.len_after(d.len()));
            sp.apply(d, &mut data);
            self.out.push(reframe(e, &data));
            self.out.swallow_line_end = e.raw().ends_with(b"\r");
        } else if !sp.is_empty() {
            self.out.push(splice_event(e, &mut sp));
            if e.data_range().is_none() {
                self.out.swallow_line_end = e.raw().ends_with(b"\r");
            }
        } else {
            self.out.pass(e);
        }
    }

    /// Marks the choices that finish in this chunk (first finish only) as
    /// finished, takes their markers and flags their scans `ending`;
    /// returns how many.
    fn end_choices(&mut self, scans: &mut [ChoiceScan]) -> u32 {
        let mut n = 0;
        for c in scans {
            c.ending = false;
            let Some(idx) = c.index else { continue };
            if c.finish.is_none() {
                continue;
            }
            // (A second finish of the same index in this chunk finds it
            // finished.)
            let Some(st) = self.choice(idx) else { continue };
            if st.finished {
                continue;
            }
            st.finished = true;
            st.tracker.finish();
            st.markers = st.tracker.take_markers();
            c.ending = true;
            n += 1;
        }
        n
    }

    /// The synthesized chunk carrying choice `idx`'s annotations, framed
    /// as an SSE event and written into a buffer of exactly its size (no
    /// growth, no second copy: the memory it holds until the client reads
    /// it is the bytes it takes on the wire).
    fn annotations_chunk(&self, envelope: &Envelope<'_>, idx: u32) -> Bytes {
        const HEAD: &[u8] = b"\"choices\":[{\"index\":";
        const DELTA: &[u8] = b",\"delta\":{\"annotations\":";
        const TAIL: &[u8] = b"},\"finish_reason\":null}]}";
        let markers = &self.choices[idx as usize].markers;
        let mut digits = [0u8; 20];
        let index = decimal(u64::from(idx), &mut digits);
        let members = envelope.len();
        let comma = usize::from(members > 0);
        let annotations = annotations_len(AnnotationShape::Nested, &self.sources, markers);
        let len = b"data: {".len()
            + members
            + comma
            + HEAD.len()
            + index.len()
            + DELTA.len()
            + annotations
            + TAIL.len()
            + b"\n\n".len();
        let mut ev = Vec::with_capacity(len);
        ev.extend_from_slice(b"data: {");
        envelope.write(&mut ev);
        if comma == 1 {
            ev.push(b',');
        }
        ev.extend_from_slice(HEAD);
        ev.extend_from_slice(index);
        ev.extend_from_slice(DELTA);
        push_annotations(AnnotationShape::Nested, &mut ev, &self.sources, markers);
        ev.extend_from_slice(TAIL);
        ev.extend_from_slice(b"\n\n");
        debug_assert_eq!((ev.len(), ev.capacity()), (len, len));
        Bytes::from(ev)
    }

    /// Numbers cited by any finished choice, indexed by number; empty
    /// (no allocation) when the additions do not consult it (only
    /// `citations` with `only_cited` does).
    fn cited_set(&self) -> Vec<bool> {
        if !(self.opts.dialect.citations && self.opts.only_cited) {
            return Vec::new();
        }
        cited_set(&self.sources, self.choices.iter().flat_map(|c| &c.markers))
    }

    /// The stream ends (or `[DONE]`) with fewer than `n` finishes: put the
    /// top-level additions on a synthesized chunk with `choices: []`.
    fn flush_pending_top(&mut self) {
        if self.top_done || self.finished == 0 {
            return;
        }
        self.top_done = true;
        let mut obj = Vec::with_capacity(self.last_envelope.len() + 16);
        obj.push(b'{');
        obj.extend_from_slice(&self.last_envelope);
        if !self.last_envelope.is_empty() {
            obj.push(b',');
        }
        obj.extend_from_slice(b"\"choices\":[]}");
        let close = obj.len() - 1;
        let cited = self.cited_set();
        let mut sp = Splice::new();
        add_top_level(
            &obj,
            (close, true),
            &Existing::default(),
            &self.sources,
            &self.opts,
            &cited,
            &mut sp,
        );
        let mut data = Vec::with_capacity(sp.len_after(obj.len()));
        sp.apply(&obj, &mut data);
        let mut ev = Vec::with_capacity(data.len() + 8);
        sse::write_event(&mut ev, None, None, None, &data);
        self.out.push(Bytes::from(ev));
    }
}

/// The content part of a finish chunk that is split: `finish_reason: null`
/// for the `ending` choices, `usage` moved to the finish chunk.
fn content_part(e: &FrameRef<'_>, scan: &ChunkScan, scans: &[ChoiceScan]) -> Bytes {
    let d = e.data();
    let mut sp = Splice::new();
    for c in scans.iter().filter(|c| c.ending) {
        if let Some(f) = &c.finish {
            sp.replace(f.clone(), &b"null"[..]);
        }
    }
    if let Some(u) = &scan.usage {
        sp.replace(json::removal_span(d, &u.member, u.end), Vec::new());
    }
    let mut data = Vec::with_capacity(sp.len_after(d.len()));
    sp.apply(d, &mut data);
    reframe(e, &data)
}

/// The `choices` array of a split finish chunk: only the `ending` choices,
/// each with an empty `delta` (and `logprobs: null`).
fn finishing_choices(d: &[u8], scans: &[ChoiceScan]) -> Vec<u8> {
    let mut arr = Vec::from(&b"["[..]);
    for (n, c) in scans.iter().filter(|c| c.ending).enumerate() {
        if n > 0 {
            arr.push(b',');
        }
        // Edits relative to the element's own bytes.
        let base = c.span.start;
        let mut csp = Splice::new();
        if let Some(r) = &c.delta {
            csp.replace(r.start - base..r.end - base, &b"{}"[..]);
        }
        if let Some(r) = &c.logprobs {
            csp.replace(r.start - base..r.end - base, &b"null"[..]);
        }
        csp.apply(&d[c.span.clone()], &mut arr);
    }
    arr.push(b']');
    arr
}

/// A chunk's envelope members present (`id`, `object`, … as the full scan
/// found them), to write as `"id":…,"object":…,…`.
struct Envelope<'a> {
    d: &'a [u8],
    spans: &'a [Option<Range<usize>>; ENVELOPE.len()],
}

impl Envelope<'_> {
    fn members(&self) -> impl Iterator<Item = (&'static [u8], &[u8])> + '_ {
        ENVELOPE_KEYS
            .iter()
            .zip(self.spans)
            .filter_map(|(k, r)| Some((*k, self.d.get(r.clone()?)?)))
    }

    /// The length of [`write`](Self::write)'s text.
    fn len(&self) -> usize {
        let members = self.members().map(|(k, v)| k.len() + v.len() + 1);
        members.sum::<usize>().saturating_sub(1)
    }

    /// Appends the members, comma-separated.
    fn write(&self, out: &mut Vec<u8>) {
        out.reserve(self.len());
        for (n, (k, v)) in self.members().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(k);
            out.extend_from_slice(v);
        }
    }
}

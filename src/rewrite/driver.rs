//! The streaming loop shared by every response rewriter: an SSE
//! [`Parser`] lends frames to a [`Handler`] (one per endpoint), which
//! queues output in an [`Out`]; [`SseRewriter`] is the one public wrapper
//! around the pair, as tokio-util's `Framed` is one wrapper over many
//! codecs.
//!
//! # Contract
//!
//! Sans-IO, the same for every handler ([`StreamRewriter`]): `feed` an
//! input piece, drain `next_output` until `None`, repeat; `finish` once at
//! the end of the input and drain again. The concatenation of the outputs
//! is the rewritten stream. A frame the handler passes through goes out as
//! a slice of the input piece it lies in; neighbouring pass-through frames
//! of one piece go out as one slice. Everything a piece yields is out
//! before `None`: nothing is held back.
//!
//! ```text
//!  feed(piece) ──► Parser ──FrameRef──► Handler::handle ──► Out ──► next_output()
//!       │  clean block start: Parser::clean_rest        ▲
//!       └──► Handler::fast_events ── whole events ──────┘ (Parser::skip)
//!  finish()    ──► remaining frames, Handler::end, unterminated tail ──► Out
//! ```
//!
//! The fused path: whenever the parser stands at a clean block start in a
//! piece, the handler may recognise whole events at the start of the
//! piece's rest ([`Handler::fast_events`]) and handle them without a parse;
//! they go out as a run of the piece (or as the piece's rest itself when
//! nothing is queued before them and they reach its end), and the parser
//! skips them. The output is byte-identical to the parsed path's (the chat
//! handler's tests and the `chat_split` fuzz target check it).
//!
//! A split CRLF (`\r` ending one piece, `\n` starting the next) after an
//! event the handler re-framed with LF line ends is the one case where a
//! frame must not reach the handler: [`Out::swallow_line_end`] drops that
//! lone LF here, once for every endpoint.

use std::collections::VecDeque;
use std::fmt;

use bytes::{Buf, Bytes};

use crate::sse::{FrameKind, FrameRef, Parser};

/// The sans-IO contract shared by the streaming rewriters
/// ([`ChatStream`](crate::ChatStream), [`MessagesStream`](crate::MessagesStream)),
/// so adapters (the CLI, `citestream::stream`) drive them the same way.
///
/// Call order: any number of `feed` calls, each followed by draining
/// `next_output` until `None`; then `finish` once and drain again.
pub trait StreamRewriter {
    /// Queues an input piece (any size, split anywhere).
    fn feed(&mut self, chunk: Bytes);
    /// Queues an input piece the caller keeps (copied as needed). The
    /// streaming rewriters absorb tiny pieces without a reference count or
    /// a parse (the small-read path).
    fn feed_slice(&mut self, piece: &[u8]) {
        self.feed(Bytes::copy_from_slice(piece));
    }
    /// The next piece of output, or `None` when more input is needed.
    fn next_output(&mut self) -> Option<Bytes>;
    /// Ends the input; the rest of the output becomes available from
    /// `next_output`.
    fn finish(&mut self);
}

/// What a streaming rewriter does with each frame; [`SseRewriter`] does
/// the rest (parsing, draining, the end of the input). Implemented by the
/// endpoint handlers only (the trait is not nameable outside the crate).
pub trait Handler {
    /// The rewriter's name in `Debug` output (`"ChatStream"`).
    const NAME: &'static str;
    /// Whether the handler has a fused path ([`fast_events`](Self::fast_events)).
    const FUSED: bool = false;
    /// Handles one frame lent by the parser, queueing output in `out()`.
    fn handle(&mut self, f: &FrameRef<'_>);
    /// The output queue.
    fn out(&mut self) -> &mut Out;
    /// The input ended (called once, before the unterminated tail goes out).
    fn end(&mut self);
    /// Whether the top-level additions have been emitted (or queued).
    fn sources_emitted(&self) -> bool;
    /// The handler's state for `Debug` output.
    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>);
    /// The fused path: recognises and fully handles as many whole events
    /// at the start of `rest` (the unscanned rest of an input piece, at a
    /// block start) as it can, and returns the bytes they take; they then
    /// pass through unchanged, as one run of the piece, and the parser
    /// skips them. Only blocks the parser would dispatch as events with
    /// the same data qualify: each one `data:` line without CR or LF, an
    /// LF, a blank LF line, at most `max_event` bytes before the blank
    /// line. The default recognises none.
    ///
    /// Called only when [`FUSED`](Self::FUSED) is set.
    #[inline]
    fn fast_events(&mut self, rest: &[u8], max_event: usize) -> usize {
        let _ = (rest, max_event);
        0
    }
}

/// The output queue of a streaming rewriter. Frames passed through
/// unchanged that lie next to each other in one input piece go out as one
/// slice of it (one reference count update per run instead of per event).
#[derive(Debug, Default)]
pub struct Out {
    queue: VecDeque<Bytes>,
    /// The piece the current run lies in, and the run's bounds in it.
    run: Option<Bytes>,
    run_start: usize,
    run_end: usize,
    /// The last event was re-framed from raw bytes ending in a CR: a
    /// [`LineEnd`](crate::sse::Frame::LineEnd) right after it completed that
    /// CR and must not follow our LF-framed copy.
    pub(crate) swallow_line_end: bool,
}

impl Out {
    /// Forwards a frame unchanged.
    #[inline]
    pub(crate) fn pass(&mut self, f: &FrameRef<'_>) {
        let Some((piece, at)) = f.piece() else {
            self.push(f.raw_bytes());
            return;
        };
        self.pass_span(piece, at, at + f.raw().len());
    }

    /// Forwards `piece[at..end]` unchanged.
    #[inline]
    pub(crate) fn pass_span(&mut self, piece: &Bytes, at: usize, end: usize) {
        if let Some(run) = &self.run {
            if run.as_ptr() == piece.as_ptr() && run.len() == piece.len() && self.run_end == at {
                self.run_end = end;
                return;
            }
            self.flush_run();
        }
        self.run = Some(piece.clone());
        self.run_start = at;
        self.run_end = end;
    }

    /// Queues bytes of our own (after the current run).
    pub(crate) fn push(&mut self, b: Bytes) {
        self.flush_run();
        self.queue.push_back(b);
    }

    /// Nothing queued and no run open.
    #[inline]
    fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.run.is_none()
    }

    /// Ends the current run: it becomes the next queued output.
    #[inline]
    pub(crate) fn flush_run(&mut self) {
        if let Some(mut b) = self.run.take() {
            b.truncate(self.run_end);
            b.advance(self.run_start);
            self.queue.push_back(b);
        }
    }

    /// [`flush_run`](Self::flush_run) then [`pop`](Self::pop): the run
    /// itself when nothing is queued before it (no trip through the queue).
    #[inline]
    fn flush_pop(&mut self) -> Option<Bytes> {
        if !self.queue.is_empty() {
            self.flush_run();
            return self.pop();
        }
        let mut b = self.run.take()?;
        b.truncate(self.run_end);
        b.advance(self.run_start);
        Some(b)
    }

    /// The next queued output.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Bytes> {
        self.queue.pop_front()
    }
}

/// A streaming rewriter: the SSE parser and an endpoint's handler
/// ([`ChatHandler`](crate::rewrite::ChatHandler),
/// [`MessagesHandler`](crate::rewrite::MessagesHandler)).
/// [`ChatStream`](crate::ChatStream) and
/// [`MessagesStream`](crate::MessagesStream) are its two instances; the
/// module docs state the contract.
///
/// # Panics
///
/// Never panics, on any input.
pub struct SseRewriter<H> {
    parser: Parser,
    /// A separate value so it can change while the parser lends it a frame.
    h: H,
    ended: bool,
    /// The last piece was absorbed by the small-read path with nothing
    /// queued: `next_output` has nothing to do.
    idle: bool,
}

impl<H> SseRewriter<H> {
    pub(crate) fn with_handler(parser: Parser, h: H) -> Self {
        SseRewriter {
            parser,
            h,
            ended: false,
            idle: false,
        }
    }
}

impl<H: Handler> SseRewriter<H> {
    /// The handler (for tests and fuzz targets).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn handler_mut(&mut self) -> &mut H {
        &mut self.h
    }

    /// Queues an input piece (any size, split anywhere).
    pub fn feed(&mut self, chunk: Bytes) {
        if self.parser.absorb(&chunk) {
            self.idle = self.h.out().is_empty();
            return;
        }
        self.idle = false;
        self.parser.queue_piece(chunk);
    }

    /// Queues an input piece the caller keeps: a tiny piece in the middle
    /// of a line (the small-read path: a byte or a few at a time) costs an
    /// append, no reference count and no parse; anything else is copied
    /// into a new piece.
    pub fn feed_slice(&mut self, piece: &[u8]) {
        if self.parser.absorb(piece) {
            self.idle = self.h.out().is_empty();
            return;
        }
        self.idle = false;
        self.parser.queue_piece(Bytes::copy_from_slice(piece));
    }

    /// The next piece of output, or `None` when more input is needed.
    ///
    /// Unchanged events that lie next to each other in one input piece come
    /// out as one slice of it; everything a piece yields is out before
    /// `None` is returned, so nothing is held back.
    #[must_use]
    #[inline]
    pub fn next_output(&mut self) -> Option<Bytes> {
        // Inlined: a reader of tiny pieces asks after each one, and mostly
        // there is nothing to do.
        if self.idle {
            return None;
        }
        self.produce()
    }

    /// The work of [`next_output`](Self::next_output) when not idle.
    fn produce(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.h.out().pop() {
                return Some(b);
            }
            // The fused path: whole events the handler recognises in the
            // piece go out without a parse.
            let max = self.parser.max_event_size();
            if !H::FUSED {
                // No fused path: straight to the parser.
            } else if let Some((piece, at)) = self.parser.clean_rest() {
                let n = self.h.fast_events(&piece[at..], max);
                if n > 0 {
                    let out = self.h.out();
                    // As dispatching these events would.
                    out.swallow_line_end = false;
                    if at + n < piece.len() || !out.is_empty() {
                        out.pass_span(piece, at, at + n);
                        self.parser.skip(n);
                        continue;
                    }
                    // The rest of the piece, with nothing before it: out
                    // right away (no run, no queue).
                    // (Moved out of the parser, not cloned.)
                    let b = self.parser.skip_rest();
                    // Clean at the end of the piece: no queued piece means
                    // no input.
                    self.idle = !self.parser.has_queued();
                    return Some(b);
                }
            }
            match self.parser.next_frame_ref() {
                Some(f) => Self::dispatch(&mut self.h, &f),
                None => {
                    let out = self.h.out();
                    let b = out.flush_pop();
                    // The parser needs input: nothing to do until `feed`.
                    self.idle = out.is_empty();
                    return b;
                }
            }
        }
    }

    /// Ends the input: what remains (synthesized additions, an
    /// unterminated last event's bytes) is queued for
    /// [`next_output`](Self::next_output).
    pub fn finish(&mut self) {
        self.idle = false;
        // Handle complete frames first (a caller may call `finish` without
        // draining).
        while let Some(f) = self.parser.next_frame_ref() {
            Self::dispatch(&mut self.h, &f);
        }
        if self.ended {
            return;
        }
        self.ended = true;
        self.h.end();
        if let Some(tail) = self.parser.finish() {
            self.h.out().push(tail);
        }
        self.h.out().flush_run();
    }

    /// Whether the top-level additions (`sources`, `citations`) have been
    /// emitted (or queued).
    #[must_use]
    pub fn sources_emitted(&self) -> bool {
        self.h.sources_emitted()
    }

    /// Hands one frame to the handler, dropping the LF of a split CRLF
    /// after an event the handler re-framed.
    #[inline]
    fn dispatch(h: &mut H, f: &FrameRef<'_>) {
        let swallow = std::mem::replace(&mut h.out().swallow_line_end, false);
        if !(swallow && f.kind() == FrameKind::LineEnd) {
            h.handle(f);
        }
    }
}

impl<H: Handler> fmt::Debug for SseRewriter<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct(H::NAME);
        d.field("parser", &self.parser);
        self.h.debug_fields(&mut d);
        d.finish_non_exhaustive()
    }
}

impl<H: Handler> StreamRewriter for SseRewriter<H> {
    fn feed(&mut self, chunk: Bytes) {
        SseRewriter::feed(self, chunk);
    }
    fn feed_slice(&mut self, piece: &[u8]) {
        SseRewriter::feed_slice(self, piece);
    }
    fn next_output(&mut self) -> Option<Bytes> {
        SseRewriter::next_output(self)
    }
    fn finish(&mut self) {
        SseRewriter::finish(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::Config;

    /// Passes every frame, re-framing (as a handler may) events whose data
    /// is `x`, and counts what it saw.
    #[derive(Default)]
    struct Echo {
        out: Out,
        frames: usize,
        ended: usize,
        fast: bool,
        fast_frames: usize,
    }

    impl Handler for Echo {
        const NAME: &'static str = "Echo";
        const FUSED: bool = true;
        /// Recognises `data: a` events when `fast` is on.
        fn fast_events(&mut self, rest: &[u8], max_event: usize) -> usize {
            const A: &[u8] = b"data: a\n\n";
            let mut n = 0;
            while self.fast && rest[n..].starts_with(A) && A.len() - 1 <= max_event {
                self.fast_frames += 1;
                n += A.len();
            }
            n
        }
        fn handle(&mut self, f: &FrameRef<'_>) {
            self.frames += 1;
            if f.kind() == FrameKind::Event && f.data() == b"x" {
                self.out.swallow_line_end = f.raw().ends_with(b"\r");
                self.out.push(Bytes::from_static(b"data: y\n\n"));
            } else {
                self.out.pass(f);
            }
        }
        fn out(&mut self) -> &mut Out {
            &mut self.out
        }
        fn end(&mut self) {
            self.ended += 1;
        }
        fn sources_emitted(&self) -> bool {
            false
        }
        fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
            d.field("frames", &self.frames);
        }
    }

    fn echo() -> SseRewriter<Echo> {
        SseRewriter::with_handler(Parser::with_config(&Config::new()), Echo::default())
    }

    fn drain(r: &mut SseRewriter<Echo>) -> Vec<Bytes> {
        std::iter::from_fn(|| r.next_output()).collect()
    }

    #[test]
    fn pass_through_frames_of_one_piece_go_out_as_one_slice() {
        let mut r = echo();
        let piece = Bytes::from_static(b"data: a\n\n: c\n\ndata: b\n\n");
        r.feed(piece.clone());
        let out = drain(&mut r);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0], piece);
        // A slice of the input, not a copy.
        assert_eq!(out[0].as_ptr(), piece.as_ptr());
        assert_eq!(r.h.frames, 3);
    }

    /// Events the fused path takes go out exactly as the parsed ones, in
    /// order, under any split; a piece taken whole goes out as itself.
    #[test]
    fn the_fused_path_gives_the_parsed_output() {
        let input: &[u8] =
            b"data: a\n\ndata: a\n\n: c\n\ndata: a\n\ndata: x\r\rdata: a\n\ndata: a\r\n\r\ndata: a\n\ndata: b";
        let run = |fast: bool, cuts: &[usize]| {
            let mut r = echo();
            r.h.fast = fast;
            let mut out = Vec::new();
            let mut at = 0;
            for &c in cuts.iter().chain([&input.len()]) {
                r.feed(Bytes::copy_from_slice(&input[at..c]));
                at = c;
                out.extend(drain(&mut r));
            }
            r.finish();
            out.extend(drain(&mut r));
            (out.concat(), r.h.fast_frames)
        };
        let (want, none) = run(false, &[]);
        assert_eq!(none, 0);
        for i in 0..=input.len() {
            for j in i..=input.len() {
                assert_eq!(run(true, &[i, j]).0, want, "cuts {i} {j}");
            }
        }
        // The BOM is decided by the first frame; the rest is fused.
        assert!(run(true, &[]).1 >= 3);
        let mut r = echo();
        r.h.fast = true;
        r.feed(Bytes::from_static(b": start\n\n"));
        assert_eq!(drain(&mut r).concat(), b": start\n\n");
        let piece = Bytes::from_static(b"data: a\n\ndata: a\n\n");
        r.feed(piece.clone());
        let out = drain(&mut r);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].as_ptr(), piece.as_ptr(), "the piece itself");
        assert_eq!(r.h.fast_frames, 2);
    }

    #[test]
    fn our_bytes_split_runs_and_keep_order() {
        let mut r = echo();
        r.feed(Bytes::from_static(b"data: a\n\ndata: x\n\ndata: b\n\n"));
        let out = drain(&mut r);
        assert_eq!(
            out,
            [&b"data: a\n\n"[..], b"data: y\n\n", b"data: b\n\n"].map(Bytes::from_static)
        );
    }

    #[test]
    fn split_crlf_after_a_reframed_event_is_dropped() {
        let mut r = echo();
        r.feed(Bytes::from_static(b"data: x\r\n\r"));
        let mut out = drain(&mut r);
        r.feed(Bytes::from_static(b"\ndata: b\r\n\r\n"));
        out.extend(drain(&mut r));
        r.finish();
        out.extend(drain(&mut r));
        assert_eq!(out.concat(), b"data: y\n\ndata: b\r\n\r\n");
    }

    #[test]
    fn finish_handles_undrained_frames_then_the_tail_once() {
        let mut r = echo();
        r.feed(Bytes::from_static(b"data: a\n\ndata: unterminated"));
        r.finish();
        r.finish();
        assert_eq!(r.h.ended, 1);
        assert_eq!(drain(&mut r).concat(), b"data: a\n\ndata: unterminated");
        assert!(format!("{r:?}").starts_with("Echo { parser: "));
    }

    #[test]
    fn tiny_pieces_and_slices_give_the_same_output() {
        let input: &[u8] =
            b"data: a\n\n: c\r\n\r\ndata: x\r\rdata: a longer line\n\nid: 7\ndata: b\n\ndata: tail";
        let mut r = echo();
        r.feed(Bytes::copy_from_slice(input));
        r.finish();
        let want = drain(&mut r).concat();
        for size in [1, 2, 3, 16, 17] {
            for slices in [false, true] {
                let mut r = echo();
                let mut out = Vec::new();
                for piece in input.chunks(size) {
                    if slices {
                        r.feed_slice(piece);
                    } else {
                        r.feed(Bytes::copy_from_slice(piece));
                    }
                    out.extend(drain(&mut r));
                }
                r.finish();
                out.extend(drain(&mut r));
                assert_eq!(out.concat(), want, "size {size}, slices {slices}");
            }
        }
    }

    #[test]
    fn an_absorbed_piece_keeps_undrained_output() {
        let mut r = echo();
        r.feed(Bytes::from_static(b"data: a\n\ndata: x\n\n"));
        let mut out = vec![r.next_output().unwrap()];
        // Not drained to `None`: the rest must still come out.
        r.feed_slice(b"da");
        r.feed_slice(b"ta: b");
        out.extend(drain(&mut r));
        r.feed(Bytes::from_static(b"\n\n"));
        out.extend(drain(&mut r));
        r.finish();
        out.extend(drain(&mut r));
        assert_eq!(out.concat(), b"data: a\n\ndata: y\n\ndata: b\n\n");
    }
}

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
//! before `None`: nothing is held back (a held tail, below, is the start
//! of an event, which yields nothing before its end).
//!
//! ```text
//!  feed(piece) ──► Parser ──FrameRef──► Handler::handle ──► Out ──► next_output()
//!       │  clean block start: Parser::clean_rest        ▲
//!       ├──► Handler::fast_events ── whole events ──────┤ (Parser::skip)
//!       └──► held tail + head of the next piece ────────┘ (Parser::replace_rest)
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
//! Events that straddle two pieces take the fused path too, through a
//! *held tail*. When the fused events stop short of the piece's end, with
//! nothing queued after the piece, and the rest is the start of an event
//! the handler may recognise (one line without CR, at most an LF at its
//! end, at most the event size limit and `MAX_STRADDLE` bytes; the
//! handler's [`Handler::fast_tail`] tells), the rest stays unscanned in
//! the parser and the parser is not asked for frames until the next piece
//! (`feed` or `feed_slice`; the small-read path declines while a rest is
//! unscanned). A tail the handler calls [`Tail::Started`] (it matched all
//! of it, one line by construction) is completed in the next piece by
//! [`Handler::fast_straddle`], which goes on where its match stopped: no
//! copy. Otherwise (a [`Tail::Maybe`], checked here to be one line, or a
//! `Started` one `fast_straddle` declines) that piece's head up to the
//! event's end (the blank line's LF; LF line ends only) is copied with
//! the tail into a reused buffer, only for matching, and
//! [`Handler::fast_events`] must take the whole of it. Either way a taken
//! event goes out as two slices (the tail, moved out of the parser, and
//! the head, the start of a run of the new piece) and the new piece takes
//! the tail's place in the parser with the head skipped (one step,
//! `Parser::replace_rest`), standing where dispatching the event would
//! leave it. Otherwise
//! (no event end in the head, a miss, over a limit) the piece is queued
//! after the tail and the parser goes on as if nothing had been held; at
//! `finish` a held tail is the parser's as well. Memory: one tail (a slice
//! of the last piece) and the buffer, at most one event. A piece used up
//! on an event boundary is let go as soon as `next_output` runs out of
//! input (`Parser::release_used`): between pieces the rewriter holds no
//! reference to it, so the buffer it was read into (hyper's connection
//! read buffer) can be reused rather than left shared.
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
    /// Drains every piece of output ready now onto `out` (for callers that
    /// want bytes rather than pieces; each piece is copied once).
    fn drain_into(&mut self, out: &mut Vec<u8>) {
        while let Some(b) = self.next_output() {
            out.extend_from_slice(&b);
        }
    }
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
    /// the same data qualify: each one `data:` line without CR or LF
    /// (maybe after one `event:` line without CR), an LF, a blank LF line,
    /// at most `max_event` bytes before the blank line. The default
    /// recognises none.
    ///
    /// `rest` may also be one event that straddles two pieces, joined
    /// (a held tail and the next piece's head, see the module docs): it
    /// then goes out as those two slices when all of it is taken.
    ///
    /// Called only when [`FUSED`](Self::FUSED) is set.
    #[inline]
    fn fast_events(&mut self, rest: &[u8], max_event: usize) -> usize {
        let _ = (rest, max_event);
        0
    }
    /// Whether [`fast_events`](Self::fast_events) may recognise an event
    /// that starts with `tail` (the start of an event at the end of a
    /// piece, at most the event size limit) once the next piece completes
    /// it: then the driver holds `tail` back from the parser (the module
    /// docs say how). The default is [`Tail::No`].
    ///
    /// Called only when [`FUSED`](Self::FUSED) is set.
    #[inline]
    fn fast_tail(&mut self, tail: &[u8]) -> Tail {
        let _ = tail;
        Tail::No
    }
    /// The event started by a tail [`fast_tail`](Self::fast_tail) called
    /// [`Tail::Started`] (the last call), completed by `head` (the next
    /// piece): when the handler recognises it and fully handles it (as
    /// [`fast_events`](Self::fast_events) would the tail and the head
    /// joined), the bytes of `head` it takes, with the blank line's LF
    /// before byte `limit` of the joined event; 0 otherwise (nothing
    /// handled). The default is 0.
    ///
    /// Called only when [`FUSED`](Self::FUSED) is set.
    #[inline]
    fn fast_straddle(&mut self, tail: &[u8], head: &[u8], limit: usize) -> usize {
        let _ = (tail, head, limit);
        0
    }
}

/// What a handler's fused path tells of a tail ([`Handler::fast_tail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Not the start of an event the fused path recognises: not held.
    No,
    /// Maybe the start of one: held when it is one line without CR (at
    /// most an LF at its end), then matched joined with the next piece's
    /// head.
    Maybe,
    /// The start of an event the fused path recognises if the next piece
    /// completes it, one line without CR (at most an LF at its end; or
    /// an `event:` line, its LF and such a line, as a Responses delta
    /// starts): held, and the handler goes on in the next piece where it
    /// stopped ([`Handler::fast_straddle`]; when that declines, as
    /// `Maybe`: the joined match then ends at the first LF of the next
    /// piece followed by the blank line's, as for one line).
    Started,
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
    /// The queue's slot for the frame being handled, passed through
    /// unchanged but gathered across pieces by the parser: the driver puts
    /// its bytes there ([`Parser::take_gathered`]) once the handler is done
    /// with the lent frame.
    gathered: Option<usize>,
}

impl Out {
    /// Forwards a frame unchanged: a run of its piece, or, for a frame the
    /// parser gathered across pieces, a slot the driver fills with its
    /// bytes (no copy) once the frame is handled.
    #[inline]
    pub(crate) fn pass(&mut self, f: &FrameRef<'_>) {
        let Some((piece, at)) = f.piece() else {
            self.push(Bytes::new());
            self.gathered = Some(self.queue.len() - 1);
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

    /// [`push`](Self::push) inlined for a caller that mostly finds no
    /// run open (the driver, after a drain).
    #[inline(always)]
    fn push_own(&mut self, b: Bytes) {
        if self.run.is_some() {
            self.flush_run();
        }
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
    /// A tail is held: the parser's unscanned rest is the start of an
    /// event the next piece may complete, and nothing is queued after it;
    /// the parser is not asked for frames until the next piece (see the
    /// module docs).
    held: bool,
    /// A rest that no fused event starts may be held: set when the fused
    /// path takes events (or a rest after them is looked at), cleared when
    /// such a rest is not held, so the parsed events of a stream the fused
    /// path does not know are not scanned twice.
    hold_rests: bool,
    /// The held tail is [`Tail::Started`]: the handler goes on in the
    /// next piece ([`Handler::fast_straddle`]).
    started: bool,
    /// A held tail and the head of the next piece, joined for matching
    /// (reused; at most [`MAX_STRADDLE`] bytes).
    joined: Vec<u8>,
    /// Straddling events the fused path took (for the tests).
    #[cfg(test)]
    straddled: usize,
}

/// The longest event the fused path takes across two pieces (the held tail
/// and the head of the next piece together), which bounds the matching
/// buffer: chat templates are learned from chunks of at most 4 KiB, plus
/// their varying tokens.
const MAX_STRADDLE: usize = 8 * 1024;

/// A rest no fused event starts is held, while the fused path takes
/// nothing, only up to this length.
const SHORT_REST: usize = 256;

impl<H> SseRewriter<H> {
    pub(crate) fn with_handler(parser: Parser, h: H) -> Self {
        SseRewriter {
            parser,
            h,
            ended: false,
            idle: false,
            held: false,
            hold_rests: false,
            started: false,
            joined: Vec::new(),
            #[cfg(test)]
            straddled: 0,
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
    #[inline]
    pub fn feed(&mut self, chunk: Bytes) {
        // (Declined while a tail is held: the parser has a rest.)
        if self.parser.absorb(&chunk) {
            self.idle = self.h.out().is_empty();
            return;
        }
        if H::FUSED && self.held {
            self.straddle(chunk);
        } else {
            self.parser.queue_piece(chunk);
        }
        // (After the call: the caller's `next_output` sees a known value.)
        self.idle = false;
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
        let piece = Bytes::copy_from_slice(piece);
        if H::FUSED && self.held {
            self.straddle(piece);
        } else {
            self.parser.queue_piece(piece);
        }
        self.idle = false;
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
                    let rest = at + n < piece.len();
                    if rest || !out.is_empty() {
                        out.pass_span(piece, at, at + n);
                        self.parser.skip(n);
                        if !rest {
                            continue;
                        }
                        // A rest the fused path did not take: held (nothing
                        // more until the next piece), or the parser's (not
                        // tried again).
                        if self.hold(max) {
                            break;
                        }
                    } else {
                        // The rest of the piece, with nothing before it: out
                        // right away (no run, no queue).
                        // (Moved out of the parser, not cloned.)
                        let b = self.parser.skip_rest();
                        // Clean at the end of the piece: no queued piece
                        // means no input.
                        self.idle = !self.parser.has_queued();
                        return Some(b);
                    }
                } else if self.hold_unfused(max) {
                    break;
                }
            }
            match self.parser.next_frame_ref() {
                Some(f) => Self::dispatch(&mut self.h, &f),
                None => break,
            }
            self.fill_gathered();
        }
        // The parser needs input: a piece it used up goes now, not when
        // the next one comes (see `Parser::release_used`).
        self.parser.release_used();
        let out = self.h.out();
        let b = out.flush_pop();
        self.idle = out.is_empty();
        b
    }

    /// Holds the rest of the current piece (left unscanned in the parser)
    /// when it stands at a block start with nothing queued after it,
    /// [`holdable`] and the handler's [`fast_tail`](Handler::fast_tail)
    /// say so; returns whether it does.
    // (Cold: out of the way of the per-event path.)
    #[cold]
    #[inline(never)]
    fn hold(&mut self, max: usize) -> bool {
        self.hold_rests = true;
        if self.parser.has_queued() {
            return false;
        }
        let Some((piece, at)) = self.parser.clean_rest() else {
            return false;
        };
        let tail = &piece[at..];
        let kind = if holdable(tail, max) {
            self.h.fast_tail(tail)
        } else {
            Tail::No
        };
        self.started = kind == Tail::Started;
        self.held = match kind {
            Tail::No => false,
            Tail::Maybe => one_line(tail.strip_suffix(b"\n").unwrap_or(tail)),
            Tail::Started => true,
        };
        self.held
    }

    /// [`hold`](Self::hold) when no fused event starts the rest: while
    /// [`hold_rests`](Self::hold_rests) is set, or when the rest is short
    /// (small reads, where pieces may never hold a whole event).
    #[cold]
    #[inline(never)]
    fn hold_unfused(&mut self, max: usize) -> bool {
        // (A rest that cannot be held, as most are here (whole blocks), is
        // found out before `hold`, whose prologue is that of the
        // handler's inlined walk.)
        let may = match self.parser.clean_rest() {
            Some((piece, at)) if self.hold_rests || piece.len() - at <= SHORT_REST => {
                holdable(&piece[at..], max)
            }
            _ if !self.hold_rests => return false,
            _ => false,
        };
        let held = may && self.hold(max);
        if !may {
            // What `hold` would leave.
            (self.started, self.held) = (false, false);
        }
        self.hold_rests = held;
        held
    }

    /// A piece after a held tail: when the piece completes the tail's
    /// event and the handler's fused path recognises the whole of it (in
    /// [`joined`](Self::joined), a copy made only for matching), the event
    /// goes out as the tail and the head of the piece, and the parser
    /// skips both (one block it would dispatch as an event, as
    /// [`Parser::skip`] requires); otherwise the piece is queued after the
    /// tail, exactly as if it had never been held.
    #[cold]
    #[inline(never)]
    fn straddle(&mut self, chunk: Bytes) {
        self.held = false;
        let started = std::mem::take(&mut self.started);
        let max = self.parser.max_event_size();
        let limit = max.min(MAX_STRADDLE);
        if let Some((piece, at)) = self.parser.clean_rest() {
            let tail = &piece[at..];
            let mut end = if started {
                self.h.fast_straddle(tail, &chunk, limit)
            } else {
                0
            };
            if end == 0 {
                end = joined_event(&mut self.h, &mut self.joined, tail, &chunk, max);
            }
            if end > 0 {
                // (The tail moved out of the parser, not cloned.)
                let (tail, piece) = self.parser.replace_rest(chunk, end);
                let out = self.h.out();
                // As dispatching the event would.
                out.swallow_line_end = false;
                out.push_own(tail);
                out.pass_span(piece, 0, end);
                self.hold_rests = true;
                #[cfg(test)]
                {
                    self.straddled += 1;
                }
                return;
            }
        }
        self.parser.queue_piece(chunk);
    }

    /// Ends the input: what remains (synthesized additions, an
    /// unterminated last event's bytes) is queued for
    /// [`next_output`](Self::next_output).
    pub fn finish(&mut self) {
        self.idle = false;
        // A held tail is the parser's unscanned rest: it goes on as usual.
        self.held = false;
        self.started = false;
        // Handle complete frames first (a caller may call `finish` without
        // draining).
        while let Some(f) = self.parser.next_frame_ref() {
            Self::dispatch(&mut self.h, &f);
            self.fill_gathered();
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

    /// Puts the bytes of a gathered frame the handler passed through in
    /// their slot in the output queue (see [`Out::pass`]).
    #[inline(always)]
    fn fill_gathered(&mut self) {
        if self.h.out().gathered.is_some() {
            self.fill_slot();
        }
    }

    /// [`fill_gathered`](Self::fill_gathered) of a slot (out of line: most
    /// frames lie within a piece).
    #[inline(never)]
    fn fill_slot(&mut self) {
        if let Some(i) = self.h.out().gathered.take() {
            if let Some(b) = self.parser.take_gathered() {
                self.h.out().queue[i] = b;
            }
        }
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

/// The bytes of `head` that the event started by `tail` takes when the
/// handler's fused path recognises the whole of it, matched in `joined` (a
/// copy made only for matching); 0 otherwise.
// (Out of line: the rarer way, apart from `fast_straddle`'s registers.)
#[inline(never)]
fn joined_event<H: Handler>(
    h: &mut H,
    joined: &mut Vec<u8>,
    tail: &[u8],
    head: &[u8],
    max: usize,
) -> usize {
    let Some(end) = event_end(tail, head, max.min(MAX_STRADDLE)) else {
        return 0;
    };
    joined.clear();
    // (Sized once: one allocation for a stream's first joined event.)
    joined.reserve(tail.len() + end);
    joined.extend_from_slice(tail);
    joined.extend_from_slice(&head[..end]);
    if h.fast_events(joined, max) == joined.len() {
        end
    } else {
        0
    }
}

/// Whether `tail` (a rest at a block start) may be held: at most the
/// event size limit and [`MAX_STRADDLE`] bytes, not ending in a blank line
/// or a CR. (Its last bytes: a rest that ends in whole blocks, as a large
/// read often does, is found out at once.)
#[inline]
fn holdable(tail: &[u8], max: usize) -> bool {
    let line = tail.strip_suffix(b"\n").unwrap_or(tail);
    tail.len() <= max.min(MAX_STRADDLE) && !matches!(line.last(), Some(b'\n' | b'\r'))
}

/// Whether `line` holds no CR or LF.
#[inline]
fn one_line(line: &[u8]) -> bool {
    memchr::memchr2(b'\n', b'\r', line).is_none()
}

/// Where the event that starts with `tail` (one line without CR, at most an
/// LF at its end) ends in `head`, the next piece: after the first LF of
/// `head` (or its first byte, when `tail` ends with the LF) when the next
/// byte is the blank line's LF, within `limit` bytes in all; `None`
/// otherwise (no end in `head`, or not a one-line event with LF line ends).
#[inline]
fn event_end(tail: &[u8], head: &[u8], limit: usize) -> Option<usize> {
    let i = if tail.last() == Some(&b'\n') {
        0
    } else {
        let room = limit.checked_sub(tail.len())?;
        memchr::memchr(b'\n', &head[..head.len().min(room)])? + 1
    };
    (head.get(i) == Some(&b'\n') && tail.len() + i < limit).then_some(i + 1)
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
mod tests;

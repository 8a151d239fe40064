//! Settings shared by the response rewriters.

use crate::cite::OffsetUnit;
use crate::sources::Dialect;
use crate::sse;

/// Largest choice index a chat rewriter tracks (OpenAI allows `n` up to
/// 128); choices with a larger index pass through without annotations.
pub const MAX_CHOICES: u32 = 128;

/// How a rewriter decorates responses.
///
/// ```
/// use citestream::{Dialect, OffsetUnit, RewriteOptions};
/// let mut opts = RewriteOptions::new();
/// opts.dialect(Dialect::BOTH).offsets(OffsetUnit::Utf16).n(2);
/// assert_eq!(opts.get_n(), 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewriteOptions {
    pub(crate) dialect: Dialect,
    pub(crate) offsets: OffsetUnit,
    pub(crate) n: u32,
    pub(crate) only_cited: bool,
    pub(crate) sse: sse::Config,
}

impl Default for RewriteOptions {
    fn default() -> Self {
        RewriteOptions::new()
    }
}

impl RewriteOptions {
    /// The defaults: `sources` dialect, offsets in characters, `n` = 1,
    /// every source in `citations`, the SSE parser's default limits.
    #[must_use]
    pub fn new() -> Self {
        RewriteOptions {
            dialect: Dialect::SOURCES,
            offsets: OffsetUnit::Chars,
            n: 1,
            only_cited: false,
            sse: sse::Config::new(),
        }
    }

    /// Which members to add (`sources` + `annotations`, `citations`, both).
    pub fn dialect(&mut self, dialect: Dialect) -> &mut Self {
        self.dialect = dialect;
        self
    }

    /// The unit of annotation offsets.
    pub fn offsets(&mut self, unit: OffsetUnit) -> &mut Self {
        self.offsets = unit;
        self
    }

    /// The number of choices requested (chat `n`): top-level additions go
    /// on the finish chunk of the n-th choice to finish. Values below 1 are
    /// taken as 1.
    pub fn n(&mut self, n: u32) -> &mut Self {
        self.n = n.max(1);
        self
    }

    /// List only the cited sources in `citations` (`document_index` stays
    /// footnote number − 1). Off by default.
    pub fn only_cited(&mut self, on: bool) -> &mut Self {
        self.only_cited = on;
        self
    }

    /// SSE parser limits for streamed responses.
    pub fn sse(&mut self, config: sse::Config) -> &mut Self {
        self.sse = config;
        self
    }

    /// The configured dialect.
    #[must_use]
    pub fn get_dialect(&self) -> Dialect {
        self.dialect
    }

    /// The configured offset unit.
    #[must_use]
    pub fn get_offsets(&self) -> OffsetUnit {
        self.offsets
    }

    /// The configured `n`.
    #[must_use]
    pub fn get_n(&self) -> u32 {
        self.n
    }
}

/// The sans-IO contract shared by the streaming rewriters
/// ([`ChatStream`](crate::ChatStream), [`MessagesStream`](crate::MessagesStream)),
/// so adapters (the CLI, `citestream::stream`) drive them the same way.
///
/// Call order: any number of `feed` calls, each followed by draining
/// `next_output` until `None`; then `finish` once and drain again.
pub trait StreamRewriter {
    /// Queues an input piece (any size, split anywhere).
    fn feed(&mut self, chunk: bytes::Bytes);
    /// The next piece of output, or `None` when more input is needed.
    fn next_output(&mut self) -> Option<bytes::Bytes>;
    /// Ends the input; the rest of the output becomes available from
    /// `next_output`.
    fn finish(&mut self);
}

/// Either streaming rewriter, chosen at run time (see
/// [`ResponsePlan::stream_rewriter`](crate::flow::ResponsePlan::stream_rewriter)).
#[derive(Debug)]
pub enum Rewriter {
    /// `/v1/chat/completions`.
    Chat(Box<crate::ChatStream>),
    /// `/v1/messages`.
    Messages(Box<crate::MessagesStream>),
}

impl StreamRewriter for Rewriter {
    fn feed(&mut self, chunk: bytes::Bytes) {
        match self {
            Rewriter::Chat(r) => r.feed(chunk),
            Rewriter::Messages(r) => r.feed(chunk),
        }
    }
    fn next_output(&mut self) -> Option<bytes::Bytes> {
        match self {
            Rewriter::Chat(r) => r.next_output(),
            Rewriter::Messages(r) => r.next_output(),
        }
    }
    fn finish(&mut self) {
        match self {
            Rewriter::Chat(r) => r.finish(),
            Rewriter::Messages(r) => r.finish(),
        }
    }
}

/// The output queue of a streaming rewriter. Frames passed through
/// unchanged that lie next to each other in one input piece go out as one
/// slice of it (one reference count update per run instead of per event).
#[derive(Debug, Default)]
pub(crate) struct Out {
    queue: std::collections::VecDeque<bytes::Bytes>,
    /// The piece the current run lies in, and the run's bounds in it.
    run: Option<bytes::Bytes>,
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
    pub(crate) fn pass(&mut self, f: &crate::sse::FrameRef<'_>) {
        let Some((piece, at)) = f.piece() else {
            self.push(f.raw_bytes());
            return;
        };
        let end = at + f.raw().len();
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
    pub(crate) fn push(&mut self, b: bytes::Bytes) {
        self.flush_run();
        self.queue.push_back(b);
    }

    /// Ends the current run: it becomes the next queued output.
    #[inline]
    pub(crate) fn flush_run(&mut self) {
        if let Some(mut b) = self.run.take() {
            b.truncate(self.run_end);
            bytes::Buf::advance(&mut b, self.run_start);
            self.queue.push_back(b);
        }
    }

    /// The next queued output.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<bytes::Bytes> {
        self.queue.pop_front()
    }
}

/// What a streaming rewriter does with each frame; [`Driver`] does the
/// rest (parsing, draining, the end of the input).
pub(crate) trait Handler {
    /// Handles one frame lent by the parser, queueing output in `out()`.
    fn handle(&mut self, f: &crate::sse::FrameRef<'_>);
    /// The output queue.
    fn out(&mut self) -> &mut Out;
    /// The input ended (called once, before the unterminated tail goes out).
    fn end(&mut self);
}

/// The parser and a [`Handler`]: the sans-IO loop shared by the streaming
/// rewriters. The handler is a separate value so it can change while the
/// parser lends it a frame.
#[derive(Debug)]
pub(crate) struct Driver<H> {
    pub(crate) parser: crate::sse::Parser,
    pub(crate) h: H,
    ended: bool,
}

impl<H: Handler> Driver<H> {
    pub(crate) fn new(parser: crate::sse::Parser, h: H) -> Self {
        Driver {
            parser,
            h,
            ended: false,
        }
    }

    pub(crate) fn feed(&mut self, chunk: bytes::Bytes) {
        self.parser.feed(chunk);
    }

    /// Hands one frame to the handler, dropping the LF of a split CRLF
    /// after an event the handler re-framed.
    #[inline]
    fn dispatch(h: &mut H, f: &crate::sse::FrameRef<'_>) {
        let swallow = std::mem::replace(&mut h.out().swallow_line_end, false);
        if !(swallow && f.kind() == crate::sse::FrameKind::LineEnd) {
            h.handle(f);
        }
    }

    pub(crate) fn next_output(&mut self) -> Option<bytes::Bytes> {
        loop {
            if let Some(b) = self.h.out().pop() {
                return Some(b);
            }
            match self.parser.next_frame_ref() {
                Some(f) => Self::dispatch(&mut self.h, &f),
                None => {
                    let out = self.h.out();
                    out.flush_run();
                    return out.pop();
                }
            }
        }
    }

    pub(crate) fn finish(&mut self) {
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
}

//! The incremental WHATWG event-stream parser.

use std::fmt;

use bytes::{Buf, BufMut, Bytes};

/// Default for [`Config::max_event_size`]: 1 MiB.
pub const DEFAULT_MAX_EVENT_SIZE: usize = 1 << 20;

/// Parser limits.
///
/// ```
/// let mut config = citestream::sse::Config::new();
/// config.max_event_size(64 * 1024);
/// let parser = citestream::sse::Parser::with_config(&config);
/// # let _ = parser;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    max_event_size: usize,
}

impl Config {
    /// The default limits ([`DEFAULT_MAX_EVENT_SIZE`]).
    #[must_use]
    pub fn new() -> Self {
        Config {
            max_event_size: DEFAULT_MAX_EVENT_SIZE,
        }
    }

    /// Sets the largest event the parser interprets, in bytes: the event's
    /// lines with their line ends, up to (not including) the blank line that
    /// ends it.
    ///
    /// A leading BOM counts toward the first event's size. A larger event is
    /// never buffered whole: its bytes are handed out as
    /// [`Frame::Oversized`] pieces as they arrive, it is not dispatched, and
    /// the parser resumes at the next blank line. The decision does not depend
    /// on how the input is split. This bounds the memory one stream can hold.
    pub fn max_event_size(&mut self, bytes: usize) -> &mut Self {
        self.max_event_size = bytes;
        self
    }

    /// The configured event size limit in bytes.
    #[must_use]
    pub fn get_max_event_size(&self) -> usize {
        self.max_event_size
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::new()
    }
}

use super::frame::{DataRepr, Event, Frame, FrameKind, FrameRef, Loc, Src};
use super::state::State;

/// Incremental, zero-copy parser for a `text/event-stream` (WHATWG HTML,
/// "Interpreting an event stream").
///
/// # Contract
///
/// The parser is sans-IO: [`feed`](Parser::feed) it input pieces of any size
/// as they arrive, call [`next_frame`](Parser::next_frame) (or the borrowing
/// [`next_frame_ref`](Parser::next_frame_ref)) until it returns `None`,
/// repeat; at the end of the input call [`finish`](Parser::finish) for the
/// unterminated tail. No byte is scanned twice and no byte is copied unless
/// a block spans two input pieces (then that block's bytes are gathered
/// once into an internal buffer, bounded by [`Config::max_event_size`]).
///
/// * CRLF, LF and CR end lines; a CR at the end of one piece pairs with an
///   LF at the start of the next. A block is dispatched as soon as its blank
///   line is seen: a trailing CR does not delay it.
/// * One UTF-8 BOM at the very start is skipped (kept in the first frame's
///   raw bytes), also when it is split across pieces.
/// * `field: value` with one optional space; comments (`:`) and unknown
///   fields are ignored; `data` lines join with LF; `id` containing NUL is
///   ignored; `retry` takes ASCII digits only; a block without `data` is not
///   dispatched; an unterminated block at the end is not dispatched.
/// * Invalid UTF-8 is never an error: fields are bytes, and
///   [`Event::data_str`] decodes with U+FFFD.
///
/// # Example
///
/// ```
/// use bytes::Bytes;
/// use citestream::sse::{Frame, Parser};
///
/// let mut p = Parser::new();
/// p.feed(Bytes::from_static(b"event: add\ndata: hel"));
/// assert!(p.next_frame().is_none());
/// p.feed(Bytes::from_static(b"lo\r\n\r\n: keep-alive\n\n"));
/// let Some(Frame::Event(ev)) = p.next_frame() else { panic!() };
/// assert_eq!(ev.event_type(), b"add");
/// assert_eq!(ev.data(), b"hello");
/// assert_eq!(&ev.raw()[..], b"event: add\ndata: hello\r\n\r\n");
/// assert!(matches!(p.next_frame(), Some(Frame::Skipped(_)))); // the comment
/// assert!(p.next_frame().is_none());
/// assert!(p.finish().is_none());
/// ```
///
/// # Panics
///
/// Never panics, on any input.
pub struct Parser {
    /// The piece being scanned.
    cur: Bytes,
    st: State,
}

impl fmt::Debug for Parser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parser")
            .field("max_event_size", &self.st.max)
            .field("queued", &self.st.queue.len())
            .field("buffered", &self.buffered())
            .field("discarding", &self.st.discard())
            .finish_non_exhaustive()
    }
}

impl Default for Parser {
    fn default() -> Self {
        Parser::new()
    }
}

impl Parser {
    /// A parser with the default [`Config`].
    #[must_use]
    pub fn new() -> Self {
        Parser::with_config(&Config::new())
    }

    /// A parser with the given limits.
    #[must_use]
    pub fn with_config(config: &Config) -> Self {
        Parser {
            cur: Bytes::new(),
            st: State::new(config.max_event_size),
        }
    }

    /// Seeds the last event ID, as a client reconnecting with a
    /// `Last-Event-ID` header does. Events get it until an `id` field
    /// changes it. Also kept across [`Parser::finish`].
    pub fn set_last_event_id(&mut self, id: impl Into<Bytes>) {
        let id = id.into();
        self.st.initial_last_event_id = id.clone();
        self.st.last_event_id = id;
    }

    /// The current last event ID.
    #[must_use]
    pub fn last_event_id(&self) -> &[u8] {
        &self.st.last_event_id
    }

    /// The reconnection time (ms) set by the latest valid `retry` field.
    #[must_use]
    pub fn reconnection_time(&self) -> Option<u64> {
        self.st.reconnection_time
    }

    /// Bytes currently held for a block that spans input pieces (at most
    /// [`Config::max_event_size`] plus one line end).
    #[must_use]
    pub fn buffered(&self) -> usize {
        if self.st.lent() {
            0
        } else {
            self.st.partial.len()
        }
    }

    /// The raw bytes of the frame [`next_frame_ref`](Self::next_frame_ref)
    /// lent last, when it was gathered across pieces
    /// ([`FrameRef::piece`] was `None`): split off the parser's gathering
    /// buffer, no copy. `None` when that frame lay within one piece, or its
    /// bytes were taken already.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use citestream::sse::Parser;
    ///
    /// let mut p = Parser::new();
    /// p.feed(Bytes::from_static(b"data: a"));
    /// assert!(p.next_frame_ref().is_none());
    /// p.feed(Bytes::from_static(b"b\n\n"));
    /// let f = p.next_frame_ref().unwrap();
    /// assert!(f.piece().is_none());
    /// assert_eq!(p.take_gathered().unwrap(), &b"data: ab\n\n"[..]);
    /// assert!(p.take_gathered().is_none());
    /// ```
    #[must_use]
    pub fn take_gathered(&mut self) -> Option<Bytes> {
        self.st.lent().then(|| self.st.take_lent())
    }

    /// Queues an input piece. Cheap: nothing is parsed until
    /// [`next_frame`](Parser::next_frame). Empty pieces are ignored.
    #[inline(always)]
    pub fn feed(&mut self, chunk: Bytes) {
        if !self.absorb(&chunk) {
            self.queue_piece(chunk);
        }
    }

    /// The general path of [`feed`](Self::feed), after
    /// [`absorb`](Self::absorb) declined the piece.
    #[inline]
    pub(crate) fn queue_piece(&mut self, chunk: Bytes) {
        let st = &mut self.st;
        if chunk.is_empty() {
            return;
        }
        // The current piece is empty or used up on a block boundary (what
        // `next_frame` would drop on its way to the next piece): replace it.
        if st.start >= self.cur.len() && st.queue.is_empty() {
            self.cur = chunk;
            st.pos = 0;
            st.start = 0;
            return;
        }
        st.queue.push_back(chunk);
    }

    /// Queues an input piece the caller keeps: the small-read path. A tiny
    /// piece in the middle of a line (a byte or a few at a time, as a slow
    /// connection or a 1-byte reader delivers it) is appended to the partial
    /// line without any reference count or scanning; anything else is
    /// copied into a new piece and fed.
    pub fn feed_slice(&mut self, piece: &[u8]) {
        if !self.absorb(piece) {
            self.queue_piece(Bytes::copy_from_slice(piece));
        }
    }

    /// The small-read path of [`feed`](Self::feed) and
    /// [`feed_slice`](Self::feed_slice): with nothing left to scan, a piece
    /// of at most 16 bytes without a line end, in the middle of a line
    /// (not after a CR, not in the BOM, not discarding) that keeps the
    /// block within the size limit, is gathered right away, exactly as
    /// `next_frame` would gather it. Returns whether it was; then no frame
    /// can be ready ([`next_frame`](Self::next_frame) would return `None`).
    /// Empty pieces count as absorbed.
    #[inline(always)]
    pub(crate) fn absorb(&mut self, piece: &[u8]) -> bool {
        // The common read is declined inline, before anything else is
        // looked at (no call).
        piece.len() <= 16 && self.absorb_small(piece)
    }

    /// [`absorb`](Self::absorb) of a piece of at most 16 bytes.
    #[inline(never)]
    fn absorb_small(&mut self, piece: &[u8]) -> bool {
        let n = piece.len();
        let st = &mut self.st;
        // Let go of the last gathered frame, so the gathering buffer can be
        // reused once the caller has dropped its copy.
        st.release_owned();
        if n == 0 {
            return true;
        }
        if st.start < self.cur.len()
            || !st.queue.is_empty()
            || st.odd()
            || st.partial.len() + n > st.max
        {
            return false;
        }
        match *piece {
            [b] if b != b'\n' && b != b'\r' => st.partial.put_u8(b),
            [_] => return false,
            _ if piece.iter().any(|&b| b == b'\n' || b == b'\r') => return false,
            _ => st.partial.extend_from_slice(piece),
        }
        st.note_held();
        true
    }

    /// Ends the input. Returns the bytes of an unterminated last block (and
    /// any input not yet handed out, if `next_frame` was not drained), which
    /// are not dispatched, so a proxy can still forward them; `None` when
    /// the input ended on a block boundary.
    ///
    /// The parser is then reset for a new stream: limits and the initial
    /// last event ID are kept, but [`reconnection_time`](Parser::reconnection_time)
    /// is cleared and [`last_event_id`](Parser::last_event_id) goes back to the
    /// initial one, so a client that reconnects reads both before calling
    /// `finish`. (`id` and `retry` fields take effect when their block ends,
    /// so those of an unterminated last block are not applied; WHATWG
    /// applies them line by line, a difference no dispatched event can see.)
    #[must_use = "the returned bytes are part of the stream"]
    pub fn finish(&mut self) -> Option<Bytes> {
        self.unstale();
        let st = &mut self.st;
        st.release_owned();
        let mut tail = std::mem::take(&mut st.partial);
        let cur = std::mem::take(&mut self.cur);
        tail.extend_from_slice(&cur[st.start.min(cur.len())..]);
        for rest in st.queue.drain(..) {
            tail.extend_from_slice(&rest);
        }
        let initial = st.initial_last_event_id.clone();
        let mut fresh = State::new(st.max);
        fresh.queue = std::mem::take(&mut st.queue);
        fresh.scratch = std::mem::take(&mut st.scratch);
        *st = fresh;
        self.set_last_event_id(initial);
        if tail.is_empty() {
            None
        } else {
            Some(tail.freeze())
        }
    }

    /// The fused path's view of the input: the current piece and the
    /// offset of its unscanned rest, when the parser stands at the start of
    /// a block with nothing held (no partial block, no pending CR, the BOM
    /// decided, not discarding) and that rest is not empty. Moves on to the
    /// next queued piece when the current one is used up on a block
    /// boundary. `None` otherwise: then [`next_frame_ref`](Self::next_frame_ref)
    /// is the way on.
    ///
    /// A caller that recognises whole events at the start of that rest may
    /// hand them out itself and [`skip`](Self::skip) them.
    #[inline(always)]
    pub(crate) fn clean_rest(&mut self) -> Option<(&Bytes, usize)> {
        // The common case (a rest at a block start, nothing held, no
        // gathered frame to let go of) is a few field tests, inlined; the
        // rest out of line.
        if self.st.clean_at(self.cur.len()) {
            return Some((&self.cur, self.st.pos));
        }
        self.clean_rest_slow()
    }

    /// [`clean_rest`](Self::clean_rest) when its inlined test fails.
    #[inline(never)]
    fn clean_rest_slow(&mut self) -> Option<(&Bytes, usize)> {
        let st = &mut self.st;
        // (The last gathered frame first: its view is gone.)
        st.release_owned();
        if st.unclean() {
            return None;
        }
        if st.pos >= self.cur.len() {
            if st.start < self.cur.len() {
                return None;
            }
            self.cur = st.queue.pop_front()?;
            st.pos = 0;
            st.start = 0;
        }
        if st.pos != st.start || st.line_start != 0 {
            return None;
        }
        Some((&self.cur, st.pos))
    }

    /// Marks the next `n` bytes of the rest [`clean_rest`](Self::clean_rest)
    /// showed as handed out. The caller guarantees they are whole blocks
    /// that the parser would dispatch as events: each a `data:` line
    /// without CR or LF in it (maybe after one `event:` line without CR,
    /// with its LF), an LF, then a blank LF line, at most
    /// [`max_event_size`](Self::max_event_size) bytes before its blank
    /// line. Such blocks change no parser state (no `id`, no `retry`; the
    /// event type lasts one event), so
    /// the parser is then exactly where dispatching them would leave it.
    #[inline]
    pub(crate) fn skip(&mut self, n: usize) {
        let st = &mut self.st;
        debug_assert!(st.pos + n <= self.cur.len() && st.pos == st.start);
        st.pos += n;
        st.start = st.pos;
        if st.pos == self.cur.len() {
            // Used up on a block boundary: let the piece go now (what the
            // next scan would do), so the next one need not be queued.
            self.cur = Bytes::new();
            st.pos = 0;
            st.start = 0;
        }
    }

    /// [`skip`](Self::skip) of the whole rest of the current piece, whose
    /// skipped bytes are returned: the piece itself when the rest is all of
    /// it (moved out, no reference count), else the piece advanced to the
    /// rest. The caller guarantees what `skip` requires of them.
    #[inline]
    pub(crate) fn skip_rest(&mut self) -> Bytes {
        let st = &mut self.st;
        debug_assert!(st.pos < self.cur.len() && st.pos == st.start);
        let at = st.pos;
        st.pos = 0;
        st.start = 0;
        let mut rest = std::mem::take(&mut self.cur);
        if at > 0 {
            rest.advance(at);
        }
        rest
    }

    /// The next piece after a held rest: the rest of the current piece
    /// ([`clean_rest`](Self::clean_rest) showed it, nothing is queued) and
    /// the first `n` bytes of `chunk` are one block the parser would
    /// dispatch as an event (as [`skip`](Self::skip) requires of it);
    /// `chunk` becomes the current piece with those `n` bytes skipped.
    /// Returns the rest (as [`skip_rest`](Self::skip_rest) would) and the
    /// new current piece. One step for `skip_rest`, `queue_piece` and
    /// `skip`: no empty piece put in and dropped, no queue.
    #[inline]
    pub(crate) fn replace_rest(&mut self, chunk: Bytes, n: usize) -> (Bytes, &Bytes) {
        let st = &mut self.st;
        debug_assert!(st.pos < self.cur.len() && st.pos == st.start);
        debug_assert!(st.queue.is_empty() && n <= chunk.len());
        let at = st.pos;
        // (A piece used up here stays until the next scan or piece lets
        // it go: `queue_piece` and `clean_rest` do.)
        st.pos = n;
        st.start = n;
        let mut rest = std::mem::replace(&mut self.cur, chunk);
        if at > 0 {
            rest.advance(at);
        }
        (rest, &self.cur)
    }

    /// Lets go of the current piece when it is used up on a block boundary
    /// with nothing queued and nothing held (what [`queue_piece`](Self::queue_piece)
    /// would replace with the next piece): the parser then keeps no
    /// reference to it between pieces, so the buffer the piece is a slice
    /// of (a connection's read buffer) can be reused by its owner instead
    /// of being left shared. The state is the one [`skip`](Self::skip)
    /// leaves at the end of a piece.
    #[inline]
    pub(crate) fn release_used(&mut self) {
        let st = &self.st;
        if !self.cur.is_empty()
            && st.pos == st.start
            && st.used_up(self.cur.len())
            && st.line_start == 0
            && !st.unclean()
            && st.joined.is_empty()
        {
            self.cur = Bytes::new();
            self.st.pos = 0;
            self.st.start = 0;
        }
    }

    /// Whether pieces are queued after the current one.
    #[inline]
    pub(crate) fn has_queued(&self) -> bool {
        !self.st.queue.is_empty()
    }

    /// The configured event size limit ([`Config::max_event_size`]).
    #[inline]
    pub(crate) fn max_event_size(&self) -> usize {
        self.st.max
    }

    /// Puts the piece the state machine went on to (the queue's front, see
    /// [`State::advance`]) in `cur`'s place, when it did.
    #[inline]
    fn unstale(&mut self) {
        if self.st.stale() {
            self.st.note_fresh();
            if let Some(piece) = self.st.queue.pop_front() {
                self.cur = piece;
            }
        }
    }

    /// Returns the next complete frame, or `None` when more input is needed.
    ///
    /// # Panics
    ///
    /// Never panics.
    #[must_use]
    pub fn next_frame(&mut self) -> Option<Frame> {
        self.unstale();
        if let Some(q) = self.st.quick(&self.cur) {
            return Some(Frame::Event(Event {
                raw: self.cur.slice(q.start..q.start + q.raw.len()),
                data: DataRepr::Slice(q.data_range),
                event: q.event,
                id: None,
                retry: None,
                last_event_id: self.st.last_event_id.clone(),
            }));
        }
        if self.st.used_up(self.cur.len()) {
            return None;
        }
        let f = match self.st.continue_open(&self.cur) {
            Some(Ok(c)) => {
                return Some(Frame::Event(Event {
                    raw: self.st.take_lent(),
                    data: DataRepr::Slice(c.data),
                    event: c.event,
                    id: None,
                    retry: None,
                    last_event_id: self.st.last_event_id.clone(),
                }));
            }
            Some(Err(f)) => f,
            None => self.st.advance(&self.cur)?,
        };
        self.unstale();
        let raw = match f.raw {
            Loc::Cur(a, b) => self.cur.slice(a..b),
            Loc::Owned => self.st.take_lent(),
        };
        Some(match f.kind {
            FrameKind::Event => Frame::Event(Event {
                raw,
                data: match f.data {
                    Some(r) => DataRepr::Slice(r),
                    None => DataRepr::Joined(std::mem::take(&mut self.st.joined)),
                },
                event: f.event,
                id: f.id,
                retry: f.retry,
                last_event_id: self.st.last_event_id.clone(),
            }),
            FrameKind::Skipped => Frame::Skipped(raw),
            FrameKind::Oversized => Frame::Oversized(raw),
            FrameKind::LineEnd => Frame::LineEnd(raw),
        })
    }

    /// Like [`next_frame`](Parser::next_frame), but lends the frame instead
    /// of handing out `Bytes`: the cheapest way to read a stream, and the
    /// way to forward runs of unchanged frames as one slice (see
    /// [`FrameRef::piece`]).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use citestream::sse::{FrameKind, Parser};
    ///
    /// let mut p = Parser::new();
    /// p.feed(Bytes::from_static(b"data: a\n\n: ping\n\ndata: b\n\n"));
    /// let mut seen = Vec::new();
    /// while let Some(f) = p.next_frame_ref() {
    ///     if f.kind() == FrameKind::Event {
    ///         seen.push(f.data().to_vec());
    ///     }
    /// }
    /// assert_eq!(seen, [b"a".to_vec(), b"b".to_vec()]);
    /// ```
    ///
    /// # Panics
    ///
    /// Never panics.
    #[must_use]
    pub fn next_frame_ref(&mut self) -> Option<FrameRef<'_>> {
        if self.st.quick_closed() {
            self.unstale();
            // (Closed only by the last gathered frame, now let go of: the
            // quick layer goes on.)
            if !self.st.reopen() {
                return Self::rest_ref(&self.cur, &mut self.st);
            }
        }
        // (The event lent as the quick layer found it: no index checked
        // again. Past this point `cur` is only read, as it is lent.)
        match self.st.quick_open(&self.cur) {
            Some(q) => Some(FrameRef {
                kind: FrameKind::Event,
                raw: q.raw,
                data: q.data,
                data_range: Some(q.data_range),
                event: q.event,
                id: None,
                retry: None,
                last_event_id: &self.st.last_event_id,
                src: Src::Piece(&self.cur, q.start),
                joined: &self.st.joined,
            }),
            None => Self::rest_ref(&self.cur, &mut self.st),
        }
    }

    /// [`next_frame_ref`](Self::next_frame_ref) past the quick layer: the
    /// continued open line, the general loop. `cur` is not replaced (a
    /// queued piece the loop goes on to is lent from the queue).
    #[inline(always)]
    fn rest_ref<'a>(cur: &'a Bytes, st: &'a mut State) -> Option<FrameRef<'a>> {
        if st.used_up(cur.len()) {
            return None;
        }
        let f = match st.continue_open(cur) {
            Some(Ok(c)) => {
                let st: &'a State = st;
                let raw: &[u8] = &st.partial;
                return Some(FrameRef {
                    kind: FrameKind::Event,
                    raw,
                    data: &raw[c.data.clone()],
                    data_range: Some(c.data),
                    event: c.event,
                    id: None,
                    retry: None,
                    last_event_id: &st.last_event_id,
                    src: Src::Gathered,
                    joined: &st.joined,
                });
            }
            Some(Err(f)) => f,
            None => st.advance(cur)?,
        };
        let st: &'a State = st;
        let piece = match st.queue.front() {
            Some(front) if st.stale() => front,
            _ => cur,
        };
        let (raw, src): (&[u8], _) = match f.raw {
            Loc::Cur(a, b) => (&piece[a..b], Src::Piece(piece, a)),
            Loc::Owned => (&st.partial, Src::Gathered),
        };
        let data: &[u8] = match (&f.kind, &f.data) {
            (FrameKind::Event, Some(r)) => &raw[r.clone()],
            (FrameKind::Event, None) => &st.joined,
            _ => &[],
        };
        Some(FrameRef {
            kind: f.kind,
            raw,
            data,
            data_range: f.data,
            event: f.event,
            id: f.id,
            retry: f.retry,
            last_event_id: &st.last_event_id,
            src,
            joined: &st.joined,
        })
    }
}

#[cfg(test)]
mod tests;

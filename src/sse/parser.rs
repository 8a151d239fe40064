//! The incremental WHATWG event-stream parser.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

/// Default for [`Config::max_event_size`]: 1 MiB.
pub const DEFAULT_MAX_EVENT_SIZE: usize = 1 << 20;

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

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

/// One dispatched event: its exact raw bytes and its parsed fields.
///
/// Field accessors return slices of [`Event::raw`] when the value is
/// contiguous there; multi-line `data` is joined with LF into a separate
/// buffer.
#[derive(Clone, PartialEq, Eq)]
pub struct Event {
    raw: Bytes,
    data: DataRepr,
    event: Option<Range<usize>>,
    id: Option<Range<usize>>,
    retry: Option<u64>,
    last_event_id: Bytes,
}

#[derive(Clone, PartialEq, Eq)]
enum DataRepr {
    /// A single `data` line: its value's range in `raw`.
    Slice(Range<usize>),
    /// Several `data` lines joined with LF.
    Joined(Bytes),
}

impl Event {
    /// The exact bytes this event occupied in the input, from its first line
    /// to the end of the blank line that dispatched it (a leading BOM and any
    /// comment or unknown lines included). Re-emitting them reproduces the
    /// input exactly.
    #[must_use]
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The event's data: its `data` lines' values joined with LF.
    #[must_use]
    pub fn data(&self) -> &[u8] {
        match &self.data {
            DataRepr::Slice(r) => &self.raw[r.clone()],
            DataRepr::Joined(b) => b,
        }
    }

    /// The data as a `Bytes` (a zero-copy slice of the input when it was a
    /// single `data` line).
    #[must_use]
    pub fn data_bytes(&self) -> Bytes {
        match &self.data {
            DataRepr::Slice(r) => self.raw.slice(r.clone()),
            DataRepr::Joined(b) => b.clone(),
        }
    }

    /// Where the data lies in [`Event::raw`], when it was a single `data`
    /// line (so `raw()[range] == data()`); `None` for joined multi-line data.
    /// Rewriters use it to splice into an event without re-framing it.
    #[must_use]
    pub fn data_range(&self) -> Option<Range<usize>> {
        match &self.data {
            DataRepr::Slice(r) => Some(r.clone()),
            DataRepr::Joined(_) => None,
        }
    }

    /// The data decoded as UTF-8, invalid sequences replaced by U+FFFD.
    #[must_use]
    pub fn data_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.data())
    }

    /// The event type: the last `event` field's value, or `message` when the
    /// event had none (or an empty one).
    #[must_use]
    pub fn event_type(&self) -> &[u8] {
        match self.event_field() {
            Some(e) if !e.is_empty() => e,
            _ => b"message",
        }
    }

    /// The value of this event's own last `event` line, if it had one.
    #[must_use]
    pub fn event_field(&self) -> Option<&[u8]> {
        self.event.clone().map(|r| &self.raw[r])
    }

    /// The value of this event's own last `id` line, if it had one (even one
    /// containing NUL, which does not change the last event ID).
    #[must_use]
    pub fn id_field(&self) -> Option<&[u8]> {
        self.id.clone().map(|r| &self.raw[r])
    }

    /// The last event ID in force when this event was dispatched (what a
    /// browser's `MessageEvent.lastEventId` holds): the latest valid `id`
    /// field of this or an earlier block, or the initial ID.
    #[must_use]
    pub fn last_event_id(&self) -> &[u8] {
        &self.last_event_id
    }

    /// The `retry` value given in this event's block, if a valid one.
    #[must_use]
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("type", &String::from_utf8_lossy(self.event_type()))
            .field("data", &self.data_str())
            .field(
                "last_event_id",
                &String::from_utf8_lossy(&self.last_event_id),
            )
            .field("retry", &self.retry)
            .field("raw_len", &self.raw.len())
            .finish()
    }
}

/// A piece of the input handed out by [`Parser::next_frame`].
///
/// Every input byte belongs to exactly one frame (or to the tail returned by
/// [`Parser::finish`]); concatenating the raw bytes of all frames in order
/// gives back the input. A proxy forwards [`Frame::raw`] for every frame it
/// does not change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A dispatched event.
    Event(Event),
    /// A complete block that dispatched nothing: only comments, blank lines,
    /// `event`/`id`/`retry`/unknown fields without `data`.
    Skipped(Bytes),
    /// Part of a block larger than [`Config::max_event_size`]: forwarded
    /// unchanged, never interpreted or dispatched.
    Oversized(Bytes),
    /// A lone LF that completes the CRLF whose CR ended the previous frame
    /// (the CR arrived at the end of one read, the LF at the start of the
    /// next). It carries no meaning; a rewriter that re-framed the previous
    /// event drops it, anything else forwards it.
    LineEnd(Bytes),
}

impl Frame {
    /// The exact input bytes of this frame.
    #[must_use]
    pub fn raw(&self) -> &Bytes {
        match self {
            Frame::Event(e) => e.raw(),
            Frame::Skipped(b) | Frame::Oversized(b) | Frame::LineEnd(b) => b,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Data {
    None,
    One(Range<usize>),
    /// Several lines, joined in `State::scratch`.
    Many,
}

/// What kind of frame [`Parser::next_frame_ref`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// A dispatched event ([`Frame::Event`]).
    Event,
    /// A complete block that dispatched nothing ([`Frame::Skipped`]).
    Skipped,
    /// Part of an over-limit block ([`Frame::Oversized`]).
    Oversized,
    /// A lone LF completing a split CRLF ([`Frame::LineEnd`]).
    LineEnd,
}

/// Where a found frame's raw bytes are.
#[derive(Clone, Copy, Debug)]
enum Loc {
    /// `cur[start..end]`.
    Cur(usize, usize),
    /// `State::owned` (gathered across pieces).
    Owned,
}

/// A frame found by the state machine, before any `Bytes` is made for it.
#[derive(Clone, Debug)]
struct Found {
    kind: FrameKind,
    raw: Loc,
    /// For events: the data's range in the raw bytes, `None` when joined
    /// into `State::joined`.
    data: Option<Range<usize>>,
    event: Option<Range<usize>>,
    id: Option<Range<usize>>,
    retry: Option<u64>,
}

impl Found {
    #[inline]
    fn plain(kind: FrameKind, raw: Loc) -> Self {
        Found {
            kind,
            raw,
            data: None,
            event: None,
            id: None,
            retry: None,
        }
    }
}

/// A borrowed view of the next frame ([`Parser::next_frame_ref`]): the same
/// information as a [`Frame`], without creating any `Bytes` (no reference
/// count is touched). Valid until the parser is used again.
#[derive(Clone, Debug)]
pub struct FrameRef<'a> {
    kind: FrameKind,
    raw: &'a [u8],
    data: &'a [u8],
    data_range: Option<Range<usize>>,
    event: Option<Range<usize>>,
    id: Option<Range<usize>>,
    retry: Option<u64>,
    last_event_id: &'a Bytes,
    /// Where the raw bytes live: the input piece (with the offset), or the
    /// parser's gathered buffer.
    src: Src<'a>,
    joined: &'a Bytes,
}

#[derive(Clone, Copy, Debug)]
enum Src<'a> {
    Piece(&'a Bytes, usize),
    Owned(&'a Bytes),
}

impl<'a> FrameRef<'a> {
    /// The kind of frame.
    #[must_use]
    pub fn kind(&self) -> FrameKind {
        self.kind
    }

    /// The frame's exact input bytes (see [`Frame::raw`]).
    #[must_use]
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// For events, the data (see [`Event::data`]); empty otherwise.
    #[must_use]
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// For events, where the data lies in [`FrameRef::raw`] when it was one
    /// line (see [`Event::data_range`]).
    #[must_use]
    pub fn data_range(&self) -> Option<Range<usize>> {
        self.data_range.clone()
    }

    /// For events, the event type (`message` when none; see
    /// [`Event::event_type`]).
    #[must_use]
    pub fn event_type(&self) -> &'a [u8] {
        match self.event_field() {
            Some(e) if !e.is_empty() => e,
            _ => b"message",
        }
    }

    /// For events, the value of the event's own `event` line.
    #[must_use]
    pub fn event_field(&self) -> Option<&'a [u8]> {
        let raw = self.raw;
        self.event.clone().map(|r| &raw[r])
    }

    /// For events, the value of the event's own `id` line.
    #[must_use]
    pub fn id_field(&self) -> Option<&'a [u8]> {
        let raw = self.raw;
        self.id.clone().map(|r| &raw[r])
    }

    /// For events, the `retry` value of its block.
    #[must_use]
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// For events, the last event ID in force (see [`Event::last_event_id`]).
    #[must_use]
    pub fn last_event_id(&self) -> &'a [u8] {
        self.last_event_id
    }

    /// When the frame lies within one input piece: that piece and the
    /// frame's offset in it, so a caller can slice it (`piece.slice(at..at +
    /// raw.len())`) or merge adjacent frames into one slice.
    #[must_use]
    pub fn piece(&self) -> Option<(&'a Bytes, usize)> {
        match self.src {
            Src::Piece(p, at) => Some((p, at)),
            Src::Owned(_) => None,
        }
    }

    /// The raw bytes as `Bytes`: a slice of the input piece, or the parser's
    /// gathered buffer (no copy either way).
    #[must_use]
    pub fn raw_bytes(&self) -> Bytes {
        match self.src {
            Src::Piece(p, at) => p.slice(at..at + self.raw.len()),
            Src::Owned(b) => b.clone(),
        }
    }

    /// The owned [`Frame`] for this view (what
    /// [`Parser::next_frame`] would have returned).
    #[must_use]
    pub fn to_frame(&self) -> Frame {
        let raw = self.raw_bytes();
        match self.kind {
            FrameKind::Event => Frame::Event(Event {
                raw,
                data: match &self.data_range {
                    Some(r) => DataRepr::Slice(r.clone()),
                    None => DataRepr::Joined(self.joined.clone()),
                },
                event: self.event.clone(),
                id: self.id.clone(),
                retry: self.retry,
                last_event_id: self.last_event_id.clone(),
            }),
            FrameKind::Skipped => Frame::Skipped(raw),
            FrameKind::Oversized => Frame::Oversized(raw),
            FrameKind::LineEnd => Frame::LineEnd(raw),
        }
    }
}

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

/// Everything but the current piece, so the scanner can read the piece
/// while it updates its state.
struct State {
    max: usize,
    /// Pieces fed after `cur`.
    queue: VecDeque<Bytes>,
    /// Scan position in `cur`.
    pos: usize,
    /// Where the not-yet-gathered part of the current block starts in
    /// `cur`. Block-relative offset of `cur[i]` is
    /// `partial.len() + i - start`.
    start: usize,
    /// The current block's bytes from earlier pieces.
    partial: BytesMut,
    /// Block-relative start of the current line.
    line_start: usize,
    /// The last byte consumed was a CR line end at the end of a piece.
    after_cr: bool,
    /// BOM bytes matched so far; `None` once decided.
    bom: Option<u8>,
    /// Oversized block: forwarding bytes until a blank line.
    discard: bool,
    /// In discard mode: no byte since the last line end.
    discard_at_line_start: bool,
    data: Data,
    scratch: BytesMut,
    event: Option<Range<usize>>,
    id: Option<Range<usize>>,
    id_valid: Option<Range<usize>>,
    retry: Option<u64>,
    last_event_id: Bytes,
    initial_last_event_id: Bytes,
    reconnection_time: Option<u64>,
    /// Raw bytes of the last frame when it was gathered across pieces.
    owned: Bytes,
    /// Joined data of the last event when it had several `data` lines.
    joined: Bytes,
}

impl fmt::Debug for Parser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parser")
            .field("max_event_size", &self.st.max)
            .field("queued", &self.st.queue.len())
            .field("buffered", &self.st.partial.len())
            .field("discarding", &self.st.discard)
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
        self.st.partial.len()
    }

    /// Queues an input piece. Cheap: nothing is parsed until
    /// [`next_frame`](Parser::next_frame). Empty pieces are ignored.
    pub fn feed(&mut self, chunk: Bytes) {
        let st = &mut self.st;
        // Let go of the last gathered frame, so the gathering buffer can be
        // reused once the caller has dropped its copy.
        st.release_owned();
        if chunk.is_empty() {
            return;
        }
        if self.cur.is_empty() && st.queue.is_empty() {
            // Tiny reads (a byte or a few at a time) in the middle of a
            // line: gather them right away, exactly as `next_frame` would,
            // without the scanning machinery. Anything with a line end, or
            // that could reach the size limit, takes the general path.
            if chunk.len() <= 16
                && !st.after_cr
                && st.bom.is_none()
                && !st.discard
                && st.partial.len() + chunk.len() <= st.max
                && !chunk.iter().any(|&b| b == b'\n' || b == b'\r')
            {
                if let [b] = chunk[..] {
                    st.partial.put_u8(b);
                } else {
                    st.partial.extend_from_slice(&chunk);
                }
                return;
            }
            self.cur = chunk;
            st.pos = 0;
            st.start = 0;
            return;
        }
        st.queue.push_back(chunk);
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
        let st = &mut self.st;
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

    /// Returns the next complete frame, or `None` when more input is needed.
    ///
    /// # Panics
    ///
    /// Never panics.
    #[must_use]
    pub fn next_frame(&mut self) -> Option<Frame> {
        let f = self.st.advance(&mut self.cur)?;
        let raw = match f.raw {
            Loc::Cur(a, b) => self.cur.slice(a..b),
            Loc::Owned => std::mem::take(&mut self.st.owned),
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
        let f = self.st.advance(&mut self.cur)?;
        let (raw, src): (&[u8], _) = match f.raw {
            Loc::Cur(a, b) => (&self.cur[a..b], Src::Piece(&self.cur, a)),
            Loc::Owned => (&self.st.owned, Src::Owned(&self.st.owned)),
        };
        let data: &[u8] = match (&f.kind, &f.data) {
            (FrameKind::Event, Some(r)) => &raw[r.clone()],
            (FrameKind::Event, None) => &self.st.joined,
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
            last_event_id: &self.st.last_event_id,
            src,
            joined: &self.st.joined,
        })
    }
}

impl State {
    fn new(max: usize) -> Self {
        State {
            max,
            queue: VecDeque::new(),
            pos: 0,
            start: 0,
            partial: BytesMut::new(),
            line_start: 0,
            after_cr: false,
            bom: Some(0),
            discard: false,
            discard_at_line_start: true,
            data: Data::None,
            scratch: BytesMut::new(),
            event: None,
            id: None,
            id_valid: None,
            retry: None,
            last_event_id: Bytes::new(),
            initial_last_event_id: Bytes::new(),
            reconnection_time: None,
            owned: Bytes::new(),
            joined: Bytes::new(),
        }
    }

    /// Block-relative offset of `cur[i]`.
    #[inline]
    fn rel(&self, i: usize) -> usize {
        self.partial.len() + i - self.start
    }

    #[inline]
    fn release_owned(&mut self) {
        if !self.owned.is_empty() {
            self.owned = Bytes::new();
        }
        if !self.joined.is_empty() {
            self.joined = Bytes::new();
        }
    }

    /// Finds the next frame, moving to queued pieces as `cur` runs out.
    #[inline]
    fn advance(&mut self, cur: &mut Bytes) -> Option<Found> {
        self.release_owned();
        loop {
            if self.pos >= cur.len() {
                if !cur.is_empty() {
                    if let Some(f) = self.end_of_piece(cur) {
                        return Some(f);
                    }
                    if self.pos < cur.len() {
                        continue;
                    }
                }
                *cur = self.queue.pop_front()?;
                self.pos = 0;
                self.start = 0;
                continue;
            }
            if let Some(f) = self.scan(cur) {
                return Some(f);
            }
        }
    }

    /// Scans `chunk` (the current piece) from `pos` until a frame is
    /// complete or the piece is exhausted.
    fn scan(&mut self, chunk: &Bytes) -> Option<Found> {
        let len = chunk.len();
        while self.pos < len {
            if self.after_cr {
                self.after_cr = false;
                if chunk[self.pos] == b'\n' {
                    self.pos += 1;
                    if !self.discard && self.rel(self.pos - 1) == 0 {
                        // The CR ended the previous frame.
                        self.start = self.pos;
                        return Some(Found::plain(
                            FrameKind::LineEnd,
                            Loc::Cur(self.pos - 1, self.pos),
                        ));
                    }
                    if !self.discard {
                        self.line_start += 1;
                    }
                    continue;
                }
            }
            if let Some(k) = self.bom {
                // WHATWG: one leading U+FEFF is skipped. Matched bytes stay in
                // the first block's raw bytes.
                let k = usize::from(k);
                if chunk[self.pos] == BOM[k] {
                    self.pos += 1;
                    if k + 1 == BOM.len() {
                        self.bom = None;
                        self.line_start = BOM.len();
                    } else {
                        self.bom = Some(k as u8 + 1);
                    }
                } else {
                    self.bom = None;
                }
                continue;
            }
            if self.discard {
                if let Some(f) = self.discard_step(chunk) {
                    return Some(f);
                }
                continue;
            }
            if self.pos == self.start && self.partial.is_empty() {
                if let Some(f) = self.single_data_line(chunk) {
                    return Some(f);
                }
            }
            // Find the end of the current line.
            let Some(i) = find_line_end(&chunk[self.pos..]) else {
                self.pos = len;
                return None;
            };
            let t = self.pos + i;
            let next = t + self.terminator_len(chunk, t);
            let line_end = self.rel(t);
            self.pos = next;
            if line_end == self.line_start {
                // Blank line: dispatch.
                return Some(self.end_block(chunk, next));
            }
            if !self.partial.is_empty() {
                if self.partial.len() + (next - self.start) > self.max {
                    // The block is over the limit before its end: hand out
                    // what is held, then forward the rest as it comes.
                    self.discard = true;
                    self.discard_at_line_start = true;
                    self.reset_block();
                    self.owned = std::mem::take(&mut self.partial).freeze();
                    return Some(Found::plain(FrameKind::Oversized, Loc::Owned));
                }
                self.partial.extend_from_slice(&chunk[self.start..next]);
                self.start = next;
            }
            let line = self.line_start..line_end;
            self.line_start = self.rel(next);
            self.process_line(chunk, line);
        }
        None
    }

    /// Fast path for the common blocks (`data: <value>`, or an `event:`
    /// line then a `data:` line), each line ended, then a blank line, lying
    /// whole in the piece: the same event the general loop
    /// would dispatch, without its per-line bookkeeping. Returns `None`
    /// (consuming nothing) for anything else.
    #[inline]
    fn single_data_line(&mut self, chunk: &[u8]) -> Option<Found> {
        let start = self.pos;
        // A line end, returning where the next line starts; a CR as the
        // piece's last byte may still pair with an LF: leave that to the
        // general loop.
        let after = |i: usize| -> Option<usize> {
            match chunk.get(i)? {
                b'\n' => Some(i + 1),
                _ => match chunk.get(i + 1)? {
                    b'\n' => Some(i + 2),
                    _ => Some(i + 1),
                },
            }
        };
        // `field:` + one optional space: where the value starts.
        let value = |at: usize, field: &[u8]| -> Option<usize> {
            let rest = chunk.get(at..)?;
            if !rest.starts_with(field) {
                return None;
            }
            Some(at + field.len() + usize::from(rest.get(field.len()) == Some(&b' ')))
        };
        // An optional `event` line (the Anthropic shape), then the data.
        let mut at = start;
        let mut event = None;
        if let Some(e) = value(start, b"event:") {
            let t = e + find_line_end(chunk.get(e..)?)?;
            event = Some(e - start..t - start);
            at = after(t)?;
        }
        let v = value(at, b"data:")?;
        let t = v + find_line_end(chunk.get(v..)?)?;
        let blank = after(t)?;
        if !matches!(chunk.get(blank), Some(b'\n' | b'\r')) {
            return None;
        }
        let end = after(blank)?;
        if blank - start > self.max {
            return None;
        }
        self.pos = end;
        self.start = end;
        Some(Found {
            kind: FrameKind::Event,
            raw: Loc::Cur(start, end),
            data: Some(v - start..t - start),
            event,
            id: None,
            retry: None,
        })
    }

    /// Length of the line end at `chunk[t]` (a CR or LF); notes a CR at the
    /// end of the piece, whose LF may come with the next one.
    #[inline]
    fn terminator_len(&mut self, chunk: &[u8], t: usize) -> usize {
        if chunk[t] == b'\r' {
            match chunk.get(t + 1) {
                Some(b'\n') => 2,
                Some(_) => 1,
                None => {
                    self.after_cr = true;
                    1
                }
            }
        } else {
            1
        }
    }

    /// The current piece is exhausted: gather the current block's bytes from
    /// it, or hand them out when the block is too large. `cur` becomes
    /// empty, or the rest of an oversized block to hand out next.
    fn end_of_piece(&mut self, cur: &mut Bytes) -> Option<Found> {
        let len = cur.len();
        let start = self.start;
        if self.discard {
            // Hand out the piece's rest; it stays `cur` until the next call.
            if start < len {
                self.start = len;
                return Some(Found::plain(FrameKind::Oversized, Loc::Cur(start, len)));
            }
            *cur = Bytes::new();
            self.pos = 0;
            self.start = 0;
            return None;
        }
        if self.partial.len() + (len - start) > self.max {
            // Too large to interpret: forward what we have and discard the
            // rest of the block.
            self.discard = true;
            self.bom = None;
            self.discard_at_line_start = self.partial.len() + (len - start) == self.line_start;
            self.reset_block();
            if self.partial.is_empty() {
                self.start = len;
                return Some(Found::plain(FrameKind::Oversized, Loc::Cur(start, len)));
            }
            // The held bytes now, the piece's rest on the next call.
            self.owned = std::mem::take(&mut self.partial).freeze();
            return Some(Found::plain(FrameKind::Oversized, Loc::Owned));
        }
        self.partial.extend_from_slice(&cur[start..len]);
        *cur = Bytes::new();
        self.pos = 0;
        self.start = 0;
        None
    }

    /// Discard mode: forward bytes until the blank line that ends the
    /// oversized block.
    fn discard_step(&mut self, chunk: &[u8]) -> Option<Found> {
        let len = chunk.len();
        let Some(i) = find_line_end(&chunk[self.pos..]) else {
            self.pos = len;
            self.discard_at_line_start = false;
            return None;
        };
        let t = self.pos + i;
        let blank = i == 0 && self.discard_at_line_start;
        self.pos = t + self.terminator_len(chunk, t);
        self.discard_at_line_start = true;
        if blank {
            self.discard = false;
            let f = Found::plain(FrameKind::Oversized, Loc::Cur(self.start, self.pos));
            self.start = self.pos;
            self.line_start = 0;
            return Some(f);
        }
        None
    }

    /// Bytes of the current block at block-relative `r`, which must already
    /// be complete (gathered into `partial` when the block spans pieces).
    fn block_slice<'a>(&'a self, chunk: &'a [u8], r: Range<usize>) -> &'a [u8] {
        if self.partial.is_empty() {
            &chunk[self.start + r.start..self.start + r.end]
        } else {
            &self.partial[r]
        }
    }

    /// WHATWG "process the field" for one non-blank line.
    fn process_line(&mut self, chunk: &[u8], line: Range<usize>) {
        let bytes = self.block_slice(chunk, line.clone());
        if bytes[0] == b':' {
            return; // comment
        }
        let (name, value) = match memchr::memchr(b':', bytes) {
            Some(c) => {
                let mut v = c + 1;
                if bytes.get(v) == Some(&b' ') {
                    v += 1;
                }
                (&bytes[..c], line.start + v..line.end)
            }
            None => (bytes, line.end..line.end),
        };
        match name {
            b"data" => match std::mem::replace(&mut self.data, Data::Many) {
                Data::None => self.data = Data::One(value),
                Data::One(first) => {
                    let mut s = std::mem::take(&mut self.scratch);
                    s.clear();
                    s.extend_from_slice(self.block_slice(chunk, first));
                    s.extend_from_slice(b"\n");
                    s.extend_from_slice(self.block_slice(chunk, value));
                    self.scratch = s;
                }
                Data::Many => {
                    let mut s = std::mem::take(&mut self.scratch);
                    s.extend_from_slice(b"\n");
                    s.extend_from_slice(self.block_slice(chunk, value));
                    self.scratch = s;
                }
            },
            b"event" => self.event = Some(value),
            b"id" => {
                if memchr::memchr(0, self.block_slice(chunk, value.clone())).is_none() {
                    self.id_valid = Some(value.clone());
                }
                self.id = Some(value);
            }
            b"retry" => {
                let v = self.block_slice(chunk, value);
                if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
                    // Digits only; a value too large for u64 saturates.
                    let n = v.iter().fold(0u64, |acc, d| {
                        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                    });
                    self.retry = Some(n);
                }
            }
            _ => {}
        }
    }

    /// The blank line ending at `cur[..next]` closes the block.
    fn end_block(&mut self, chunk: &Bytes, next: usize) -> Found {
        let size = self.line_start;
        let raw = if self.partial.is_empty() {
            Loc::Cur(self.start, next)
        } else {
            self.partial.extend_from_slice(&chunk[self.start..next]);
            self.owned = self.partial.split().freeze();
            Loc::Owned
        };
        let block_start = self.start;
        self.start = next;
        self.line_start = 0;
        if size > self.max {
            self.reset_block();
            return Found::plain(FrameKind::Oversized, raw);
        }
        if let Some(r) = self.id_valid.take() {
            self.last_event_id = match raw {
                Loc::Cur(..) => chunk.slice(block_start + r.start..block_start + r.end),
                Loc::Owned => self.owned.slice(r),
            };
        }
        if let Some(n) = self.retry {
            self.reconnection_time = Some(n);
        }
        let data = match std::mem::replace(&mut self.data, Data::None) {
            Data::None => {
                self.reset_block();
                return Found::plain(FrameKind::Skipped, raw);
            }
            Data::One(r) => Some(r),
            Data::Many => {
                self.joined = self.scratch.split().freeze();
                None
            }
        };
        Found {
            kind: FrameKind::Event,
            raw,
            data,
            event: self.event.take(),
            id: self.id.take(),
            retry: self.retry.take(),
        }
    }

    fn reset_block(&mut self) {
        self.data = Data::None;
        self.event = None;
        self.id = None;
        self.id_valid = None;
        self.retry = None;
    }
}

/// Index of the first CR or LF: a plain loop for short inputs (where a
/// `memchr2` call costs more than it saves), `memchr2` otherwise.
#[inline]
fn find_line_end(b: &[u8]) -> Option<usize> {
    if b.len() <= 16 {
        return b.iter().position(|&c| c == b'\n' || c == b'\r');
    }
    memchr::memchr2(b'\n', b'\r', b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8], pieces: &[usize]) -> (Vec<Frame>, Option<Bytes>) {
        let mut p = Parser::new();
        let mut frames = Vec::new();
        let mut at = 0;
        for &n in pieces {
            let end = (at + n).min(input.len());
            p.feed(Bytes::copy_from_slice(&input[at..end]));
            at = end;
            while let Some(f) = p.next_frame() {
                frames.push(f);
            }
        }
        p.feed(Bytes::copy_from_slice(&input[at..]));
        while let Some(f) = p.next_frame() {
            frames.push(f);
        }
        (frames, p.finish())
    }

    fn concat(frames: &[Frame], tail: &Option<Bytes>) -> Vec<u8> {
        let mut v: Vec<u8> = frames.iter().flat_map(|f| f.raw().to_vec()).collect();
        if let Some(t) = tail {
            v.extend_from_slice(t);
        }
        v
    }

    #[test]
    fn single_event_is_a_slice_of_the_input() {
        let input = Bytes::from_static(b"data: x\n\n");
        let mut p = Parser::new();
        p.feed(input.clone());
        let Some(Frame::Event(e)) = p.next_frame() else {
            panic!()
        };
        assert_eq!(e.raw().as_ptr(), input.as_ptr());
        assert_eq!(e.data(), b"x");
        assert_eq!(e.data_range(), Some(6..7));
    }

    #[test]
    fn split_cr_lf_yields_line_end_frame() {
        let (frames, tail) = parse_all(b"data: a\r\n\r\ndata: b\n\n", &[10]);
        assert!(matches!(&frames[0], Frame::Event(e) if e.data() == b"a"));
        assert!(matches!(&frames[1], Frame::LineEnd(b) if &b[..] == b"\n"));
        assert!(matches!(&frames[2], Frame::Event(e) if e.data() == b"b"));
        assert!(tail.is_none());
    }

    #[test]
    fn every_split_is_lossless() {
        let input: &[u8] = b"\xEF\xBB\xBFid: 1\r\ndata: a\r\ndata: b\r\r: c\n\nevent: x\rdata\n\nretry: 5\n\ndata: tail";
        let (whole, whole_tail) = parse_all(input, &[]);
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let (frames, tail) = parse_all(input, &[i, j - i]);
                assert_eq!(concat(&frames, &tail), input, "split {i} {j}");
                let evs: Vec<_> = frames
                    .iter()
                    .filter_map(|f| match f {
                        Frame::Event(e) => Some(e.clone()),
                        _ => None,
                    })
                    .map(|e| {
                        (
                            e.event_type().to_vec(),
                            e.data().to_vec(),
                            e.last_event_id().to_vec(),
                        )
                    })
                    .collect();
                let want: Vec<_> = whole
                    .iter()
                    .filter_map(|f| match f {
                        Frame::Event(e) => Some(e.clone()),
                        _ => None,
                    })
                    .map(|e| {
                        (
                            e.event_type().to_vec(),
                            e.data().to_vec(),
                            e.last_event_id().to_vec(),
                        )
                    })
                    .collect();
                assert_eq!(evs, want, "split {i} {j}");
                assert_eq!(tail, whole_tail);
            }
        }
        assert_eq!(whole.len(), 4);
    }

    #[test]
    fn oversized_is_forwarded_and_resynchronised() {
        let mut c = Config::new();
        c.max_event_size(12);
        let input: &[u8] = b"data: 0123456789\ndata: more\n\ndata: ok\n\n";
        for split in 0..=input.len() {
            let mut p = Parser::with_config(&c);
            let mut frames = Vec::new();
            p.feed(Bytes::copy_from_slice(&input[..split]));
            while let Some(f) = p.next_frame() {
                frames.push(f);
            }
            p.feed(Bytes::copy_from_slice(&input[split..]));
            while let Some(f) = p.next_frame() {
                frames.push(f);
            }
            assert!(p.finish().is_none());
            assert_eq!(concat(&frames, &None), input);
            let evs: Vec<_> = frames
                .iter()
                .filter_map(|f| match f {
                    Frame::Event(e) => Some(e.data().to_vec()),
                    _ => None,
                })
                .collect();
            assert_eq!(evs, vec![b"ok".to_vec()], "split {split}");
            assert!(p.buffered() <= 12 + 2);
        }
    }

    #[test]
    fn memory_stays_bounded_on_a_long_line_after_a_split() {
        let mut c = Config::new();
        c.max_event_size(100);
        let mut p = Parser::with_config(&c);
        p.feed(Bytes::from_static(b"data: ab"));
        assert!(p.next_frame().is_none());
        let mut big = vec![b'x'; 10_000];
        big.extend_from_slice(b"\n\ndata: ok\n\n");
        p.feed(Bytes::from(big));
        let mut frames = Vec::new();
        while let Some(f) = p.next_frame() {
            assert!(p.buffered() <= 100);
            frames.push(f);
        }
        let last = frames.pop().unwrap();
        assert!(matches!(last, Frame::Event(e) if e.data() == b"ok"));
        assert!(frames.iter().all(|f| matches!(f, Frame::Oversized(_))));
        let total: usize = frames.iter().map(|f| f.raw().len()).sum();
        assert_eq!(total, 8 + 10_000 + 2);
    }
}

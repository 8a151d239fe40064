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
    /// A larger event is never buffered whole: its bytes are handed out as
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
    /// Several lines, joined in `Parser::scratch`.
    Many,
}

/// Incremental, zero-copy parser for a `text/event-stream` (WHATWG HTML,
/// "Interpreting an event stream").
///
/// # Contract
///
/// The parser is sans-IO: [`feed`](Parser::feed) it input pieces of any size
/// as they arrive, call [`next_frame`](Parser::next_frame) until it returns
/// `None`, repeat; at the end of the input call [`finish`](Parser::finish)
/// for the unterminated tail. No byte is scanned twice and no byte is
/// copied unless a block spans two input pieces (then that block's bytes
/// are gathered once into an internal buffer, bounded by
/// [`Config::max_event_size`]).
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
    max: usize,
    /// The piece being scanned.
    cur: Bytes,
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
}

impl fmt::Debug for Parser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parser")
            .field("max_event_size", &self.max)
            .field("queued", &self.queue.len())
            .field("buffered", &self.partial.len())
            .field("discarding", &self.discard)
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
            max: config.max_event_size,
            cur: Bytes::new(),
            queue: VecDeque::with_capacity(2),
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
        }
    }

    /// Seeds the last event ID, as a client reconnecting with a
    /// `Last-Event-ID` header does. Events get it until an `id` field
    /// changes it. Also kept across [`Parser::finish`].
    pub fn set_last_event_id(&mut self, id: impl Into<Bytes>) {
        let id = id.into();
        self.initial_last_event_id = id.clone();
        self.last_event_id = id;
    }

    /// The current last event ID.
    #[must_use]
    pub fn last_event_id(&self) -> &[u8] {
        &self.last_event_id
    }

    /// The reconnection time (ms) set by the latest valid `retry` field.
    #[must_use]
    pub fn reconnection_time(&self) -> Option<u64> {
        self.reconnection_time
    }

    /// Bytes currently held for a block that spans input pieces (at most
    /// [`Config::max_event_size`] plus one line end).
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.partial.len()
    }

    /// Queues an input piece. Cheap: nothing is parsed until
    /// [`next_frame`](Parser::next_frame). Empty pieces are ignored.
    pub fn feed(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        // Tiny reads (a byte or a few at a time) in the middle of a line:
        // gather them right away, exactly as `next_frame` would, without
        // queueing and scanning machinery. Anything with a line end, or
        // that could reach the size limit, takes the general path.
        if chunk.len() <= 16
            && self.cur.is_empty()
            && self.queue.is_empty()
            && !self.after_cr
            && self.bom.is_none()
            && !self.discard
            && self.partial.len() + chunk.len() <= self.max
            && !chunk.iter().any(|&b| b == b'\n' || b == b'\r')
        {
            if let [b] = chunk[..] {
                self.partial.put_u8(b);
            } else {
                self.partial.extend_from_slice(&chunk);
            }
            return;
        }
        self.queue.push_back(chunk);
    }

    /// Ends the input. Returns the bytes of an unterminated last block (and
    /// any input not yet handed out, if `next_frame` was not drained), which
    /// are not dispatched, so a proxy can still forward them; `None` when
    /// the input ended on a block boundary.
    ///
    /// The parser is then reset for a new stream (limits and the initial
    /// last event ID are kept).
    #[must_use = "the returned bytes are part of the stream"]
    pub fn finish(&mut self) -> Option<Bytes> {
        let mut tail = std::mem::take(&mut self.partial);
        let cur = std::mem::take(&mut self.cur);
        tail.extend_from_slice(&cur[self.start.min(cur.len())..]);
        for rest in self.queue.drain(..) {
            tail.extend_from_slice(&rest);
        }
        let initial = self.initial_last_event_id.clone();
        *self = Parser {
            max: self.max,
            queue: std::mem::take(&mut self.queue),
            scratch: std::mem::take(&mut self.scratch),
            ..Parser::new()
        };
        self.set_last_event_id(initial);
        if tail.is_empty() {
            None
        } else {
            Some(tail.freeze())
        }
    }

    /// Block-relative offset of `cur[i]`.
    #[inline]
    fn rel(&self, i: usize) -> usize {
        self.partial.len() + i - self.start
    }

    /// Returns the next complete frame, or `None` when more input is needed.
    ///
    /// # Panics
    ///
    /// Never panics.
    #[must_use]
    pub fn next_frame(&mut self) -> Option<Frame> {
        if self.cur.is_empty() && self.queue.is_empty() {
            return None;
        }
        loop {
            if self.pos >= self.cur.len() {
                let chunk = std::mem::take(&mut self.cur);
                if !chunk.is_empty() {
                    if let Some(f) = self.end_of_piece(chunk) {
                        return Some(f);
                    }
                    if !self.cur.is_empty() {
                        continue;
                    }
                }
                self.cur = self.queue.pop_front()?;
                self.pos = 0;
                self.start = 0;
                continue;
            }
            let chunk = std::mem::take(&mut self.cur);
            let frame = self.scan(&chunk);
            self.cur = chunk;
            if frame.is_some() {
                return frame;
            }
        }
    }

    /// Scans `chunk` (the current piece) from `pos` until a frame is
    /// complete or the piece is exhausted.
    fn scan(&mut self, chunk: &Bytes) -> Option<Frame> {
        let len = chunk.len();
        while self.pos < len {
            if self.after_cr {
                self.after_cr = false;
                if chunk[self.pos] == b'\n' {
                    self.pos += 1;
                    if !self.discard && self.rel(self.pos - 1) == 0 {
                        // The CR ended the previous frame.
                        self.start = self.pos;
                        return Some(Frame::LineEnd(chunk.slice(self.pos - 1..self.pos)));
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
            let Some(i) = memchr::memchr2(b'\n', b'\r', &chunk[self.pos..]) else {
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
                    return Some(Frame::Oversized(std::mem::take(&mut self.partial).freeze()));
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

    /// Fast path for the common block `data: <value>` + line end + blank
    /// line lying whole in the piece: the same event the general loop
    /// would dispatch, without its per-line bookkeeping. Returns `None`
    /// (consuming nothing) for anything else.
    #[inline]
    fn single_data_line(&mut self, chunk: &Bytes) -> Option<Frame> {
        let start = self.pos;
        let rest = &chunk[start..];
        if !rest.starts_with(b"data:") {
            return None;
        }
        let v = start + 5 + usize::from(rest.get(5) == Some(&b' '));
        let t = v + memchr::memchr2(b'\n', b'\r', chunk.get(v..)?)?;
        // The line end, then a blank line; a CR as the piece's last byte
        // may still pair with an LF: leave that to the general loop.
        let after = |i: usize| -> Option<usize> {
            match chunk.get(i)? {
                b'\n' => Some(i + 1),
                _ => match chunk.get(i + 1)? {
                    b'\n' => Some(i + 2),
                    _ => Some(i + 1),
                },
            }
        };
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
        Some(Frame::Event(Event {
            raw: chunk.slice(start..end),
            data: DataRepr::Slice(v - start..t - start),
            event: None,
            id: None,
            retry: None,
            last_event_id: self.last_event_id.clone(),
        }))
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
    /// it, or hand them out when the block is too large.
    fn end_of_piece(&mut self, chunk: Bytes) -> Option<Frame> {
        let len = chunk.len();
        let start = self.start;
        self.pos = 0;
        self.start = 0;
        if self.discard {
            return (start < len).then(|| Frame::Oversized(chunk.slice(start..len)));
        }
        if self.partial.len() + (len - start) > self.max {
            // Too large to interpret: forward what we have and discard the
            // rest of the block.
            self.discard = true;
            self.bom = None;
            self.discard_at_line_start = self.rel_after_piece(len - start) == self.line_start;
            self.reset_block();
            let held = std::mem::take(&mut self.partial);
            if held.is_empty() {
                return Some(Frame::Oversized(chunk.slice(start..len)));
            }
            // Hand out the held bytes now and the piece's rest right after.
            self.cur = chunk.slice(start..len);
            self.pos = self.cur.len();
            return Some(Frame::Oversized(held.freeze()));
        }
        self.partial.extend_from_slice(&chunk[start..len]);
        None
    }

    #[inline]
    fn rel_after_piece(&self, taken: usize) -> usize {
        self.partial.len() + taken
    }

    /// Discard mode: forward bytes until the blank line that ends the
    /// oversized block.
    fn discard_step(&mut self, chunk: &Bytes) -> Option<Frame> {
        let len = chunk.len();
        let Some(i) = memchr::memchr2(b'\n', b'\r', &chunk[self.pos..]) else {
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
            let f = Frame::Oversized(chunk.slice(self.start..self.pos));
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
    fn process_line(&mut self, chunk: &Bytes, line: Range<usize>) {
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
    fn end_block(&mut self, chunk: &Bytes, next: usize) -> Frame {
        let size = self.line_start;
        let raw = if self.partial.is_empty() {
            chunk.slice(self.start..next)
        } else {
            self.partial.extend_from_slice(&chunk[self.start..next]);
            self.partial.split().freeze()
        };
        self.start = next;
        self.line_start = 0;
        if size > self.max {
            self.reset_block();
            return Frame::Oversized(raw);
        }
        if let Some(r) = self.id_valid.take() {
            self.last_event_id = raw.slice(r);
        }
        if let Some(n) = self.retry {
            self.reconnection_time = Some(n);
        }
        let data = match std::mem::replace(&mut self.data, Data::None) {
            Data::None => None,
            Data::One(r) => Some(DataRepr::Slice(r)),
            Data::Many => Some(DataRepr::Joined(self.scratch.split().freeze())),
        };
        let event = self.event.take();
        let id = self.id.take();
        let retry = self.retry.take();
        match data {
            None => Frame::Skipped(raw),
            Some(data) => Frame::Event(Event {
                raw,
                data,
                event,
                id,
                retry,
                last_event_id: self.last_event_id.clone(),
            }),
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

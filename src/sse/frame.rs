//! What the parser hands out: [`Event`] (an owned event), [`Frame`] (an
//! owned frame of any kind) and [`FrameRef`] (a frame lent by the parser
//! until its next call), with the internal locations a frame is built from.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use bytes::Bytes;

/// One dispatched event: its exact raw bytes and its parsed fields.
///
/// Field accessors return slices of [`Event::raw`] when the value is
/// contiguous there; multi-line `data` is joined with LF into a separate
/// buffer.
#[derive(Clone, PartialEq, Eq)]
pub struct Event {
    pub(super) raw: Bytes,
    pub(super) data: DataRepr,
    pub(super) event: Option<Range<usize>>,
    pub(super) id: Option<Range<usize>>,
    pub(super) retry: Option<u64>,
    pub(super) last_event_id: Bytes,
}

#[derive(Clone, PartialEq, Eq)]
pub(super) enum DataRepr {
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

/// A piece of the input handed out by [`Parser::next_frame`](super::Parser::next_frame).
///
/// Every input byte belongs to exactly one frame (or to the tail returned by
/// [`Parser::finish`](super::Parser::finish)); concatenating the raw bytes of all frames in order
/// gives back the input. A proxy forwards [`Frame::raw`] for every frame it
/// does not change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A dispatched event.
    Event(Event),
    /// A complete block that dispatched nothing: only comments, blank lines,
    /// `event`/`id`/`retry`/unknown fields without `data`.
    Skipped(Bytes),
    /// Part of a block larger than [`Config::max_event_size`](super::Config::max_event_size): forwarded
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
pub(super) enum Data {
    None,
    One(Range<usize>),
    /// Several lines, joined in `State::scratch`.
    Many,
}

/// What kind of frame [`Parser::next_frame_ref`](super::Parser::next_frame_ref) found.
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
pub(super) enum Loc {
    /// `cur[start..end]`.
    Cur(usize, usize),
    /// The gathered frame in `State::partial` (its block spanned pieces).
    Owned,
}

/// A borrowed view of the next frame ([`Parser::next_frame_ref`](super::Parser::next_frame_ref)): the same
/// information as a [`Frame`], without creating any `Bytes` (no reference
/// count is touched). Valid until the parser is used again.
#[derive(Clone, Debug)]
pub struct FrameRef<'a> {
    pub(super) kind: FrameKind,
    pub(super) raw: &'a [u8],
    pub(super) data: &'a [u8],
    pub(super) data_range: Option<Range<usize>>,
    pub(super) event: Option<Range<usize>>,
    pub(super) id: Option<Range<usize>>,
    pub(super) retry: Option<u64>,
    pub(super) last_event_id: &'a Bytes,
    /// Where the raw bytes live: the input piece (with the offset), or the
    /// parser's gathering buffer.
    pub(super) src: Src<'a>,
    pub(super) joined: &'a Bytes,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Src<'a> {
    Piece(&'a Bytes, usize),
    Gathered,
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
            Src::Gathered => None,
        }
    }

    /// The raw bytes as `Bytes`: a slice of the input piece (no copy), or,
    /// for a frame gathered across pieces ([`piece`](Self::piece) is
    /// `None`), a copy of them: the parser lends those from its gathering
    /// buffer, which it reuses. [`Parser::take_gathered`](super::Parser::take_gathered)
    /// moves them out without a copy once the view is dropped.
    #[must_use]
    pub fn raw_bytes(&self) -> Bytes {
        match self.src {
            Src::Piece(p, at) => p.slice(at..at + self.raw.len()),
            Src::Gathered => Bytes::copy_from_slice(self.raw),
        }
    }

    /// The owned [`Frame`] for this view (what
    /// [`Parser::next_frame`](super::Parser::next_frame) would have
    /// returned; its raw bytes as [`raw_bytes`](Self::raw_bytes) makes them).
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

//! The quick layers of the state machine (see [`state`](super::state)):
//! whole common events at a clean block start (`quick`), comment blocks
//! (`quick_comment`), and the continuation of a `data` line left open at
//! the end of a piece (`continue_open` / `continue_data`). Each either
//! hands out its frame or leaves the state exactly where the general loop
//! would be after the same bytes.

use std::ops::Range;

use super::frame::{Data, FrameKind, Loc};
use super::line_end::find_line_end;
use super::state::{Cont, Found, State};

/// An event found by [`State::quick`], lying whole in the current piece
/// `cur`: its bytes are lent as found (slices of `cur` the search already
/// bounds, so handing them out checks no index again).
#[derive(Clone, Debug)]
pub(super) struct Quick<'c> {
    /// Where the event starts in `cur`.
    pub(super) start: usize,
    /// The event's raw bytes, `cur[start..][..raw.len()]`.
    pub(super) raw: &'c [u8],
    /// The data, `raw[data_range]`.
    pub(super) data: &'c [u8],
    /// The data's range in the raw bytes.
    pub(super) data_range: Range<usize>,
    /// The `event` line's value's range in the raw bytes.
    pub(super) event: Option<Range<usize>>,
}

impl Quick<'_> {
    /// The same event as a [`Found`].
    #[inline]
    pub(super) fn found(self) -> Found {
        Found {
            kind: FrameKind::Event,
            raw: Loc::Cur(self.start, self.start + self.raw.len()),
            data: Some(self.data_range),
            event: self.event,
            id: None,
            retry: None,
        }
    }
}

impl State {
    /// Fast path for the common blocks (`data: <value>`, or an `event:`
    /// line then a `data:` line, then a blank line), at a block start with
    /// nothing held: the event the general loop would dispatch, without its
    /// per-line bookkeeping. When the block turns out to be anything else,
    /// the lines already scanned are recorded exactly as the general loop
    /// would have processed them (so no byte is scanned twice) and `None`
    /// is returned: the general loop goes on from there.
    #[inline(always)]
    pub(super) fn quick<'c>(&mut self, chunk: &'c [u8]) -> Option<Quick<'c>> {
        if self.quick_closed() {
            return None;
        }
        self.quick_open(chunk)
    }

    /// Whether [`quick`](Self::quick) is closed: not at a block start with
    /// nothing held or pending.
    #[inline(always)]
    pub(super) fn quick_closed(&self) -> bool {
        // (`line_start` is 0 whenever this fails: any line consumed moves
        // `pos` past `start` or into `partial`. One test of the two, not
        // two branches.)
        (self.pos ^ self.start) | usize::from(self.odd_bits()) != 0
    }

    /// [`quick`](Self::quick) once [`quick_closed`](Self::quick_closed)
    /// said no.
    #[inline(always)]
    pub(super) fn quick_open<'c>(&mut self, chunk: &'c [u8]) -> Option<Quick<'c>> {
        // (The last gathered frame, if any, is let go of by the next call
        // into the general path, before anything is gathered again.)
        debug_assert!(!self.quick_closed());
        debug_assert_eq!(self.line_start, 0);
        let rest = chunk.get(self.pos..)?;
        // (Separate calls with the offsets constant: they fold, and the
        // usual `data: ` is one compare.)
        if rest.starts_with(b"data: ") {
            return self.quick_data(chunk, rest, 0, 6, None);
        }
        if rest.starts_with(b"data:") {
            return self.quick_data(chunk, rest, 0, 5, None);
        }
        // An `event` line first (the Anthropic shape). Offsets are
        // block-relative: the block starts at `start` and nothing is held.
        let v = if rest.starts_with(b"event: ") {
            7
        } else if rest.starts_with(b"event:") {
            6
        } else {
            return None;
        };
        let Some(i) = find_line_end(&rest[v..]) else {
            self.pos = chunk.len();
            return None;
        };
        let t = v + i;
        let at = t + self.terminator_len(rest, t);
        let line = &rest[at..];
        let value = if line.starts_with(b"data: ") {
            at + 6
        } else if line.starts_with(b"data:") {
            at + 5
        } else {
            self.commit(at, Some(v..t), Data::None);
            return None;
        };
        self.quick_data(chunk, rest, at, value, Some(v..t))
    }

    /// [`quick`](Self::quick) from the `data:` line starting at `at` in
    /// `rest` (the current piece from the block start on), its value at
    /// `v`, after the block's `event` line (`event`, its value's range) if
    /// any.
    #[inline(always)]
    fn quick_data<'c>(
        &mut self,
        chunk: &[u8],
        rest: &'c [u8],
        at: usize,
        v: usize,
        event: Option<Range<usize>>,
    ) -> Option<Quick<'c>> {
        let start = self.pos;
        let line = &rest[v..];
        let Some(i) = find_line_end(line) else {
            if at == 0 && event.is_none() {
                // (The `data` line first: nothing to record, the block
                // start's state is the general loop's before its first line.)
                debug_assert!(self.line_start == 0 && self.event.is_none());
                debug_assert!(matches!(self.data, Data::None));
            } else {
                self.commit(at, event, Data::None);
            }
            if at + 5 < rest.len() {
                // Whether the value starts with a space is known.
                self.open_data = Some(v);
            }
            self.pos = chunk.len();
            if rest.len() <= self.max {
                // The block goes on in the next piece: its bytes so far
                // are gathered now (what the end of the piece would do).
                // (A gathered frame still held is let go of when the
                // buffer needs room, or when the next one replaces it.)
                self.gather(rest);
                self.start = chunk.len();
                // Cut right after `data:`: the next piece tells whether a
                // space follows.
                self.open_prefix = at + 5 == rest.len();
            }
            return None;
        };
        let t = v + i;
        // A blank line next (LF LF, the usual shape, tested first), and the
        // block within the limit: its size is its lines up to the blank one.
        let end = if line.get(i..).is_some_and(|e| e.starts_with(b"\n\n")) && t < self.max {
            t + 2
        } else {
            let next = t + self.terminator_len(rest, t);
            if !matches!(rest.get(next), Some(b'\n' | b'\r')) || next > self.max {
                self.commit(next, event, Data::One(v..t));
                return None;
            }
            next + self.terminator_len(rest, next)
        };
        let (raw, data) = (rest.get(..end)?, line.get(..i)?);
        self.pos = start + end;
        self.start = self.pos;
        Some(Quick {
            start,
            raw,
            data,
            data_range: v..t,
            event,
        })
    }

    /// A comment line at a block start with nothing held (`: keep-alive`,
    /// `: OPENROUTER PROCESSING`): when a blank line follows within the
    /// limit, the block is handed out as skipped without the general
    /// loop's per-line steps. Otherwise the line is consumed exactly as the
    /// general loop would (a comment changes nothing) and `None` is
    /// returned for it to go on; `None` too at the end of the piece.
    #[inline(never)]
    pub(super) fn quick_comment(&mut self, chunk: &[u8]) -> Option<Found> {
        let start = self.start;
        let Some(i) = find_line_end(&chunk[start..]) else {
            self.pos = chunk.len();
            return None;
        };
        let t = start + i;
        let next = t + self.terminator_len(chunk, t);
        self.pos = next;
        if matches!(chunk.get(next), Some(b'\n' | b'\r')) && next - start <= self.max {
            let end = next + self.terminator_len(chunk, next);
            self.pos = end;
            self.start = end;
            return Some(Found::plain(FrameKind::Skipped, Loc::Cur(start, end)));
        }
        self.line_start = next - start;
        None
    }

    /// [`quick`](Self::quick) gives up after processing the block's lines
    /// up to `next` (block-relative): the state the general loop would have
    /// reached.
    #[inline]
    fn commit(&mut self, next: usize, event: Option<Range<usize>>, data: Data) {
        self.pos = self.start + next;
        self.line_start = next;
        self.event = event;
        self.data = data;
    }

    /// Goes on with the `data` line that [`quick`](Self::quick) left open
    /// at the end of the previous piece (its value starting at `v`,
    /// block-relative): when the line and then a blank line end in this
    /// piece, the event, gathered with one copy (`Err`: an oversized
    /// frame, the line over the limit). Otherwise the line is
    /// processed (or left open) exactly as the general loop would, and
    /// `None` is returned.
    #[inline(always)]
    pub(super) fn continue_data(&mut self, chunk: &[u8], v: usize) -> Option<Result<Cont, Found>> {
        let rest = &chunk[self.pos..];
        let Some(i) = find_line_end(rest) else {
            self.pos = chunk.len();
            self.open_data = Some(v);
            return None;
        };
        let t = self.pos + i;
        let line_end = self.rel(t);
        // A blank line next (LF LF, the usual shape, tested first) and the
        // line within the limit.
        if line_end < self.max && rest.get(i..).is_some_and(|e| e.starts_with(b"\n\n")) {
            return Some(Ok(self.gathered_event(chunk, t + 2, v..line_end)));
        }
        let next = t + self.terminator_len(chunk, t);
        self.pos = next;
        if self.rel(next) > self.max {
            return Some(Err(self.over_limit()));
        }
        if !matches!(chunk.get(next), Some(b'\n' | b'\r')) {
            self.gather(&chunk[self.start..next]);
            self.start = next;
            self.line_start = self.rel(next);
            self.data = Data::One(v..line_end);
            return None;
        }
        let end = next + self.terminator_len(chunk, next);
        Some(Ok(self.gathered_event(chunk, end, v..line_end)))
    }

    /// [`continue_data`](Self::continue_data) found the blank line ending
    /// at `end` in the piece: the event (its data at `data` in it),
    /// gathered.
    #[inline(always)]
    fn gathered_event(&mut self, chunk: &[u8], end: usize, data: Range<usize>) -> Cont {
        self.gather(&chunk[self.start..end]);
        self.note_lent();
        self.pos = end;
        self.start = end;
        self.line_start = 0;
        Cont {
            data,
            event: self.event.take(),
        }
    }

    /// At the start of a piece, a `data` line that [`quick`](Self::quick)
    /// left open, continued ([`continue_data`](Self::continue_data)): the
    /// event, when it ends in this piece (`Err`: the frame the line's limit
    /// check produced). The common step after a quick
    /// event spanning two pieces, taken before [`advance`](Self::advance)
    /// (which goes on where this leaves off).
    #[inline(always)]
    pub(super) fn continue_open(&mut self, cur: &[u8]) -> Option<Result<Cont, Found>> {
        if self.pos >= cur.len() {
            return None;
        }
        // (Set only by `quick`/`continue_data`, so no CR is pending, the
        // BOM is decided and nothing is discarded. The last gathered frame
        // may still be held: the one completed here replaces it.)
        let v = match self.open_data.take() {
            Some(v) => v,
            None if self.open_prefix => self.prefix_value(cur)?,
            None => return None,
        };
        self.continue_data(cur, v)
    }

    /// [`continue_open`](Self::continue_open) of a line cut within
    /// `data: ` ([`open_prefix`](State::open_prefix)): the value's start
    /// (block-relative) when the held bytes and the piece's first ones
    /// make `data:` and the byte after it; `None` otherwise (the general
    /// loop goes on with the line).
    #[inline(never)]
    fn prefix_value(&mut self, cur: &[u8]) -> Option<usize> {
        self.open_prefix = false;
        let held = self.partial.get(self.line_start..)?;
        let k = held.len().min(6);
        let mut line = [0u8; 6];
        line[..k].copy_from_slice(&held[..k]);
        line[k..].copy_from_slice(cur.get(self.pos..self.pos + (6 - k))?);
        let space = usize::from(line[5] == b' ');
        line.starts_with(b"data:")
            .then_some(self.line_start + 5 + space)
    }
}

//! The parser's state machine: lines, fields and blocks found in the
//! current input piece, gathered across pieces when a block spans two,
//! discarded past the size limit. [`Parser`](super::Parser) wraps it with
//! the current piece and turns what it finds into frames.
//!
//! Two layers, one behaviour:
//!
//! ```text
//!   quick      block start, nothing held (`pos == start`, `odd` clear:
//!              no CR pending, not discarding, BOM decided; `partial`
//!              empty): `data:` line (or `event:` then `data:`) then a
//!              blank line, whole in the piece → the event, one line-end
//!              search, no per-line bookkeeping (`data: `, the usual
//!              prefix, with its value offset constant). Anything else:
//!              the lines it scanned are recorded as the general loop would
//!              have processed them (`commit`), and the general loop goes on;
//!              a `data` line running to the end of the piece is left open
//!              and the block's bytes so far gathered (`gather`).
//!   continue   the next piece starts with that open line: it is finished
//!              (`continue_open` / `continue_data`, one search, one copy)
//!              and the event handed out from the gathered bytes, before
//!              and without `advance`. The general loop leaves a block's
//!              first `data` line open the same way at the end of a piece
//!              (`open_line`), and a line cut within `data: ` goes on once
//!              the next piece's first bytes complete the prefix
//!              (`open_prefix`).
//!   advance    a piece scanned to its end with nothing queued has its rest
//!              gathered and stays as the used-up `cur` (`gather_rest`)
//!              until the next piece replaces it.
//!   comment    in `advance` (and `scan`), a `:` line then a blank line at
//!              a clean block start (`quick_comment`): skipped in one step; a comment
//!              line followed by more lines is consumed as the general
//!              loop would (it changes nothing) and the loop goes on.
//!   general    `advance_general` / `scan`: every line, every field, CR and
//!              split CRLF, BOM, `id`/`retry`, comments, the size limit and
//!              discard mode (the per-line field work and the dispatch at
//!              the blank line are in `fields.rs`).
//! ```
//!
//! The current piece `cur` is only ever read here, never replaced: a piece
//! scanned to its end stays as the used-up `cur` (`start` at its end), and
//! when the general loop goes on into queued pieces it scans them where
//! they are, the queue's front being the current piece ([`STALE`]) until
//! the parser moves it into `cur`'s place at its next call. So
//! [`Parser::next_frame_ref`](super::Parser::next_frame_ref) can lend the
//! quick layer's event straight from the slices its search bounded, and
//! still fall through to the general loop (a conditional borrow of `cur`
//! that a replacement of `cur` would conflict with).
//!
//! Gathering (`gather`, in [`gather`](super::gather)): a block's first
//! bytes reserve `GATHER_FIRST` (1000) in an empty `partial`, which
//! doubles up to `GATHER_MIN` (4000) as blocks need. A gathered block,
//! once complete, stays there as the frame ([`LENT`]): `next_frame_ref`
//! lends it as it is, and the parser's next step empties the buffer for
//! the next block (no reference count, no allocation). Only a consumer
//! that wants it as `Bytes` (`next_frame`, `Parser::take_gathered`) has it
//! split off, and then the buffer is reclaimed in place once per several
//! spanning blocks when the consumer drops those frames. A longer block
//! moves to a buffer of its own (at least `LONG_MIN`, 16 KiB) and grows
//! through `BytesMut::reserve` (at least doubling); the buffer keeps that
//! room (at most about twice [`Config::max_event_size`](super::Config::max_event_size)).
//!
//! Every byte is searched once: where the quick layers give up, the state
//! they leave is exactly the general loop's after the same bytes. The unit
//! tests `quick_path_matches_the_general_path_under_every_split` and
//! `comment_blocks_match_the_general_path_under_every_split`
//! (`tests/sse_api.rs`), the reference comparisons in `tests/sse_*.rs` and the fuzz targets `sse_*`
//! hold the layers to that.

use std::collections::VecDeque;
use std::ops::Range;

use bytes::{Bytes, BytesMut};

use super::frame::{Data, FrameKind, Loc};
use super::line_end::find_line_end;

/// The UTF-8 byte order mark, skipped once at the very start.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// [`State::odd`]: the last byte consumed was a CR line end at the end of
/// a piece (its LF may start the next one).
const AFTER_CR: u8 = 1;
/// [`State::odd`]: an oversized block is being forwarded until a blank line.
const DISCARD: u8 = 2;
/// [`State::odd`]: the BOM is not decided yet.
const BOM_PENDING: u8 = 4;
/// [`State::odd`]: the current block has bytes held in `partial` (set and
/// cleared with every change of its emptiness, so that the quick layers'
/// entry test reads one byte).
const HELD: u8 = 8;
/// [`State::odd`]: `partial` holds the last gathered frame, lent as it is
/// (not a block's bytes; [`HELD`] is clear): let go of
/// ([`State::release_owned`]) before anything else reads `partial`, or
/// split off as `Bytes` when the consumer asks for it.
const LENT: u8 = 32;
/// [`State::odd`]: the piece being scanned is the front of `queue`, not
/// `cur`: the general loop ran past the end of `cur` (left as it was,
/// used up) within one call that may lend `cur` (see
/// [`State::advance`]). The parser puts that piece in `cur`'s place
/// before anything else reads `pos` or `start`.
const STALE: u8 = 16;

/// A frame found by the state machine, before any `Bytes` is made for it.
#[derive(Clone, Debug)]
pub(super) struct Found {
    pub(super) kind: FrameKind,
    pub(super) raw: Loc,
    /// For events: the data's range in the raw bytes, `None` when joined
    /// into `State::joined`.
    pub(super) data: Option<Range<usize>>,
    pub(super) event: Option<Range<usize>>,
    pub(super) id: Option<Range<usize>>,
    pub(super) retry: Option<u64>,
}

/// An event completed by [`State::continue_data`]: its raw bytes are the
/// gathered frame in `State::partial`.
#[derive(Clone, Debug)]
pub(super) struct Cont {
    /// The data's range in the raw bytes.
    pub(super) data: Range<usize>,
    /// The `event` line's value's range in the raw bytes.
    pub(super) event: Option<Range<usize>>,
}

impl Cont {
    /// The same event as a [`Found`].
    #[inline]
    pub(super) fn found(self) -> Found {
        Found {
            kind: FrameKind::Event,
            raw: Loc::Owned,
            data: Some(self.data),
            event: self.event,
            id: None,
            retry: None,
        }
    }
}

impl Found {
    #[inline]
    pub(super) fn plain(kind: FrameKind, raw: Loc) -> Self {
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

/// Everything but the current piece, so the scanner can read the piece
/// while it updates its state.
pub(super) struct State {
    pub(super) max: usize,
    /// Pieces fed after `cur`.
    pub(super) queue: VecDeque<Bytes>,
    /// Scan position in `cur`.
    pub(super) pos: usize,
    /// Where the not-yet-gathered part of the current block starts in
    /// `cur`. Block-relative offset of `cur[i]` is
    /// `partial.len() + i - start`.
    pub(super) start: usize,
    /// The current block's bytes from earlier pieces.
    pub(super) partial: BytesMut,
    /// Block-relative start of the current line.
    pub(super) line_start: usize,
    /// The conditions that keep the quick layers off, one bit each
    /// ([`AFTER_CR`], [`DISCARD`], [`BOM_PENDING`], [`HELD`]), so that one
    /// test of this byte says that none holds.
    odd: u8,
    /// BOM bytes matched so far, while [`BOM_PENDING`] is set.
    bom_k: u8,
    /// In discard mode: no byte since the last line end.
    pub(super) discard_at_line_start: bool,
    /// The held bytes end in an unterminated `data` line whose value starts
    /// here (block-relative), the block so far being what
    /// [`State::quick`] reads: the next piece goes on with it in
    /// [`State::continue_data`], not the general loop.
    pub(super) open_data: Option<usize>,
    /// The held bytes end in the start of what may be the block's first
    /// `data` line, cut within `data: ` (a proper prefix of `data:`):
    /// the next piece's first bytes tell, and [`State::continue_open`] goes
    /// on with the line as with [`open_data`](Self::open_data) when they
    /// complete it (else the general loop does).
    pub(super) open_prefix: bool,
    pub(super) data: Data,
    pub(super) scratch: BytesMut,
    pub(super) event: Option<Range<usize>>,
    pub(super) id: Option<Range<usize>>,
    pub(super) id_valid: Option<Range<usize>>,
    pub(super) retry: Option<u64>,
    pub(super) last_event_id: Bytes,
    pub(super) initial_last_event_id: Bytes,
    pub(super) reconnection_time: Option<u64>,
    /// Joined data of the last event when it had several `data` lines.
    pub(super) joined: Bytes,
}

impl State {
    pub(super) fn new(max: usize) -> Self {
        State {
            max,
            queue: VecDeque::new(),
            pos: 0,
            start: 0,
            partial: BytesMut::new(),
            line_start: 0,
            odd: BOM_PENDING,
            bom_k: 0,
            discard_at_line_start: true,
            open_data: None,
            open_prefix: false,
            data: Data::None,
            scratch: BytesMut::new(),
            event: None,
            id: None,
            id_valid: None,
            retry: None,
            last_event_id: Bytes::new(),
            initial_last_event_id: Bytes::new(),
            reconnection_time: None,
            joined: Bytes::new(),
        }
    }

    /// The last byte consumed was a CR line end at the end of a piece.
    #[inline]
    pub(super) fn after_cr(&self) -> bool {
        self.odd & AFTER_CR != 0
    }

    /// Discard mode: an oversized block is forwarded until a blank line.
    #[inline]
    pub(super) fn discard(&self) -> bool {
        self.odd & DISCARD != 0
    }

    /// BOM bytes matched so far; `None` once decided.
    #[inline]
    pub(super) fn bom(&self) -> Option<u8> {
        (self.odd & BOM_PENDING != 0).then_some(self.bom_k)
    }

    /// Whether a CR is pending, a block is discarded or the BOM is not
    /// decided: one test for all three.
    #[inline(always)]
    pub(super) fn odd(&self) -> bool {
        self.odd & !HELD != 0
    }

    /// [`odd`](Self::odd), or bytes of the current block are held: one
    /// test for what keeps a block start from being clean.
    #[inline(always)]
    pub(super) fn unclean(&self) -> bool {
        self.check_held();
        self.odd != 0
    }

    /// The [`odd`](Self::odd) byte itself ([`unclean`](Self::unclean)
    /// when not 0).
    #[inline(always)]
    pub(super) fn odd_bits(&self) -> u8 {
        self.check_held();
        self.odd
    }

    /// [`HELD`] says whether `partial` holds block bytes (not a lent frame).
    #[inline(always)]
    fn check_held(&self) {
        debug_assert_eq!(
            self.odd & HELD != 0,
            !self.partial.is_empty() && self.odd & LENT == 0
        );
    }

    /// The block gathered in `partial` is complete: it is now the last
    /// gathered frame ([`LENT`]), lent from `partial` as it is.
    #[inline(always)]
    pub(super) fn note_lent(&mut self) {
        self.odd = (self.odd & !HELD) | LENT;
    }

    /// Whether `partial` holds the last gathered frame ([`LENT`]).
    #[inline(always)]
    pub(super) fn lent(&self) -> bool {
        self.odd & LENT != 0
    }

    /// The last gathered frame as `Bytes` (split off the gathering buffer,
    /// no copy), when `partial` holds it; empty otherwise.
    #[inline]
    pub(super) fn take_lent(&mut self) -> Bytes {
        if !self.lent() {
            return Bytes::new();
        }
        self.odd &= !LENT;
        self.partial.split().freeze()
    }

    /// Bytes were added to `partial`.
    #[inline(always)]
    pub(super) fn note_held(&mut self) {
        self.odd |= HELD;
    }

    #[inline]
    fn set(&mut self, bit: u8, on: bool) {
        if on {
            self.odd |= bit;
        } else {
            self.odd &= !bit;
        }
    }

    /// The piece being scanned is `queue`'s front ([`STALE`]).
    #[inline(always)]
    pub(super) fn stale(&self) -> bool {
        self.odd & STALE != 0
    }

    /// `queue`'s front was put in `cur`'s place.
    #[inline]
    pub(super) fn note_fresh(&mut self) {
        self.set(STALE, false);
    }

    /// The current piece (`len` bytes) is used up on a block boundary and
    /// nothing is queued: no frame until the next piece, which
    /// [`Parser::queue_piece`](super::Parser::queue_piece) puts in its
    /// place (the common end of a piece per event, without a trip through
    /// the state machine). (The last gathered frame, if still held, is let
    /// go of when the gathering buffer needs room or the next gathered
    /// frame replaces it.)
    #[inline(always)]
    pub(super) fn used_up(&self, len: usize) -> bool {
        self.start >= len && self.queue.is_empty()
    }

    #[inline]
    fn set_after_cr(&mut self, on: bool) {
        self.set(AFTER_CR, on);
    }

    #[inline]
    fn set_discard(&mut self, on: bool) {
        self.set(DISCARD, on);
    }

    #[inline]
    fn set_bom(&mut self, k: Option<u8>) {
        self.set(BOM_PENDING, k.is_some());
        self.bom_k = k.unwrap_or(0);
    }

    /// Block-relative offset of `cur[i]`.
    #[inline]
    pub(super) fn rel(&self, i: usize) -> usize {
        self.partial.len() + i - self.start
    }

    /// At a block start at `pos` in a current piece of `len` bytes with
    /// a rest, nothing held or pending and no gathered frame to let go of:
    /// what [`Parser::clean_rest`](super::Parser::clean_rest) tests first.
    #[inline(always)]
    pub(super) fn clean_at(&self, len: usize) -> bool {
        self.pos < len
            && self.pos == self.start
            && self.line_start == 0
            && !self.unclean()
            && self.joined.is_empty()
    }

    /// Lets go of the last gathered frame (emptying the gathering buffer
    /// for the next block) and of the last joined data.
    #[inline]
    pub(super) fn release_owned(&mut self) {
        if self.lent() {
            self.release_lent();
        }
        if !self.joined.is_empty() {
            self.joined = Bytes::new();
        }
    }

    /// [`release_owned`](Self::release_owned) of the last gathered frame:
    /// the buffer keeps its room for the next block.
    #[cold]
    #[inline(never)]
    pub(super) fn release_lent(&mut self) {
        self.odd &= !LENT;
        self.partial.clear();
    }

    /// With the quick layer closed: when only because the last gathered
    /// frame is lent, lets go of it and says whether the quick layer is
    /// open now.
    #[inline(always)]
    pub(super) fn reopen(&mut self) -> bool {
        if !self.lent() {
            return false;
        }
        self.release_lent();
        !self.quick_closed()
    }

    /// Finds the next frame, moving to queued pieces as `cur` runs out.
    /// Called after [`continue_open`](Self::continue_open), so a `data`
    /// line left open is only still open here at the end of `cur`.
    ///
    /// The common step between quick-path events comes first, without the
    /// general loop: a piece scanned to its end mid-block with nothing
    /// queued, its rest gathered.
    ///
    /// `cur` is read, never replaced (so that the parser may lend it while
    /// this runs): past its end the queued pieces are scanned where they
    /// are, the front one being the current piece ([`STALE`]) until the
    /// parser moves it into `cur`'s place.
    #[inline(always)]
    pub(super) fn advance(&mut self, cur: &Bytes) -> Option<Found> {
        self.release_owned();
        if self.pos >= cur.len() && self.queue.is_empty() && self.gather_rest(cur) {
            return None;
        }
        // A comment block at a clean block start (a keep-alive): what the
        // general loop's first step would find, without the trip there.
        if !self.quick_closed() && cur.get(self.pos) == Some(&b':') {
            debug_assert!(self.open_data.is_none() && self.partial.is_empty());
            if let Some(f) = self.quick_comment(cur) {
                return Some(f);
            }
        }
        self.advance_general(cur)
    }

    /// The piece is scanned to its end, mid-block or on a block boundary,
    /// and nothing is queued: gathers its rest, leaving it used up (`start`
    /// at its end) for the next piece to replace. `false`, having done
    /// nothing, in discard mode or when the block would go over the limit
    /// (the general loop hands those out).
    #[inline]
    fn gather_rest(&mut self, cur: &[u8]) -> bool {
        let len = cur.len();
        if self.discard() || self.partial.len() + (len - self.start) > self.max {
            return false;
        }
        if self.start < len {
            self.gather(&cur[self.start..]);
            self.start = len;
        }
        true
    }

    /// [`advance`](Self::advance)'s general loop: `cur` first (unless
    /// the queue's front is already the current piece), then each queued
    /// piece in turn, each used up (its rest gathered) before the next.
    fn advance_general(&mut self, cur: &Bytes) -> Option<Found> {
        if !self.stale() {
            if let Some(f) = self.advance_in(cur) {
                return Some(f);
            }
            if self.queue.is_empty() {
                return None;
            }
            self.set(STALE, true);
            self.pos = 0;
            self.start = 0;
        }
        loop {
            // (Taken out while it is scanned, put back after.)
            let piece = std::mem::take(self.queue.front_mut()?);
            let f = self.advance_in(&piece);
            if let Some(front) = self.queue.front_mut() {
                *front = piece;
            }
            if f.is_some() || self.queue.len() <= 1 {
                return f;
            }
            self.queue.pop_front();
            self.pos = 0;
            self.start = 0;
        }
    }

    /// The next frame in `piece` (the current piece) from `pos` on, or
    /// `None` with the piece used up: its rest gathered, `pos` and
    /// `start` at its end.
    fn advance_in(&mut self, piece: &Bytes) -> Option<Found> {
        loop {
            if self.pos >= piece.len() {
                if self.start < piece.len() {
                    return self.end_of_piece(piece);
                }
                return None;
            }
            if let Some(f) = self.scan(piece) {
                return Some(f);
            }
        }
    }

    /// WHATWG: one leading U+FEFF is skipped. `c` is the next byte, `k`
    /// the number of BOM bytes matched so far; matched bytes stay in the
    /// first block's raw bytes.
    #[inline]
    fn bom_step(&mut self, c: u8, k: u8) {
        let k = usize::from(k);
        if c == BOM[k] {
            self.pos += 1;
            if k + 1 == BOM.len() {
                self.set_bom(None);
                self.line_start = BOM.len();
            } else {
                self.set_bom(Some(k as u8 + 1));
            }
        } else {
            self.set_bom(None);
        }
    }

    /// Scans `chunk` (the current piece) from `pos` until a frame is
    /// complete or the piece is exhausted.
    pub(super) fn scan(&mut self, chunk: &Bytes) -> Option<Found> {
        let len = chunk.len();
        while self.pos < len {
            if self.after_cr() {
                self.set_after_cr(false);
                if chunk[self.pos] == b'\n' {
                    self.pos += 1;
                    if !self.discard() && self.rel(self.pos - 1) == 0 {
                        // The CR ended the previous frame.
                        self.start = self.pos;
                        return Some(Found::plain(
                            FrameKind::LineEnd,
                            Loc::Cur(self.pos - 1, self.pos),
                        ));
                    }
                    if !self.discard() {
                        self.line_start += 1;
                    }
                    continue;
                }
            }
            if let Some(k) = self.bom() {
                self.bom_step(chunk[self.pos], k);
                continue;
            }
            if self.discard() {
                if let Some(f) = self.discard_step(chunk) {
                    return Some(f);
                }
                continue;
            }
            // (A prefix `continue_open` did not go on with is the general
            // loop's: it finishes the line.)
            self.open_prefix = false;
            if let Some(v) = self.open_data.take() {
                if let Some(f) = self.continue_data(chunk, v) {
                    return Some(f.map_or_else(|f| f, Cont::found));
                }
                continue;
            }
            if let Some(q) = self.quick(chunk) {
                return Some(q.found());
            }
            if self.pos == self.start
                && self.partial.is_empty()
                && chunk.get(self.pos) == Some(&b':')
            {
                match self.quick_comment(chunk) {
                    Some(f) => return Some(f),
                    None => continue,
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
                    return Some(self.over_limit());
                }
                self.gather(&chunk[self.start..next]);
                self.start = next;
            }
            let line = self.line_start..line_end;
            self.line_start = self.rel(next);
            self.process_line(chunk, line);
        }
        None
    }

    /// The block held across pieces is over the limit before its end, at
    /// a line end: hand out what is held, then forward the rest as it
    /// comes.
    pub(super) fn over_limit(&mut self) -> Found {
        self.set_discard(true);
        self.discard_at_line_start = true;
        self.reset_block();
        self.note_lent();
        Found::plain(FrameKind::Oversized, Loc::Owned)
    }

    /// Length of the line end at `chunk[t]` (a CR or LF); notes a CR at the
    /// end of the piece, whose LF may come with the next one.
    #[inline]
    pub(super) fn terminator_len(&mut self, chunk: &[u8], t: usize) -> usize {
        if chunk[t] == b'\r' {
            match chunk.get(t + 1) {
                Some(b'\n') => 2,
                Some(_) => 1,
                None => {
                    self.set_after_cr(true);
                    1
                }
            }
        } else {
            1
        }
    }

    /// The current piece is exhausted with bytes after `start`: gather the
    /// current block's bytes from it, or hand them out when the block is
    /// too large. Leaves the piece used up (`start` at its end), or `start`
    /// where the rest of an oversized block to hand out next begins.
    pub(super) fn end_of_piece(&mut self, cur: &[u8]) -> Option<Found> {
        let len = cur.len();
        let start = self.start;
        if self.discard() {
            // Hand out the piece's rest.
            self.start = len;
            return Some(Found::plain(FrameKind::Oversized, Loc::Cur(start, len)));
        }
        if self.partial.len() + (len - start) > self.max {
            // Too large to interpret: forward what we have and discard the
            // rest of the block.
            self.set_discard(true);
            self.set_bom(None);
            self.discard_at_line_start = self.partial.len() + (len - start) == self.line_start;
            self.reset_block();
            if self.partial.is_empty() {
                self.start = len;
                return Some(Found::plain(FrameKind::Oversized, Loc::Cur(start, len)));
            }
            // The held bytes now, the piece's rest on the next call.
            self.note_lent();
            return Some(Found::plain(FrameKind::Oversized, Loc::Owned));
        }
        self.gather(&cur[start..len]);
        self.start = len;
        self.open_line();
        None
    }

    /// The piece ended in the middle of a line, its bytes gathered: when
    /// that line is the block's first `data` line (and no `id` or `retry`
    /// came before it), the next piece goes on with it as with a `data`
    /// line the quick layer left open ([`continue_data`](Self::continue_data)),
    /// not through the general loop: right away when whether its value
    /// starts with a space is known ([`open_data`](Self::open_data)), after
    /// a look at the next piece's first bytes when the line is cut within
    /// `data: ` ([`open_prefix`](Self::open_prefix)).
    #[inline]
    pub(super) fn open_line(&mut self) {
        if !matches!(self.data, Data::None) || self.id.is_some() || self.retry.is_some() {
            return;
        }
        let line = &self.partial[self.line_start.min(self.partial.len())..];
        if line.len() > 5 && line.starts_with(b"data:") {
            let space = usize::from(line[5] == b' ');
            self.open_data = Some(self.line_start + 5 + space);
        } else if !line.is_empty() && b"data:".starts_with(line) {
            self.open_prefix = true;
        }
    }

    /// Discard mode: forward bytes until the blank line that ends the
    /// oversized block.
    pub(super) fn discard_step(&mut self, chunk: &[u8]) -> Option<Found> {
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
            self.set_discard(false);
            let f = Found::plain(FrameKind::Oversized, Loc::Cur(self.start, self.pos));
            self.start = self.pos;
            self.line_start = 0;
            return Some(f);
        }
        None
    }
}

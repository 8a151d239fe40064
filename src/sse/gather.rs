//! The gathering buffer (`State::partial`): the bytes of a block that
//! spans input pieces, copied once as the pieces arrive, and how it finds
//! room (see the module docs of [`state`](super::state), "Gathering").

use bytes::BytesMut;

use super::state::State;

/// The room shared by the blocks that span pieces (see [`State::gather`]):
/// a page with its header, under the 4 KiB peak that `tests/sse_alloc.rs`
/// holds the parser to. A block outgrowing it is a long one.
const GATHER_MIN: usize = 4000;

/// The room a block's first gathered bytes reserve in an empty buffer
/// (when they need no more): under 1 KiB, so that glibc serves it from its
/// small bins (a request of 1 KiB or more first consolidates the
/// allocator's fast bins: about 950 instructions on a busy heap, once per
/// stream that gathers). The buffer then doubles up to [`GATHER_MIN`];
/// with the frames let go of, it keeps its room for the next blocks.
const GATHER_FIRST: usize = 1000;

/// The least room of a long block's own buffer (one that outgrew
/// [`GATHER_MIN`]; see [`State::make_room`]), within the event size
/// limit: long blocks (a tool call's arguments, search results) run to
/// tens of KiB, and each doubling on the way there copies the block.
const LONG_MIN: usize = 16 * 1024;

impl State {
    /// Appends `b` to the held block bytes. A block's first bytes in an
    /// empty buffer reserve at least [`GATHER_FIRST`], and the buffer
    /// doubles from there, so that, once the frames split off it are let
    /// go of, it is reclaimed once per several spanning blocks rather than
    /// per block; a block that outgrows [`GATHER_MIN`] gets its own.
    #[inline]
    pub(super) fn gather(&mut self, b: &[u8]) {
        if self.partial.capacity() - self.partial.len() < b.len() {
            self.make_room(b.len());
        }
        self.partial.extend_from_slice(b);
        self.note_held();
    }

    /// [`gather`](Self::gather) when the buffer is short of room for `n`
    /// more bytes: a block's first bytes reserve at least [`GATHER_FIRST`];
    /// `reserve` reclaims the buffer in place when no frame split off it is
    /// still held, and otherwise grows it (at least doubling). A block
    /// leaving the shared room (outgrowing [`GATHER_MIN`]) is a long one
    /// (a whole response, a tool call's arguments): it moves to a buffer
    /// of its own with room for as much again, and at least [`LONG_MIN`]
    /// (both within the size limit), its bytes copied once
    /// (`reserve` would keep and copy along the dead bytes before it, or
    /// first move it within the old buffer), and grows there. The last
    /// gathered frame, if the parser still holds it, is let go of first.
    #[inline(never)]
    fn make_room(&mut self, n: usize) {
        self.release_owned();
        let held = self.partial.len();
        if held == 0 {
            self.partial.reserve(n.max(GATHER_FIRST));
        } else if held <= GATHER_MIN && held + n > GATHER_MIN {
            let need = held + n;
            let mut own = BytesMut::with_capacity(
                need.max(
                    LONG_MIN
                        .max(need.saturating_mul(2))
                        .min(self.max.saturating_add(2)),
                ),
            );
            own.extend_from_slice(&self.partial);
            self.partial = own;
        } else {
            self.partial.reserve(n);
        }
    }
}

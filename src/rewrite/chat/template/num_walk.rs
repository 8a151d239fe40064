//! The straight-line walk of a numbers-then-content template at the
//! numbers' last widths ([`NumWalk`]), built from the template's literal
//! text: a value the template holds and [`nums`](super::nums) reads. A
//! leaf: it knows nothing of the template type.

use crate::json;

/// The low and the high bit of each byte of a word.
const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// The walk of a numbers-then-content template at the numbers' current
/// widths: what [`ChunkTemplate::walk_numbers`](super::ChunkTemplate::walk_numbers)
/// reads, in a few words.
#[derive(Clone, Copy, Debug)]
pub(super) struct NumWalk {
    /// Each number's offset in a matching input (and in `filled`): its
    /// word is the eight bytes from there. (One number: both the same.)
    pub(super) at: [u16; 2],
    /// The word a number's input word must be, checked bytewise by
    /// subtracting `sub` then adding `add` (see [`bad`]): a digit byte
    /// takes 0x30 and 0x76 (the first of several digits 0x31 and 0x77:
    /// `1` to `9`), a literal byte itself and 0x7F.
    pub(super) sub: [u64; 2],
    pub(super) add: [u64; 2],
    /// The content hole's offset in a matching input.
    pub(super) start: u16,
    /// The content hole's choice index.
    pub(super) index: u8,
    /// The literal text's last word, and the mask of the literal text
    /// after the content hole in it (its length `tail_len`, 1 to 8, else
    /// no walk): the word that ends a match, masked, is the tail.
    pub(super) tail: u64,
    pub(super) tail_mask: u64,
    pub(super) tail_len: u8,
}

/// No walk: every word is [`bad`] (adding 0x80 to a byte, or the byte
/// itself, sets its high bit; the lowest byte gets no carry), so every
/// input takes the careful walk.
pub(super) const NO_WALK: NumWalk = NumWalk {
    at: [0; 2],
    sub: [0; 2],
    add: [HI; 2],
    start: 0,
    index: 0,
    tail: 0,
    tail_mask: 0,
    tail_len: 0,
};

/// Nonzero when some byte of `x` is not the one [`NumWalk::sub`] and
/// [`NumWalk::add`] ask for. With `t = x - sub`, a byte is good when `t`
/// is at most its limit (9 for a digit, 8 for a first digit `1` to `9`,
/// 0 for a literal byte; `add` is 0x7F minus the limit): exactly then
/// neither `t` nor `t + add` has its high bit. A borrow or a carry only
/// comes out of a bad byte, so none reaches the lowest bad byte, which is
/// flagged.
#[inline(always)]
pub(super) fn bad(x: u64, sub: u64, add: u64) -> u64 {
    let t = x.wrapping_sub(sub);
    (t.wrapping_add(add) | t) & HI
}

/// The plain integer at `s[at]` read in one word: the word and the
/// number of digits, one to seven without a leading zero (`None` for any
/// other number, or fewer than eight bytes from `at`).
#[inline(always)]
pub(super) fn plain_number(s: &[u8], at: usize) -> Option<(u64, usize)> {
    let w = u64::from_le_bytes(s.get(at..at + 8)?.try_into().ok()?);
    let d = json::leading_digits(w);
    (d.wrapping_sub(1) < 7 && (w as u8 != b'0' || d == 1)).then_some((w, d))
}

/// Puts the first `d` bytes of `w` (a number) over those of `slot`.
#[inline(always)]
pub(super) fn merge(slot: &mut [u8], w: u64, d: usize) {
    let keep = !0u64 << (8 * d);
    let old = u64::from_le_bytes(slot.try_into().unwrap_or([0; 8]));
    slot.copy_from_slice(&((old & keep) | (w & !keep)).to_le_bytes());
}

impl NumWalk {
    /// Whether this is a walk (not [`NO_WALK`], not cleared).
    #[inline(always)]
    pub(super) fn is_set(&self) -> bool {
        self.add[0] != HI
    }

    /// Makes this no walk, in one store: the first number's word is
    /// [`bad`] whatever it is, as in [`NO_WALK`] (a valid walk adds no
    /// byte 0x80).
    #[inline]
    pub(super) fn clear(&mut self) {
        self.add[0] = HI;
    }

    /// The walk for numbers `found` (offset in the literal text, width)
    /// in `filled` (the literal text up to the content hole `head` with
    /// the numbers in their holes), the content hole of choice `index`
    /// ending `literal`'s first `head` bytes: [`NO_WALK`] when a number's
    /// word would reach past the next hole, or the literal text after the
    /// content hole (the tail) is empty or longer than a word.
    pub(super) fn new(
        filled: &[u8],
        found: &[(usize, usize)],
        head: usize,
        index: u8,
        literal: &[u8],
    ) -> NumWalk {
        let len = literal.len().wrapping_sub(head);
        let (Some(&last), 1..=2, 1..=8) = (literal.last_chunk::<8>(), found.len(), len) else {
            return NO_WALK;
        };
        // Each number's offset: its hole's in the literal text, moved by
        // the widths of the numbers before it.
        let (mut ats, mut shift) = ([0; 2], 0);
        for (at, &(end, d)) in ats.iter_mut().zip(found) {
            if !(1..=7).contains(&d) {
                return NO_WALK;
            }
            *at = end + shift;
            shift += d;
        }
        let mut walk = NO_WALK;
        let start = head + shift;
        for (k, &(_, d)) in found.iter().enumerate() {
            let at = ats[k];
            let next = if k + 1 < found.len() {
                ats[k + 1]
            } else {
                start
            };
            let (Some(lit), Ok(at32), true) =
                (filled.get(at..at + 8), u16::try_from(at), at + 8 <= next)
            else {
                return NO_WALK;
            };
            // (Digits in the low `d` bytes, the literal in the others.)
            let digits = !0u64 >> (64 - 8 * d);
            let first = u64::from(d > 1);
            let lit = u64::from_le_bytes(lit.try_into().unwrap_or([0; 8]));
            walk.sub[k] = (((LO * u64::from(b'0')) & digits) + first) | (lit & !digits);
            walk.add[k] = (((LO * 0x76) & digits) + first) | ((LO * 0x7F) & !digits);
            walk.at[k] = at32;
        }
        if found.len() == 1 {
            walk.at[1] = walk.at[0];
            walk.sub[1] = walk.sub[0];
            walk.add[1] = walk.add[0];
        }
        let Ok(start) = u16::try_from(start) else {
            return NO_WALK;
        };
        walk.start = start;
        walk.index = index;
        // (The tail ends the literal text, at least a word long.)
        walk.tail = u64::from_le_bytes(last);
        walk.tail_mask = !0u64 << (8 * (8 - len));
        // (At most eight.)
        walk.tail_len = len as u8;
        walk
    }
}

//! Learning a template ([`ChunkTemplate::learn`]) from a chunk the fast
//! scan read, and refining it on its first match
//! ([`ChunkTemplate::first_match`]): the cold side of the
//! [template learner](super). The walks that match templates are in the
//! parent module.
//!
//! Contract: a template is cut from the bytes it was learned from at the
//! sorted, disjoint hole ranges, and its literal text is those bytes
//! between the holes, so a walk of the same bytes matches with the same
//! holes. A template is `valid` only when building succeeded; one
//! learned with holes other than contents is on probation until its first
//! match, which keeps as holes only the tokens that differ from the
//! learned chunk's (by [`token_hash`]): a hash collision only makes a
//! varying token literal text (the next chunk with another value misses),
//! never a wrong match.

use std::ops::Range;

use super::num_walk::{NO_WALK, NumWalk, plain_number};
use super::{ChunkTemplate, Contents, Hole, MAX_CONTENTS, MAX_HOLES, MAX_TEMPLATE};

/// A token range of a chunk a template is cut from (at most
/// [`MAX_TEMPLATE`] bytes: 16-bit offsets keep the cut lists small) and
/// the kind of hole it becomes.
type Cut = (Range<u16>, Hole);

/// `r` as a [`Cut`] range, when its offsets fit.
fn cut(r: &Range<usize>) -> Option<Range<u16>> {
    Some(u16::try_from(r.start).ok()?..u16::try_from(r.end).ok()?)
}

/// A hash of a hole token (with its length), to tell on a template's
/// first match which holes hold the same token as in the chunk it was
/// learned from. A collision only turns a hole whose value varies into
/// literal text, which the next chunk with another value then misses on
/// (and a template is learned again): never a wrong match. (16 bits: a
/// varying token is taken for constant once in 65536 first matches; the
/// hashes of the four templates take 256 bytes, not 512.)
fn token_hash(t: &[u8]) -> u16 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let step = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    let mut words = t.chunks_exact(8);
    let mut h = t.len() as u64;
    for w in &mut words {
        h = step(h, u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    let h = step(h, u64::from_le_bytes(last));
    let h = (h >> 32) as u32 ^ h as u32;
    (h >> 16) as u16 ^ h as u16
}

/// Whether `holes` (cutting `literal`) are numbers, then one content hole,
/// each number followed by a segment whose first byte ends a JSON number.
fn nums_one(literal: &[u8], holes: &[(u16, Hole)]) -> bool {
    let Some(((_, Hole::Content(_)), nums)) = holes.split_last() else {
        return false;
    };
    nums.iter().all(|&(end, h)| {
        let next = literal.get(usize::from(end));
        h == Hole::Num
            && matches!(
                next,
                Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            )
    })
}

impl ChunkTemplate {
    /// [`matches`](ChunkTemplate::matches) (`whole`) and
    /// [`matches_event`](ChunkTemplate::matches_event) of a template on
    /// probation, out of line: the general walk's answer. A match (of the
    /// whole of `s` when `whole`) is the template's first, which refines
    /// it: the holes (but contents) whose token is the same as in the
    /// chunk learned from (same length and [`token_hash`]) become literal
    /// text, the template cut again from `s` at the others, found in the
    /// same walk.
    #[cold]
    #[inline(never)]
    pub(super) fn first_match(&mut self, s: &[u8], c: &mut Contents, whole: bool) -> Option<usize> {
        if !self.valid {
            return None;
        }
        // (One walk: the contents, and the holes to keep, those whose
        // token is not the learned one, as cuts.)
        let mut cuts: [Cut; MAX_HOLES] = Default::default();
        let (mut n, mut k, mut dropped, mut fits) = (0, 0, false, true);
        let sample_holes = &self.sample_holes;
        c.n = 0;
        let end = self.walk(s, |h, r| {
            let learned = sample_holes.get(k);
            if !matches!(h, Hole::Content(_))
                && learned == s.get(r.clone()).map(token_hash).as_ref()
            {
                dropped = true;
            } else if let Some(slot) = cuts.get_mut(n) {
                match cut(&r) {
                    Some(t) => *slot = (t, h),
                    None => fits = false,
                }
                n += 1;
            }
            c.record(h, r);
            k += 1;
        })?;
        if !whole || end == s.len() {
            self.probation = false;
            // (A chunk longer than `u16` offsets reach keeps the template
            // as learned.)
            if dropped && fits {
                self.build(&s[..end], &cuts[..n]);
            }
            self.set_ready(self.valid);
        }
        Some(end)
    }

    /// Learns from a chunk the fast scan read as choices `contents` (index,
    /// raw content body; all without a finish) with the other varying
    /// string and number tokens `holes`. `s` is the event's raw bytes
    /// when `framed` (the data then starts at `at`), else the data.
    /// Nothing is learned (the template is invalid) from more than
    /// [`MAX_CONTENTS`] contents or a choice index above `u8::MAX`.
    pub(crate) fn learn(
        &mut self,
        s: &[u8],
        at: usize,
        framed: bool,
        contents: impl Iterator<Item = (u32, Range<usize>)>,
        holes: &[Range<usize>],
    ) {
        self.valid = false;
        self.set_ready(false);
        self.probation = false;
        if s.len() > MAX_TEMPLATE || holes.len() >= MAX_HOLES - MAX_CONTENTS {
            return;
        }
        let mut cuts: [Cut; MAX_HOLES] = Default::default();
        let mut n = 0;
        for h in holes {
            let kind = if s[at + h.start] == b'"' {
                Hole::Str
            } else {
                Hole::Num
            };
            let Some(r) = cut(&(at + h.start..at + h.end)) else {
                return;
            };
            cuts[n] = (r, kind);
            n += 1;
        }
        for (i, c) in contents {
            if n - holes.len() == MAX_CONTENTS {
                return;
            }
            let Ok(i) = u8::try_from(i) else {
                return;
            };
            let Some(r) = cut(&(at + c.start - 1..at + c.end + 1)) else {
                return;
            };
            cuts[n] = (r, Hole::Content(i));
            n += 1;
        }
        let cuts = &mut cuts[..n];
        cuts.sort_by_key(|c| c.0.start);
        self.framed = framed;
        if !self.build(s, cuts) {
            return;
        }
        for (slot, (r, h)) in self.sample_holes.iter_mut().zip(cuts.iter()) {
            // (Content holes stay holes: not compared.)
            if !matches!(h, Hole::Content(_)) {
                *slot = token_hash(&s[usize::from(r.start)..usize::from(r.end)]);
            }
        }
        // Only content holes: nothing to refine.
        self.probation = !holes.is_empty();
        self.set_ready(!self.probation);
    }

    /// Cuts `s` at the sorted, disjoint token ranges `cuts`.
    fn build(&mut self, s: &[u8], cuts: &[Cut]) -> bool {
        self.valid = false;
        self.set_ready(false);
        self.literal.clear();
        self.n = 0;
        if cuts.len() > MAX_HOLES {
            return false;
        }
        // Sized once (not doubled from empty, segment by segment): the
        // literal text is at most `s`. A buffer too small is replaced, not
        // grown (no copy of the old text), with room for the refinement
        // by a longer chunk of the same shape (its first match).
        if self.literal.capacity() < s.len() {
            self.literal = Vec::with_capacity(s.len() + s.len() / 2);
        }
        let mut at = 0;
        for ((r, h), slot) in cuts.iter().zip(&mut self.holes) {
            let r = usize::from(r.start)..usize::from(r.end);
            if r.start < at {
                return false;
            }
            self.literal.extend_from_slice(&s[at..r.start]);
            // (The literal text is at most the learned chunk's `MAX_TEMPLATE`
            // bytes.)
            let Ok(end) = u16::try_from(self.literal.len()) else {
                return false;
            };
            *slot = (end, *h);
            at = r.end;
        }
        self.literal.extend_from_slice(&s[at..]);
        self.n = cuts.len();
        self.numbers = cuts.iter().any(|c| c.1 == Hole::Num);
        self.nums_one = self.numbers && nums_one(&self.literal, &self.holes[..cuts.len()]);
        self.widths = [0; 2];
        self.num_walk.clear();
        self.valid = true;
        true
    }

    /// Rebuilds [`filled`](ChunkTemplate::filled) for the number holes `nums` with
    /// the numbers of `s` (see [`walk_nums`](ChunkTemplate::walk_nums)): the literal
    /// text up to the content hole with each number in its hole, then
    /// eight bytes of room (a number's word is merged in whole). The
    /// numbers' widths added up, or `None` when a number is not a plain
    /// one.
    #[cold]
    #[inline(never)]
    pub(super) fn refill(&mut self, s: &[u8], nums: &[(u16, Hole)]) -> Option<usize> {
        let mut found = [(0, 0); 2];
        let mut shift = 0;
        for (&(end, _), f) in nums.iter().zip(&mut found) {
            *f = plain_number(s, usize::from(end) + shift)?;
            shift += f.1;
        }
        self.filled.clear();
        // (Sized once for the literal text's room: two numbers' seven
        // digits and a word more; not grown when a width changes.)
        if self.filled.capacity() < self.literal.len() + 32 {
            self.filled = Vec::with_capacity(self.literal.capacity() + 32);
        }
        let mut at = 0;
        for (&(end, _), &(w, d)) in nums.iter().zip(&found) {
            let end = usize::from(end);
            self.filled.extend_from_slice(&self.literal[at..end]);
            self.filled.extend_from_slice(&w.to_le_bytes()[..d]);
            at = end;
        }
        let head = self.holes.get(nums.len()).map_or(at, |h| usize::from(h.0));
        self.filled.extend_from_slice(&self.literal[at..head]);
        self.filled.extend_from_slice(&[0; 8]);
        let tail = &self.literal[head.min(self.literal.len())..];
        self.tail = match tail.len() {
            1..=8 => {
                let mut w = [0; 8];
                w[..tail.len()].copy_from_slice(tail);
                // (At most eight.)
                let len = tail.len() as u8;
                (u64::from_le_bytes(w), !0u64 >> (64 - 8 * tail.len()), len)
            }
            _ => (0, 0, 0),
        };
        self.widths = [0; 2];
        let mut ends = [(0, 0); 2];
        for ((w, f), (e, &(end, _))) in self
            .widths
            .iter_mut()
            .zip(&found)
            .zip(ends.iter_mut().zip(nums))
        {
            // (At most seven.)
            *w = f.1 as u8;
            *e = (usize::from(end), f.1);
        }
        let index = match self.holes.get(nums.len()) {
            Some(&(_, Hole::Content(i))) => Some(i),
            _ => None,
        };
        self.num_walk = match index {
            Some(i) => NumWalk::new(&self.filled, &ends[..nums.len()], head, i, &self.literal),
            None => NO_WALK,
        };
        Some(shift)
    }
}

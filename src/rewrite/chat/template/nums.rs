//! The walks of a template whose holes are one or two numbers, then one
//! content hole (Perplexity's running `usage`): the straight-line walk of
//! a whole event at the widths the numbers had in the last walk
//! ([`ChunkTemplate::walk_numbers`], the hot side), the same walk of an
//! event's start held across input pieces
//! ([`ChunkTemplate::prefix_numbers`]), and the careful walk they leave
//! everything else to ([`walk_nums`](ChunkTemplate::walk_nums), which
//! rebuilds `filled` when a width changes).
//!
//! Contract: [`NumWalk`](super::num_walk::NumWalk) is derived from the template's literal text and
//! holes and the numbers' widths ([`ChunkTemplate::widths`]) alone, by
//! [`refill`](ChunkTemplate::refill), the only place those widths are set
//! to anything but zero (`build` resets the walk with them). With the
//! widths known, every number's offset in a matching input is known, so
//! each number is one word of the input checked in one test: its digits
//! (no leading zero but a lone `0`) and the literal bytes after it up to
//! the word's end, which start with a byte that ends a number token
//! (`nums_one`). A passing word is stored whole into
//! [`filled`](ChunkTemplate::filled) (digits and literal bytes: the
//! literal text with this walk's numbers, as before), and the input
//! matches exactly when its text up to the content hole is `filled`'s,
//! the content a JSON string, and the tail literal text follows: the
//! general walk's answer, since the numbers end where the JSON scanner
//! ends them. A start (a held tail) that ends before the content hole
//! matches so far exactly when it is the start of `filled`, and stops
//! short in the literal segment it ends in, as the general walk would. A
//! word that fails (another width, any other number, the input's end) is
//! left to the careful walk
//! ([`walk_numbers_cold`](ChunkTemplate::walk_numbers_cold)) or, for a
//! start, to the general one.

use super::num_walk::{bad, merge, plain_number};
use super::{ChunkTemplate, Contents, Hole, Stop, same, short};
use crate::json;

impl ChunkTemplate {
    /// The walk of a template with number holes (Perplexity's running
    /// `usage`), out of line (the number words and the walk then have
    /// registers of their own): one or two numbers then one content hole
    /// at the numbers' last widths straight-line ([`NumWalk`](super::num_walk::NumWalk)), anything
    /// else by [`walk_numbers_cold`](Self::walk_numbers_cold). Of a valid
    /// template with number holes only.
    #[inline(never)]
    pub(super) fn walk_numbers(&mut self, s: &[u8], c: &mut Contents) -> Option<usize> {
        // Each number: its word, checked, then stored.
        for k in 0..2 {
            let w = &self.num_walk;
            let (at, sub, add) = (usize::from(w.at[k]), w.sub[k], w.add[k]);
            let x = match s.get(at..at + 8) {
                Some(x) if bad(u64::from_le_bytes(x.try_into().ok()?), sub, add) == 0 => x,
                _ => return self.walk_numbers_cold(s, c),
            };
            // The number is plain, of the last width, followed by the
            // literal bytes up to the word's end. (`filled` holds every
            // word: `NumWalk::new`.)
            self.filled.get_mut(at..at + 8)?.copy_from_slice(x);
        }
        let w = &self.num_walk;
        match json::short_string_end(s, usize::from(w.start)) {
            Some(end) => self.finish_numbers(s, c, end),
            None => self.walk_numbers_long(s, c),
        }
    }

    /// The careful walk of a template with number holes, where
    /// [`walk_numbers`](Self::walk_numbers) gives up (a number of another
    /// width, or not a plain one, the input's end; no straight-line walk
    /// yet), out of line: one or two numbers then one content hole with
    /// one comparison up to the content
    /// ([`walk_nums_one`](Self::walk_nums_one), which refills on a width
    /// change), falling back to [`walk_any`](Self::walk_any) when that one
    /// gives up.
    #[cold]
    #[inline(never)]
    fn walk_numbers_cold(&mut self, s: &[u8], c: &mut Contents) -> Option<usize> {
        if self.nums_one {
            let mut unsure = false;
            match self.walk_nums_one(s, c, &mut unsure) {
                Ok(end) => return Some(end),
                Err(_) if !unsure => return None,
                Err(_) => {}
            }
        }
        self.walk_any(s, c)
    }

    /// The rest of [`walk_numbers`](Self::walk_numbers) past its numbers
    /// for a content that is not short and plain, out of line (the hot
    /// walk then saves no registers for the string scan's call).
    #[inline(never)]
    fn walk_numbers_long(&mut self, s: &[u8], c: &mut Contents) -> Option<usize> {
        let (end, _) = json::scan_string(s, usize::from(self.num_walk.start)).ok()?;
        self.finish_numbers(s, c, end)
    }

    /// The end of [`walk_numbers`](Self::walk_numbers), the content
    /// ending at `end`: the content into `c`, the tail, the text before
    /// the content.
    #[inline(always)]
    fn finish_numbers(&self, s: &[u8], c: &mut Contents, end: usize) -> Option<usize> {
        let w = &self.num_walk;
        let start = usize::from(w.start);
        c.at[0] = (u32::from(w.index), start + 1, end - 1, 0);
        c.n = 1;
        let e = end + usize::from(w.tail_len);
        let got = u64::from_le_bytes(*s.get(..e)?.last_chunk::<8>()?);
        if (got ^ w.tail) & w.tail_mask != 0 {
            return None;
        }
        (s.get(..start)? == self.filled.get(..start)?).then_some(e)
    }

    /// [`prefix`](ChunkTemplate::prefix) (the walk of an event's start, a
    /// held tail) of a template whose holes are one or two numbers, then
    /// one content hole, as [`walk_numbers`](Self::walk_numbers) walks a
    /// whole event: each number's word checked and stored into `filled`,
    /// then one comparison of the start with it (up to the content hole,
    /// or as far as the start goes), the content and the tail as the
    /// general walk. The general walk's answer, or `None` where this walk
    /// is unsure: no walk is set (no numbers seen since the template was
    /// learned: `filled` is not its text), the start ends within a word of
    /// a number, a number's word is not the walk's, or the start differs
    /// from `filled`. (Inlined into the driver's out-of-line `hold`.)
    #[inline(always)]
    pub(super) fn prefix_numbers(
        &mut self,
        s: &[u8],
        c: &mut Contents,
    ) -> Option<Result<usize, Stop>> {
        if !self.num_walk.is_set() {
            return None;
        }
        // The start ends before number `k` or the content hole (`k`: the
        // numbers' count), at `at` in the input and `end` in the literal
        // text: a match so far stops short there, in segment `k`.
        let stop = |filled: &[u8], k: usize, at: usize, end: u16| {
            let lit = (s.len() + usize::from(end)).checked_sub(at)?;
            (filled.get(..s.len())? == s).then_some(Err(Stop::Short { k, lit }))
        };
        let nums = self.n - 1;
        for k in 0..nums {
            let w = &self.num_walk;
            let (at, sub, add) = (usize::from(w.at[k]), w.sub[k], w.add[k]);
            if s.len() < at {
                return stop(&self.filled, k, at, self.holes[k].0);
            }
            let x = s.get(at..at + 8)?;
            if bad(u64::from_le_bytes(x.try_into().ok()?), sub, add) != 0 {
                return None;
            }
            self.filled.get_mut(at..at + 8)?.copy_from_slice(x);
        }
        let (start, index) = (usize::from(self.num_walk.start), self.num_walk.index);
        let head = self.holes.get(nums)?.0;
        if s.len() < start {
            return stop(&self.filled, nums, start, head);
        }
        if s.get(..start)? != self.filled.get(..start)? {
            return None;
        }
        let Ok((end, _)) = json::scan_string(s, start) else {
            return Some(Err(Stop::InHole));
        };
        c.at[0] = (u32::from(index), start + 1, end - 1, 0);
        c.n = 1;
        let head = usize::from(head);
        let tail = self.literal.get(head..)?;
        let rest = &s[end..];
        Some(match rest.get(..tail.len()) {
            Some(got) if same(got, tail) => Ok(end + tail.len()),
            Some(_) => Err(Stop::Mismatch),
            None => Err(short(rest, tail, nums + 1, head)),
        })
    }

    /// The walk of a template whose holes are one or two numbers, then one
    /// content hole: [`walk_nums`](Self::walk_nums) for that count (other
    /// counts are left to the general walk: `unsure`).
    #[inline(always)]
    pub(super) fn walk_nums_one(
        &mut self,
        s: &[u8],
        c: &mut Contents,
        unsure: &mut bool,
    ) -> Result<usize, Stop> {
        match self.n {
            2 => self.walk_nums::<1>(s, c, unsure),
            3 => self.walk_nums::<2>(s, c, unsure),
            _ => {
                *unsure = true;
                Err(Stop::Mismatch)
            }
        }
    }

    /// The walk of a template whose holes are `N` numbers, then one
    /// content hole, with one comparison for all the text before the
    /// content: each number (one to seven plain digits, no leading zero,
    /// read in one word where the literal text before it puts it) is
    /// merged into [`filled`](Self::filled) (the literal text with the
    /// numbers of the last walk in their holes; rebuilt when a number's
    /// width changes), which is then compared with the input up to the
    /// content hole.
    /// Its answer is the general walk's (every stop a [`Stop::Mismatch`]),
    /// but a stop with `unsure` set: any other number (a sign, a fraction,
    /// an exponent), one within a word of the input's end, or a mismatch
    /// before the content is left to the general walk. (A match is the
    /// general walk's: the segment after a number starts with a byte that
    /// ends the number token, `nums_one`.)
    #[inline(always)]
    fn walk_nums<const N: usize>(
        &mut self,
        s: &[u8],
        c: &mut Contents,
        unsure: &mut bool,
    ) -> Result<usize, Stop> {
        use Stop::Mismatch;
        let Some((&nums, &[(head, Hole::Content(i)), ..])) = self.holes.split_first_chunk::<N>()
        else {
            return Err(Mismatch);
        };
        let (mut shift, widths) = (0, self.widths);
        for (&(end, _), &width) in nums.iter().zip(&widths) {
            let at = usize::from(end) + shift;
            match plain_number(s, at) {
                Some((w, d)) if d == usize::from(width) => {
                    let Some(slot) = self.filled.get_mut(at..at + 8) else {
                        *unsure = true;
                        return Err(Mismatch);
                    };
                    merge(slot, w, d);
                    shift += d;
                }
                Some(_) => {
                    // A width changed: every number is put in anew.
                    let Some(all) = self.refill(s, &nums) else {
                        *unsure = true;
                        return Err(Mismatch);
                    };
                    shift = all;
                    break;
                }
                None => {
                    *unsure = true;
                    return Err(Mismatch);
                }
            }
        }
        let start = usize::from(head) + shift;
        let same_head = match (s.get(..start), self.filled.get(..start)) {
            (Some(got), Some(want)) => got == want,
            _ => false,
        };
        if !same_head {
            *unsure = true;
            return Err(Mismatch);
        }
        let (end, _) = json::scan_string(s, start).map_err(|_| Mismatch)?;
        c.at[0] = (u32::from(i), start + 1, end - 1, 0);
        c.n = 1;
        // The tail: in one word (masked) when both are that long.
        let (tail, mask, len) = self.tail;
        if let Some(w) = s.get(end..).and_then(|r| r.first_chunk::<8>()) {
            if mask != 0 {
                let got = u64::from_le_bytes(*w);
                return if (got ^ tail) & mask == 0 {
                    Ok(end + usize::from(len))
                } else {
                    Err(Mismatch)
                };
            }
        }
        let tail = self.literal.get(usize::from(head)..).ok_or(Mismatch)?;
        match s.get(end..).and_then(|r| r.get(..tail.len())) {
            Some(got) if same(got, tail) => Ok(end + tail.len()),
            _ => Err(Mismatch),
        }
    }
}

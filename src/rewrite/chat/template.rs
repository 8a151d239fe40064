//! The template learner: the shape of a recent chunk, so that the next
//! chunks of the same shape are recognised with a few comparisons instead
//! of a scan (the hot path of [`ChatStream`](crate::ChatStream)).
//!
//! A template learned from an event whose raw bytes are exactly `data: `
//! (or `data:`) + the chunk's JSON + `\n\n` is *framed*: its first literal
//! segment starts with that prefix and its last ends with `}\n\n`, so it
//! recognises whole events directly in an input piece, before the SSE
//! parser sees them (the fused path, [`ChunkTemplate::matches_event`]).
//! Any other event gives an unframed template, matched against the
//! event's data.
//!
//! This module holds the templates and their walks (the hot side); the
//! walks of templates with number holes are in [`nums`]; learning and
//! refining templates is in [`learn`] (the cold side).

use std::ops::Range;

use crate::json;

/// Largest chunk a [`ChunkTemplate`] is learned from.
pub(crate) const MAX_TEMPLATE: usize = 4096;

/// How many chunk shapes a stream keeps (content and reasoning chunks
/// alternate in some streams; `n` > 1 interleaves choices).
pub(crate) const TEMPLATES: usize = 4;

/// Most content holes (choices with content) in one template.
pub(crate) const MAX_CONTENTS: usize = 4;

/// Most holes in one template (the fast scan records at most as many).
const MAX_HOLES: usize = json::MAX_HOLES;

/// What a hole of a template holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Hole {
    /// Any JSON string.
    #[default]
    Str,
    /// Any JSON number.
    Num,
    /// The `delta.content` string of the choice with this index. (A byte,
    /// so that a hole takes two and the templates, moved with the
    /// rewriter when it is made, stay small: a chunk with a higher index,
    /// far above [`MAX_CHOICES`](crate::rewrite::MAX_CHOICES) and ignored,
    /// teaches no template.)
    Content(u8),
}

/// The content bodies a match found: (choice index, raw body range, how
/// many of the body's first bytes the walk's scan found plain: see
/// [`cite::content_token`](crate::cite::content_token)).
#[derive(Clone, Debug, Default)]
pub(crate) struct Contents {
    pub(crate) n: usize,
    pub(crate) at: [(u32, usize, usize, usize); MAX_CONTENTS],
}

impl Contents {
    /// Records the body of a content hole (`r` is the token, with quotes).
    #[inline(always)]
    fn record(&mut self, h: Hole, r: Range<usize>) {
        if let Hole::Content(i) = h {
            if let Some(slot) = self.at.get_mut(self.n) {
                *slot = (u32::from(i), r.start + 1, r.end - 1, 0);
                self.n += 1;
            }
        }
    }

    /// Each content hole: the choice index and the raw body's range.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, Range<usize>)> + '_ {
        self.at[..self.n].iter().map(|&(i, s, e, _)| (i, s..e))
    }
}

/// Why a walk stopped short of a match (see
/// [`ChunkTemplate::prefix`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The input differs from the template.
    Mismatch,
    /// The input ran out inside hole token (or a number that may go on).
    InHole,
    /// The input ran out inside literal segment `k`, matching it up to the
    /// literal's byte `lit`: the walk goes on from there
    /// ([`ChunkTemplate::resume`]).
    Short { k: usize, lit: usize },
}

/// Where a walk that ran out of input (`rest`, shorter than `seg`, the
/// literal's bytes from `lit`, segment `k`) stopped.
#[cold]
fn short(rest: &[u8], seg: &[u8], k: usize, lit: usize) -> Stop {
    if seg.starts_with(rest) {
        Stop::Short {
            k,
            lit: lit + rest.len(),
        }
    } else {
        Stop::Mismatch
    }
}

/// The shape of a recent chunk without a finish, learned so the next ones
/// can be checked with a few comparisons instead of a full scan.
///
/// Chunks of one stream are nearly identical: the same `id`, `model`,
/// `created`, keys and punctuation; only some string and number values
/// vary (the content, reasoning text, `obfuscation` padding, a running
/// `usage`). A template is the learned chunk cut at those tokens
/// ("holes"): the content of each choice, and the strings and numbers of
/// the delta, of the choice (not its `index`) and the top-level ones other
/// than the envelope's. A fresh template is on *probation*: the first
/// chunk it matches turns every hole (but the contents) whose token is the
/// same in both chunks into literal text, so constant values (Perplexity's
/// `citations`, a `role`) cost a comparison, not a scan; a later chunk
/// where such a value changes is a miss and teaches a new template.
///
/// A chunk made of the same literal segments with a valid JSON token of
/// the same kind (string or number) in each hole parses exactly like the
/// chunk the template was learned from, except for those values: it is
/// valid JSON with the learned choices (indexes), none with a
/// `finish_reason` string, each choice's content (if it has a content
/// hole) in that hole. A string hole never holds a byte below 0x20, so a
/// framed match is one `data:` line without CR or LF, then a blank line.
/// Anything else takes the full scan.
#[derive(Clone, Debug)]
pub(crate) struct ChunkTemplate {
    /// The literal segments, concatenated.
    literal: Vec<u8>,
    /// The first `n`: hole `k` follows segment `k`, which ends there in
    /// `literal`; the last segment runs to the end of `literal`. (Inline,
    /// like `sample_holes`: learning allocates only the literal text.)
    holes: [(u16, Hole); MAX_HOLES],
    n: usize,
    /// Learned from `data: ` + JSON + `\n\n`: matched against raw events.
    pub(crate) framed: bool,
    /// Some hole is a number (set by `build`).
    numbers: bool,
    /// The holes are numbers, then one content hole, and no segment after
    /// a number starts with a byte that could continue it (set by `build`:
    /// [`walk_nums_one`](Self::walk_nums_one) applies, to one or two
    /// numbers).
    nums_one: bool,
    /// For [`walk_nums`](Self::walk_nums) and
    /// [`walk_numbers`](Self::walk_numbers): the literal text up to the
    /// content hole with the last walk's numbers in the number holes, and
    /// their widths (0: not filled yet).
    filled: Vec<u8>,
    widths: [u8; 2],
    /// The straight-line walk at those widths (set with them by `refill`,
    /// cleared by `build`).
    num_walk: num_walk::NumWalk,
    /// The literal text after the content hole as a word, the mask of
    /// its bytes and its length, when it is one to eight bytes long (else
    /// a zero mask).
    tail: (u64, u64, u8),
    /// The `n` hole tokens of the chunk learned from, while on probation:
    /// their token hashes (`learn::token_hash`; not a copy of the chunk:
    /// learning allocates only the literal text).
    sample_holes: [u16; MAX_HOLES],
    /// Valid, learned with holes other than contents and not matched yet
    /// (its first match refines it).
    probation: bool,
    valid: bool,
    /// Valid and not on probation: matched by the walk of its shape
    /// ([`walk_contents`](Self::walk_contents)) alone (one flag for the
    /// hot path to test).
    ready: bool,
    /// When framed, ready and of one content hole (the most common
    /// shape): that hole's end in the literal and its choice index, for
    /// [`one_content`](Self::one_content) to read in one load. Kept by
    /// [`set_ready`](Self::set_ready), the one writer of `ready`.
    one: Option<(u16, u8)>,
}

impl Default for ChunkTemplate {
    /// An empty, invalid template: a copy of [`EMPTY`] (the derived one
    /// stores each hole's fields one by one, some 270 instructions a
    /// stream for the four slots).
    fn default() -> Self {
        EMPTY.clone()
    }
}

/// An empty, invalid template.
static EMPTY: ChunkTemplate = ChunkTemplate {
    literal: Vec::new(),
    holes: [(0, Hole::Str); MAX_HOLES],
    n: 0,
    framed: false,
    numbers: false,
    nums_one: false,
    filled: Vec::new(),
    widths: [0; 2],
    num_walk: num_walk::NO_WALK,
    tail: (0, 0, 0),
    sample_holes: [0; MAX_HOLES],
    probation: false,
    valid: false,
    ready: false,
    one: None,
};

/// Whether `a == b` for slices of equal length, without a library call
/// for the short ones (most literal segments are a few bytes).
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    let w8 = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]));
    let w4 = |s: &[u8], i: usize| u32::from_le_bytes(s[i..i + 4].try_into().unwrap_or([0; 4]));
    let w2 = |s: &[u8], i: usize| u16::from_le_bytes(s[i..i + 2].try_into().unwrap_or([0; 2]));
    let w16 = |s: &[u8], i: usize| u128::from_le_bytes(s[i..i + 16].try_into().unwrap_or([0; 16]));
    match n {
        33.. => a == b,
        // (A chunk's tail, `"},"finish_reason":null}]}` and the blank
        // line: two overlapping sixteen-byte words, no library call.)
        16.. => w16(a, 0) == w16(b, 0) && w16(a, n - 16) == w16(b, n - 16),
        8.. => w8(a, 0) == w8(b, 0) && w8(a, n - 8) == w8(b, n - 8),
        4.. => w4(a, 0) == w4(b, 0) && w4(a, n - 4) == w4(b, n - 4),
        2.. => w2(a, 0) == w2(b, 0) && w2(a, n - 2) == w2(b, n - 2),
        1 => a.first() == b.first(),
        _ => true,
    }
}

/// The end of the JSON number token at `s[i]`: a plain integer without a
/// leading zero (a running count) here, eight digits a step, anything else
/// by the JSON scanner.
#[inline(always)]
fn number_end(s: &[u8], i: usize) -> Option<usize> {
    let end = json::digits_end(s, i);
    match (s.get(i), s.get(end)) {
        (Some(&first), Some(next))
            if end > i
                && (first != b'0' || end == i + 1)
                && !matches!(next, b'.' | b'e' | b'E') =>
        {
            Some(end)
        }
        (Some(b'-' | b'0'..=b'9'), _) => json::scan_number(s, i).ok(),
        _ => None,
    }
}

/// The length of the string token at the start of `r` in a hole of kind
/// `h` (not a number) and how many of its body's first bytes are plain
/// for the tracker: a content's from the scan that also finds them
/// ([`cite::content_token`](crate::cite::content_token)), any other
/// string's by the string scan alone (none).
#[inline(always)]
fn hole_token(h: Hole, r: &[u8]) -> Option<(usize, usize)> {
    if let Hole::Content(_) = h {
        crate::cite::content_token(r)
    } else {
        json::scan_string(r, 0).ok().map(|(len, _)| (len, 0))
    }
}

/// The walk of a template of one content hole, straight-line, from its
/// literal text before and after the hole (`head`, `tail`,
/// [`ChunkTemplate::one_parts`]): the match's length at the start of `s`
/// and its content body (start, end, plain prefix; as [`Contents`]
/// records it), or `None`. [`ChunkTemplate::walk_one`] walks with it, and
/// the fused path's run of such events
/// ([`fused_events`](super::ChatHandler::fused_events)).
#[inline(always)]
pub(crate) fn walk_one_parts(
    s: &[u8],
    (head, tail): (&[u8], &[u8]),
) -> Option<(usize, (usize, usize, usize))> {
    let end = head.len();
    let (got, r) = s.split_at_checked(end)?;
    if !same(got, head) {
        return None;
    }
    let (len, plain) = crate::cite::content_token(r)?;
    let got = r.get(len..)?.get(..tail.len())?;
    if !same(got, tail) {
        return None;
    }
    Some((end + len + tail.len(), (end + 1, end + len - 1, plain)))
}

impl ChunkTemplate {
    /// The length of the literal text (a lower bound of a match's).
    #[inline]
    pub(crate) fn literal_len(&self) -> usize {
        self.literal.len()
    }

    /// Walks `s` from its start along the template: `Some(end)` when the
    /// literal segments and hole tokens match up to `end`; `hole` sees each
    /// hole's kind and token range.
    #[inline(always)]
    fn walk(&self, s: &[u8], hole: impl FnMut(Hole, Range<usize>)) -> Option<usize> {
        self.walk_from::<false>(s, 0, 0, hole).ok()
    }

    /// The walk of `s` from segment `first` at the literal's byte `lit`
    /// (the rest of that segment first, then hole `first`, and so on):
    /// `Ok(end)` when the rest of the template matches up to `end`. With
    /// `PREFIX`, running out of input is told apart from a mismatch
    /// ([`Stop`]); without, every stop is a [`Stop::Mismatch`].
    #[inline(always)]
    fn walk_from<const PREFIX: bool>(
        &self,
        s: &[u8],
        first: usize,
        mut lit: usize,
        mut hole: impl FnMut(Hole, Range<usize>),
    ) -> Result<usize, Stop> {
        use Stop::Mismatch;
        let mut pos = 0;
        let holes = self.holes.get(first..self.n).ok_or(Mismatch)?;
        // Segment k, then hole k; the last segment runs to the end.
        for (k, &(end, h)) in holes.iter().enumerate() {
            let end = usize::from(end);
            let seg = self.literal.get(lit..end).ok_or(Mismatch)?;
            match s.get(pos..pos + seg.len()) {
                Some(got) if same(got, seg) => {}
                None if PREFIX => return Err(short(&s[pos..], seg, first + k, lit)),
                _ => return Err(Mismatch),
            }
            pos += seg.len();
            lit = end;
            let start = pos;
            let token = if h == Hole::Num {
                // (A number up to the end of `s` may go on.)
                number_end(s, pos).filter(|&e| !PREFIX || e < s.len())
            } else {
                json::scan_string(s, pos).ok().map(|t| t.0)
            };
            pos = token.ok_or(if PREFIX { Stop::InHole } else { Mismatch })?;
            hole(h, start..pos);
        }
        let seg = self.literal.get(lit..).ok_or(Mismatch)?;
        match s.get(pos..pos + seg.len()) {
            Some(got) if same(got, seg) => Ok(pos + seg.len()),
            None if PREFIX => Err(short(&s[pos..], seg, first + holes.len(), lit)),
            _ => Err(Mismatch),
        }
    }

    /// Matches the whole of `s` (the chunk's data, or the raw event for a
    /// framed template), its content bodies into `c`.
    #[inline]
    pub(crate) fn matches(&mut self, s: &[u8], c: &mut Contents) -> bool {
        let end = if self.ready {
            self.walk_contents(s, c)
        } else if self.probation {
            self.first_match(s, c, true)
        } else {
            None
        };
        end == Some(s.len())
    }

    /// Matches a framed template at the start of `s` (an input piece's
    /// rest): the event's length, its content bodies into `c`.
    #[inline]
    pub(crate) fn matches_event(&mut self, s: &[u8], c: &mut Contents) -> Option<usize> {
        if self.ready {
            self.walk_contents(s, c)
        } else if self.probation {
            self.first_match(s, c, false)
        } else {
            None
        }
    }

    /// The walk recording the content bodies into `c`: a template of one
    /// content hole straight-line ([`walk_one`](Self::walk_one)), of one or
    /// two string holes straight-line as well ([`walk_two`](Self::walk_two):
    /// a content, then `obfuscation`; a reasoning delta), one with number
    /// holes out of line ([`walk_numbers`](Self::walk_numbers)), any other
    /// by [`walk_any`](Self::walk_any) out of line
    /// ([`walk_other`](Self::walk_other)). Of a valid template only.
    #[inline(always)]
    fn walk_contents(&mut self, s: &[u8], c: &mut Contents) -> Option<usize> {
        if let (1, [(end, Hole::Content(i)), ..]) = (self.n, &self.holes) {
            return self.walk_one(s, usize::from(*end), u32::from(*i), c);
        }
        if self.numbers {
            return self.walk_numbers(s, c);
        }
        // (One call of `walk_two` for both shapes: one copy of it inlined.)
        let two = match (self.n, &self.holes) {
            (1, [first, ..]) => Some((*first, None)),
            (2, [first, second, ..]) => Some((*first, Some(*second))),
            _ => None,
        };
        if let Some((first, second)) = two {
            return self.walk_two(s, first, second, c);
        }
        self.walk_other(s, c)
    }

    /// [`walk_any`](Self::walk_any) out of line, for the shapes
    /// [`walk_contents`](Self::walk_contents) has no straight-line walk for
    /// (three holes or more): the hot path's registers are not shared with
    /// the loop.
    #[inline(never)]
    fn walk_other(&self, s: &[u8], c: &mut Contents) -> Option<usize> {
        self.walk_any(s, c)
    }

    /// The general walk (any holes), recording the content bodies.
    #[inline(always)]
    fn walk_any(&self, s: &[u8], c: &mut Contents) -> Option<usize> {
        c.n = 0;
        self.walk(s, |h, r| c.record(h, r))
    }

    /// Walks `s`, the start of an event (a held tail), as far as it goes:
    /// [`Stop::Short`] when all of it matches the template's start and the
    /// input ran out inside a literal segment (its contents so far in
    /// `c`), so the next piece can go on with [`resume`](Self::resume). A
    /// framed template's literal text is one line and a blank line, its
    /// holes strings and numbers: such an `s` has no CR and no LF but
    /// maybe the last byte. `Ok` is a whole match.
    ///
    /// A template of numbers then one content hole walks the start like
    /// the whole-event walk at the numbers' last widths
    /// ([`prefix_numbers`](Self::prefix_numbers)); the general walk
    /// answers where that one is unsure.
    #[inline(always)]
    pub(crate) fn prefix(&mut self, s: &[u8], c: &mut Contents) -> Result<usize, Stop> {
        c.n = 0;
        if !self.valid {
            return Err(Stop::Mismatch);
        }
        if self.ready && self.nums_one {
            if let Some(walked) = self.prefix_numbers(s, c) {
                return walked;
            }
        }
        self.prefix_general(s, c)
    }

    /// [`prefix`](Self::prefix) by the general walk.
    #[inline(always)]
    fn prefix_general(&self, s: &[u8], c: &mut Contents) -> Result<usize, Stop> {
        c.n = 0;
        self.walk_from::<true>(s, 0, 0, |h, r| c.record(h, r))
    }

    /// Goes on with a walk [`prefix`](Self::prefix) stopped short at
    /// segment `k`, byte `lit` of the literal: the end of the match in
    /// `s` (the next piece), its contents added to `c` (ranges in `s`).
    /// The same answer as the walk of the tail and `s` joined.
    #[inline(always)]
    pub(crate) fn resume(&self, s: &[u8], k: usize, lit: usize, c: &mut Contents) -> Option<usize> {
        if !self.valid {
            return None;
        }
        self.walk_from::<false>(s, k, lit, |h, r| c.record(h, r))
            .ok()
    }

    /// Whether the template is on probation (its first match refines it).
    #[inline]
    pub(crate) fn on_probation(&self) -> bool {
        self.probation
    }

    /// Whether the walk with its shortcuts ([`walk_one`](Self::walk_one),
    /// [`walk_two`](Self::walk_two), [`walk_numbers`](Self::walk_numbers),
    /// [`walk_nums_one`](Self::walk_nums_one)) and the general one agree on
    /// `s`: the same end, the same contents, also when walked again (the
    /// numbers' widths then those of `s`, when plain: the straight-line
    /// walk of the numbers). The differential of the unit tests and the
    /// `chat_scan` fuzz target.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn walks_agree(&self, s: &[u8]) -> bool {
        let (mut c1, mut c2) = (Contents::default(), Contents::default());
        let mut t = self.clone();
        let (one, general) = if self.valid {
            (t.walk_contents(s, &mut c1), self.walk_any(s, &mut c2))
        } else {
            (None, None)
        };
        // Again, with the numbers' widths (`NumWalk`) the first walk may
        // have set from `s`: the straight-line walk of the numbers.
        let mut c4 = Contents::default();
        let again = if self.valid {
            t.walk_contents(s, &mut c4)
        } else {
            None
        };
        let again_agrees = again == general && (again.is_none() || c4.iter().eq(c2.iter()));
        let (mut c3, mut unsure) = (Contents::default(), false);
        let nums_agree = !(self.valid && self.nums_one) || {
            let nums = t.walk_nums_one(s, &mut c3, &mut unsure).ok();
            if unsure {
                nums.is_none()
            } else {
                nums == general && (nums.is_none() || c3.iter().eq(c2.iter()))
            }
        };
        nums_agree
            && again_agrees
            && one == general
            && (one.is_none() || c1.iter().eq(c2.iter()))
            && self.splits_agree(s)
    }

    /// Whether, for `s` cut at every byte, the walk of the start
    /// ([`prefix`](Self::prefix)) and its resumption in the rest
    /// ([`resume`](Self::resume)) agree with the general walk of the
    /// whole: a [`Stop::Short`] start is one line (no CR, no LF but maybe
    /// its last byte, for a framed template) and resumes to the same end
    /// and contents; a [`Stop::Mismatch`] start is no match of the whole.
    /// The walk of the start with its shortcut
    /// ([`prefix_nums`](Self::prefix_nums), one template walking every
    /// start in turn) answers as the general one, with the same contents.
    #[cfg(any(test, fuzzing))]
    fn splits_agree(&self, s: &[u8]) -> bool {
        let mut whole = Contents::default();
        let want = if self.valid {
            self.walk_any(s, &mut whole)
        } else {
            None
        };
        let mut t = self.clone();
        (0..=s.len()).all(|i| {
            let (head, rest) = s.split_at(i);
            let mut c = Contents::default();
            let walked = t.prefix(head, &mut c);
            if self.valid {
                let mut general = Contents::default();
                if self.prefix_general(head, &mut general) != walked || !c.iter().eq(general.iter())
                {
                    return false;
                }
            }
            match walked {
                Err(Stop::Short { k, lit }) => {
                    let line = head.strip_suffix(b"\n").unwrap_or(head);
                    let in_head = c.n;
                    let end = self.resume(rest, k, lit, &mut c);
                    let shifted = c.iter().enumerate().map(|(n, (index, r))| {
                        let at = if n < in_head { 0 } else { i };
                        (index, r.start + at..r.end + at)
                    });
                    (!self.framed || !line.iter().any(|&b| b == b'\n' || b == b'\r'))
                        && end.map(|e| e + i) == want
                        && (want.is_none() || shifted.eq(whole.iter()))
                }
                Err(Stop::Mismatch) => want.is_none(),
                Err(Stop::InHole) => true,
                Ok(end) => Some(end) == want,
            }
        })
    }

    /// The most common template's shape, for the fused path's first try
    /// ([`walk_one_parts`] without the [`Contents`] record, a run of
    /// events at a time): framed, ready and of one content hole, its end
    /// in the literal and its choice index.
    #[inline(always)]
    pub(crate) fn one_content(&self) -> Option<(usize, u32)> {
        self.one.map(|(end, i)| (usize::from(end), u32::from(i)))
    }

    /// Sets `ready` and, from it and the template's shape, `one`.
    fn set_ready(&mut self, ready: bool) {
        self.ready = ready;
        self.one = match (self.framed && ready, self.n, &self.holes) {
            (true, 1, [(end, Hole::Content(i)), ..]) => Some((*end, *i)),
            _ => None,
        };
    }

    /// [`walk_contents`](Self::walk_contents) for the most common template,
    /// one content hole ending the literal's first `end` bytes (a
    /// single-choice content chunk): straight-line, no loop.
    #[inline(always)]
    fn walk_one(&self, s: &[u8], end: usize, i: u32, c: &mut Contents) -> Option<usize> {
        let (len, body) = walk_one_parts(s, self.one_parts(end)?)?;
        c.at[0] = (i, body.0, body.1, body.2);
        c.n = 1;
        Some(len)
    }

    /// The literal text of a one-content template (`end` from
    /// [`one_content`](Self::one_content)) before and after its hole, for
    /// a run of [`walk_one_parts`] calls.
    #[inline(always)]
    pub(crate) fn one_parts(&self, end: usize) -> Option<(&[u8], &[u8])> {
        self.literal.split_at_checked(end)
    }

    /// [`walk_contents`](Self::walk_contents) for the next most common
    /// templates, one string hole `first` (a reasoning delta), maybe then
    /// another one `second` (a content then OpenAI's `obfuscation`; a role,
    /// then a content): straight-line as [`walk_one`](Self::walk_one), no
    /// loop. (Each hole as (end in the literal, kind); neither a number.)
    #[inline(always)]
    fn walk_two(
        &self,
        s: &[u8],
        (end, first): (u16, Hole),
        second: Option<(u16, Hole)>,
        c: &mut Contents,
    ) -> Option<usize> {
        let end = usize::from(end);
        let (head, mut tail) = self.literal.split_at_checked(end)?;
        let (got, r) = s.split_at_checked(head.len())?;
        if !same(got, head) {
            return None;
        }
        let (len, plain) = hole_token(first, r)?;
        let mut r = r.get(len..)?;
        let mut n = 0;
        if let Hole::Content(i) = first {
            c.at[0] = (u32::from(i), end + 1, end + len - 1, plain);
            n = 1;
        }
        if let Some((obf, second)) = second {
            let (mid, rest) = tail.split_at_checked(usize::from(obf).checked_sub(end)?)?;
            let (got, hole) = r.split_at_checked(mid.len())?;
            if !same(got, mid) {
                return None;
            }
            let (len, plain) = hole_token(second, hole)?;
            if let (Hole::Content(i), Some(slot)) = (second, c.at.get_mut(n)) {
                let start = s.len() - hole.len();
                *slot = (u32::from(i), start + 1, start + len - 1, plain);
                n += 1;
            }
            r = hole.get(len..)?;
            tail = rest;
        }
        let got = r.get(..tail.len())?;
        if !same(got, tail) {
            return None;
        }
        c.n = n;
        Some(s.len() - r.len() + tail.len())
    }
}

mod learn;

mod num_walk;

mod nums;

#[cfg(test)]
mod tests;

//! The fused path of [`ResponsesStream`](crate::ResponsesStream): the
//! `response.output_text.delta` events of a text part recognised by a
//! learned byte template, in the input piece before the SSE parser sees
//! them ([`Handler::fast_events`](crate::rewrite::driver::Handler::fast_events)),
//! or after a parse without reading the JSON.
//!
//! # Contract
//!
//! * **What is learned.** From a delta event the general path read
//!   (valid JSON, type `response.output_text.delta`, a string `delta`, a
//!   tracked text part) whose raw bytes are exactly an optional
//!   `event: response.output_text.delta` line, one `data: ` (or `data:`)
//!   line and a blank line, LF line ends: the event's bytes cut at the
//!   `delta` string (the content hole), the `obfuscation` string and the
//!   integer `sequence_number` (the members the general scan reads last,
//!   when the event has them). When the `sequence_number` comes after
//!   the other two (as api.openai.com writes the keys now, in alphabetical
//!   order), the template is the event up to that number and the bytes
//!   after it (`}` and the blank line) are kept as they are: a match is
//!   the template's, a plain integer (no leading zero), then those bytes;
//!   so the template has string holes only and takes chat's
//!   straight-line walk. Everything else (`type`, `item_id`,
//!   `output_index`, `content_index`, `logprobs`, the key order, the
//!   framing) is literal text. The template and its walks are chat's
//!   ([`ChunkTemplate`], shared, not copied); a fresh template is on
//!   probation and its first match turns a hole whose token did not
//!   change into literal text.
//! * **What a match means.** The same literal text with a valid JSON
//!   string in each string hole and a JSON number in the number hole is
//!   an event the parser dispatches with the same `event` field and data
//!   (a string token holds no CR or LF), which the general path reads as
//!   a delta of the same part with the hole's text: that text is fed to
//!   the part's tracker (while it has one) and the event passes as the
//!   very bytes it came in, as the general path would pass it.
//! * **When it applies.** Only while no event has been inserted (no
//!   `sequence_number` to raise, so every matched event passes
//!   unchanged); once one has, every event takes the general path, which
//!   renumbers. Anything that does not match (another part, another
//!   shape, CRLF, an `id:` line, over the size limit) takes the general
//!   path, which may learn the new shape (one template a stream; after
//!   [`MAX_WASTED`] templates that never matched, no more learning).
//! * **Across pieces.** An event cut by a piece boundary is walked along
//!   the template as far as the piece goes (a held tail,
//!   [`Tail::Started`] when the walk stops in a literal segment) and the
//!   walk goes on in the next piece (`fused_straddle`); anything else
//!   the parser gets.
//!
//! The output is byte-identical to the general path's: the unit tests in
//! `fused_tests.rs` and the `responses_split` fuzz target compare the two
//! with the fused path switched off.

use super::{Part, ResponsesHandler, Scan, Span};
use crate::json;
use crate::rewrite::chat::template::{ChunkTemplate, Contents, Stop};
use crate::rewrite::driver::Tail;
use crate::sse::FrameRef;

/// Templates learned in a row that never matched, after which the stream
/// learns no more (a shape that changes every event: varying `logprobs`).
const MAX_WASTED: u8 = 8;

/// The framings a delta template is learned from: the bytes before the
/// data.
const FRAMINGS: [&[u8]; 4] = [
    b"event: response.output_text.delta\ndata: ",
    b"data: ",
    b"event: response.output_text.delta\ndata:",
    b"data:",
];

/// The fused path's state.
#[derive(Debug)]
pub(super) struct Fused {
    /// The delta template (invalid until learned): the whole event, or
    /// the event up to its `sequence_number` when `split`.
    template: ChunkTemplate,
    /// The template ends at the `sequence_number`, followed by `after`.
    split: bool,
    /// The event's bytes after its `sequence_number`, when `split`.
    after: Vec<u8>,
    /// The part its deltas go to (an index into the handler's parts).
    part: usize,
    /// A match's content (the `delta` body).
    found: Contents,
    /// A held tail's walk: the literal segment and byte it stopped at, the
    /// content found in the tail.
    held: (usize, usize, Contents),
    /// The template matched since it was learned.
    hit: bool,
    /// Templates learned in a row that never matched.
    wasted: u8,
    /// Switched on (off only in the differential tests).
    on: bool,
}

impl Default for Fused {
    fn default() -> Self {
        Fused {
            template: ChunkTemplate::default(),
            split: false,
            after: Vec::new(),
            part: 0,
            found: Contents::default(),
            held: (0, 0, Contents::default()),
            hit: false,
            wasted: 0,
            on: true,
        }
    }
}

/// Feeds the content `body` of a match to part `k`'s tracker (none once
/// the part is done: as the general path; `plain` as
/// [`Contents`](crate::rewrite::chat::template::Contents) says).
#[inline(always)]
fn feed(parts: &mut [Part], k: usize, body: &[u8], plain: usize) {
    if let Some(t) = parts.get_mut(k).and_then(|p| p.tracker.as_mut()) {
        t.push_json_after(body, plain);
    }
}

impl Fused {
    /// The end of a match in `s` whose template part ends at `end`: past
    /// the plain integer and [`after`](Self::after) when
    /// [`split`](Self::split), else `end`.
    #[inline(always)]
    fn rest(&self, s: &[u8], end: usize) -> Option<usize> {
        if !self.split {
            return Some(end);
        }
        let digits = json::digits_end(s, end);
        let lead = *s.get(end)?;
        let plain = digits > end && (lead != b'0' || digits == end + 1);
        let n = self.after.len();
        // (Byte by byte: a few bytes, `}` and the blank line, no call.)
        let same = s
            .get(digits..digits + n)?
            .iter()
            .zip(&self.after)
            .all(|(a, b)| a == b);
        (plain && same).then_some(digits + n)
    }
}

impl ResponsesHandler {
    /// Switches the fused path on or off (for the differential tests).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn set_fused(&mut self, on: bool) {
        self.fused.on = on;
    }

    /// Whether the template may be tried: learned, switched on, nothing
    /// inserted yet.
    #[inline(always)]
    fn fused_ready(&self) -> bool {
        self.fused.template.framed && self.shift == 0
    }

    /// The parsed path: whether the delta template matches the whole
    /// event `raw`; its content is then fed (the caller passes the event).
    #[inline]
    pub(super) fn template_hit(&mut self, raw: &[u8]) -> bool {
        if !self.fused_ready() {
            return false;
        }
        let fz = &mut self.fused;
        let end = fz.template.matches_event(raw, &mut fz.found);
        if end.and_then(|e| fz.rest(raw, e)) != Some(raw.len()) {
            return false;
        }
        fz.hit = true;
        let k = fz.part;
        self.last = k;
        if let Some(&(_, start, end, plain)) = fz.found.at.get(..fz.found.n).and_then(<[_]>::first)
        {
            feed(&mut self.parts, k, &raw[start..end], plain);
        }
        true
    }

    /// Learns the delta template from the delta event `f` the general
    /// path read as `sc`, of part `k` (see the module docs for which
    /// events qualify).
    #[cold]
    #[inline(never)]
    pub(super) fn learn(&mut self, f: &FrameRef<'_>, sc: &Scan, k: usize) {
        let fz = &mut self.fused;
        if !fz.on || self.shift > 0 || fz.wasted >= MAX_WASTED {
            return;
        }
        let (raw, d) = (f.raw(), f.data());
        let (Some(dr), Some(delta)) = (f.data_range(), sc.delta) else {
            return;
        };
        let at = dr.start;
        let framed = raw.len() == at + d.len() + 2
            && raw.ends_with(b"\n\n")
            && FRAMINGS.contains(&&raw[..at]);
        if !framed {
            return;
        }
        if fz.template.framed && !fz.hit {
            fz.wasted += 1;
        } else {
            fz.wasted = 0;
        }
        fz.hit = false;
        let seq = sc.seq(d).map(|(r, _)| r);
        let obf = sc.obfuscation.map(Span::range);
        let content = std::iter::once((0, delta.range()));
        // (The delta's token ends a byte after its body.)
        let last = |r: &std::ops::Range<usize>| {
            r.start > delta.1 as usize && obf.as_ref().is_none_or(|o| r.start >= o.end)
        };
        fz.after.clear();
        fz.split = false;
        match seq {
            Some(r) if last(&r) => {
                let holes = obf.as_slice();
                fz.template
                    .learn(&raw[..at + r.start], at, true, content, holes);
                fz.after.extend_from_slice(&raw[at + r.end..]);
                fz.split = true;
            }
            _ => {
                let mut holes = [0..0, 0..0];
                let mut n = 0;
                for (slot, r) in holes.iter_mut().zip(seq.into_iter().chain(obf)) {
                    *slot = r;
                    n += 1;
                }
                fz.template.learn(raw, at, true, content, &holes[..n]);
            }
        }
        fz.part = k;
    }

    /// The fused path: the delta events at the start of `rest` that the
    /// template matches have their text fed and pass through, as the
    /// general path would handle them after a parse; the bytes they take.
    #[inline(always)]
    pub(super) fn fused_events(&mut self, rest: &[u8], max_event: usize) -> usize {
        if !self.fused_ready() {
            return 0;
        }
        let fz = &mut self.fused;
        let k = fz.part;
        let mut pos = 0;
        while pos < rest.len() {
            let ev = &rest[pos..];
            // (A rest shorter than the literal text is the start of an
            // event the next piece completes.)
            if ev.len() < fz.template.literal_len() {
                break;
            }
            let Some(len) = fz
                .template
                .matches_event(ev, &mut fz.found)
                .and_then(|e| fz.rest(ev, e))
            else {
                break;
            };
            // The parser's limit: the bytes before the blank line.
            if len - 1 > max_event {
                break;
            }
            fz.hit = true;
            if let Some(&(_, start, end, plain)) =
                fz.found.at.get(..fz.found.n).and_then(<[_]>::first)
            {
                feed(&mut self.parts, k, &ev[start..end], plain);
            }
            pos += len;
        }
        if pos > 0 {
            self.last = k;
        }
        pos
    }

    /// Whether an event starting with `tail` may be one
    /// [`fused_events`](Self::fused_events) recognises once complete:
    /// [`Tail::Started`] when all of `tail` matches the template's start
    /// and stops in a literal segment (remembered), [`Tail::Maybe`] when
    /// it stops in a hole (or the template is on probation), else
    /// [`Tail::No`].
    #[inline(always)]
    pub(super) fn fused_tail(&mut self, tail: &[u8]) -> Tail {
        if !self.fused_ready() {
            return Tail::No;
        }
        let fz = &mut self.fused;
        let t = &mut fz.template;
        match t.prefix(tail, &mut fz.held.2) {
            Err(Stop::Mismatch) => Tail::No,
            Err(Stop::Short { k, lit }) if !t.on_probation() => {
                (fz.held.0, fz.held.1) = (k, lit);
                Tail::Started
            }
            _ => Tail::Maybe,
        }
    }

    /// The event a [`Tail::Started`] tail starts, completed by `head`: the
    /// walk goes on where it stopped, and on a match (the blank line's LF
    /// before byte `limit` of the event) the content is fed as
    /// [`fused_events`](Self::fused_events) would feed it for the tail and
    /// the head joined. The bytes of `head` taken, or 0.
    #[inline(always)]
    pub(super) fn fused_straddle(&mut self, tail: &[u8], head: &[u8], limit: usize) -> usize {
        if !self.fused_ready() {
            return 0;
        }
        let fz = &mut self.fused;
        let (seg, lit, c) = &mut fz.held;
        let in_tail = c.n;
        let end = fz.template.resume(head, *seg, *lit, c);
        let Some(end) = end.and_then(|e| fz.rest(head, e)) else {
            return 0;
        };
        if tail.len() + end > limit {
            return 0;
        }
        fz.hit = true;
        let (k, c) = (fz.part, &fz.held.2);
        self.last = k;
        for n in 0..c.n {
            let (_, start, end, plain) = c.at[n];
            let s = if n < in_tail { tail } else { head };
            feed(&mut self.parts, k, &s[start..end], plain);
        }
        end
    }
}

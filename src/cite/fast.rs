//! The tracker's fast path: the common pieces of content (plain paragraph
//! text, line starts, JSON escapes such as `\n`, whole markers, backtick
//! runs, fence lines) decoded and scanned in one pass over the bytes, with
//! no per-character calls.
//!
//! It applies only when no escape, surrogate, UTF-8 sequence or marker is
//! pending, and it stops (leaving the rest to the general path in
//! [`tracker`](super::tracker)) before anything it does not handle: a
//! `\uXXXX` or invalid escape, an invalid or incomplete UTF-8 sequence, a
//! marker or backtick run the piece cuts off, a possible fence, any fence
//! line start. Everything it does consume leaves exactly the state the
//! general path leaves: `tests::fast_path_equals_general_path` checks it
//! split everywhere, and the `cite_split` fuzz target on arbitrary input.

use super::scanner::{BYTE_CLASS, Escape, LINE_START, Line, NON_ASCII, STOP_FENCE, utf8_seq_len};
use super::tracker::Feed;
use super::{Marker, MarkerTracker};
use crate::json::simple_escape;

/// Whether `s` holds none of the bytes [`BYTE_CLASS`] marks: sixteen
/// bytes a step where [`simd`](super::simd) is built, four bytes a step
/// for the short pieces (most streamed tokens) and in other builds.
#[inline(always)]
pub(super) fn is_plain(s: &[u8]) -> bool {
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "sse2",
        not(citestream_disable_simd)
    ))]
    if let Some(end) = super::simd::stop_from(s, 0) {
        return end == s.len();
    }
    let class = |b: u8| BYTE_CLASS[usize::from(b)];
    let mut quads = s.chunks_exact(4);
    for q in &mut quads {
        if class(q[0]) | class(q[1]) | class(q[2]) | class(q[3]) != 0 {
            return false;
        }
    }
    quads.remainder().iter().all(|&b| class(b) == 0)
}

/// The JSON string token at the start of `b` (`b[0]` its opening quote):
/// its length with both quotes and how many of its body's first bytes are
/// *plain*, none of the bytes [`BYTE_CLASS`] marks, so that
/// [`MarkerTracker::push_json_after`] does not scan them again (all of
/// them, the common case: the body is taken without a scan). `None` when
/// [`json::scan_string`](crate::json::scan_string) rejects the token; the
/// length is always the one it gives.
///
/// Where [`simd`](super::simd) is built and sixteen bytes follow the
/// quote, one pass stops at the first byte that ends the string's plain
/// run or is marked: the closing quote means all plain; anything else and
/// the string scan goes on from there. Elsewhere (and for the last few
/// bytes of a piece) the string scan alone answers, none known plain.
#[inline(always)]
pub(crate) fn content_token(b: &[u8]) -> Option<(usize, usize)> {
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "sse2",
        not(citestream_disable_simd)
    ))]
    if let Some((b'"', block)) = b.split_first().map(|(q, r)| (*q, r.first_chunk::<16>())) {
        // The first block inline (most contents end in it), the rest by
        // the loop; `at` is the first flagged byte of the body.
        let at = match block.map(super::simd::content_mask) {
            Some(0) => super::simd::content_from(b, 17),
            Some(m) => Some(1 + m.trailing_zeros() as usize),
            None => None,
        };
        if let Some(at) = at {
            return match b.get(at) {
                Some(b'"') => Some((at + 1, at - 1)),
                // (Nothing before `at` ends the string's plain run.)
                Some(_) => crate::json::scan_string_rest(b, at)
                    .ok()
                    .map(|(e, _)| (e, at - 1)),
                None => None,
            };
        }
    }
    crate::json::scan_string(b, 0).ok().map(|(e, _)| (e, 0))
}

/// Index of the first byte at or after `i` that [`BYTE_CLASS`] marks, or
/// `s.len()` (`i` when `i` is past the end): sixteen bytes a step where
/// [`simd`](super::simd) is built and `s` is that long, else a byte a step.
#[inline(always)]
fn plain_end(s: &[u8], mut i: usize) -> usize {
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "sse2",
        not(citestream_disable_simd)
    ))]
    if let Some(end) = super::simd::stop_from(s, i) {
        return end;
    }
    while s.get(i).is_some_and(|&b| BYTE_CLASS[usize::from(b)] == 0) {
        i += 1;
    }
    i
}

/// Stands for any non-ASCII character in [`MarkerTracker::fast_text`] (no
/// rule looks at which one it is).
const OTHER: u8 = 0x80;

/// What [`MarkerTracker::start_char`] did with a character.
enum Start {
    /// It was leading whitespace or a blank line's LF.
    Consumed,
    /// The line's text starts with it: read it again as paragraph text.
    Reread,
    /// A possible fence: the general path decides.
    Stop,
}

impl MarkerTracker {
    /// The most common piece, handled without a call: `text_idle` (paragraph
    /// text, nothing pending, not finished) and none of the bytes
    /// [`BYTE_CLASS`] marks in `s` (a few ASCII characters of a streamed
    /// token). Returns whether `s` was that (and is consumed).
    #[inline(always)]
    pub(super) fn plain_text(&mut self, s: &[u8]) -> bool {
        debug_assert!(!self.text_idle || (self.is_text_idle() && !self.scan.prev_backslash));
        if !(self.text_idle && is_plain(s)) {
            return false;
        }
        // No backslash before or in `s`: `prev_backslash` stays false.
        self.scan.pos += s.len() as u64;
        true
    }

    /// What `text_idle` stands for, computed.
    pub(super) fn is_text_idle(&self) -> bool {
        !self.finished
            && matches!(self.scan.line, Line::Text)
            && self.scan.run == 0
            && self.scan.mark.is_none()
            && matches!(self.escape, Escape::None)
            && self.high == 0
            && self.utf8_len == 0
    }

    /// Consumes the longest prefix of `s` the fast path handles and returns
    /// its length (0 when the state is not one it handles).
    #[inline(always)]
    pub(super) fn fast_prefix(&mut self, s: &[u8], feed: Feed) -> usize {
        if !matches!(self.escape, Escape::None)
            || self.high != 0
            || self.utf8_len != 0
            || self.scan.mark.is_some()
        {
            return 0;
        }
        match self.scan.line {
            Line::Text | Line::Start { .. } => self.fast_text(s, feed),
            Line::FenceSkip => self.fast_fence(s),
            _ => 0,
        }
    }

    /// The rest of a fence line: everything but a backslash (an escape may
    /// be `\n`) or LF only advances the position.
    fn fast_fence(&mut self, s: &[u8]) -> usize {
        let mut i = 0;
        // Width in bytes minus width in the unit, of what was consumed.
        let mut narrow = 0;
        while let Some(&b) = s.get(i) {
            if BYTE_CLASS[usize::from(b)] & STOP_FENCE != 0 {
                break;
            } else if b < 0x80 {
                i += 1;
            } else if let Some(n) = utf8_seq_len(&s[i..]) {
                i += n;
                narrow += n as u64 - self.unit.width(n);
            } else {
                break;
            }
        }
        if i != 0 {
            self.scan.pos += i as u64 - narrow;
            self.scan.prev_backslash = false;
        }
        i
    }

    /// Paragraph text and line starts outside fences (the scanner's `Text`
    /// and `Start` states), with no marker pending; a backtick run may be.
    /// Runs of text go to [`text_run`](Self::text_run); this handles what
    /// stops it: escapes, backtick runs, line breaks and line starts.
    #[inline]
    fn fast_text(&mut self, s: &[u8], feed: Feed) -> usize {
        let json = feed == Feed::Json;
        let mut i = 0;
        if self.scan.run != 0 {
            i = self.carried_run(s, json);
            if self.scan.run != 0 {
                return i;
            }
        }
        loop {
            if self.scan.line == Line::Text {
                // Plain ASCII inline; `text_run` for what else it takes.
                let from = i;
                i = plain_end(s, i);
                if i != from {
                    self.scan.pos += (i - from) as u64;
                    self.scan.prev_backslash = false;
                }
                if s.get(i).is_some_and(|&b| b == b'[' || b >= 0x80) {
                    i += self.text_run(&s[i..], 0);
                }
            }
            let Some(&b) = s.get(i) else {
                break;
            };
            // Decode one character: `c` (ASCII, or OTHER), `n` bytes long,
            // `w` units wide.
            let (c, n, w) = if b >= 0x80 {
                let Some(n) = utf8_seq_len(&s[i..]) else {
                    break;
                };
                (OTHER, n, self.unit.width(n))
            } else if b == b'\\' && json {
                let Some(c) = s.get(i + 1).and_then(|&e| simple_escape(e)) else {
                    break;
                };
                (c, 2, 1)
            } else {
                (b, 1, 1)
            };
            match self.scan.line {
                Line::Text => match c {
                    // Not after a backslash: `text_run` stopped before it.
                    b'[' if !self.scan.prev_backslash => break,
                    b'`' => {
                        let k = s[i..].iter().take_while(|&&b| b == b'`').count();
                        let run = u32::try_from(k).unwrap_or(u32::MAX);
                        i += k;
                        self.scan.pos += k as u64;
                        self.scan.prev_backslash = false;
                        match s.get(i) {
                            // Open, or an escape that may be a backtick.
                            None | Some(b'\\') => {
                                self.scan.run = run;
                                break;
                            }
                            Some(_) => self.scan.end_run(run),
                        }
                        continue;
                    }
                    b'\n' => self.scan.line = LINE_START,
                    _ => {}
                },
                Line::Start { spaces, eligible } => match self.start_char(c, spaces, eligible) {
                    Start::Consumed => {}
                    Start::Reread => continue,
                    Start::Stop => break,
                },
                _ => break,
            }
            i += n;
            self.scan.pos += w;
            self.scan.prev_backslash = c == b'\\';
        }
        i
    }

    /// A backtick run left open by the previous piece (`run != 0`):
    /// extends it with the backticks `s` starts with and ends it before
    /// anything else, unless that is a JSON escape (it may be a backtick).
    /// Returns the bytes consumed; the run is still open if `run != 0`.
    fn carried_run(&mut self, s: &[u8], json: bool) -> usize {
        let k = s.iter().take_while(|&&b| b == b'`').count();
        if k != 0 {
            self.scan.prev_backslash = false;
            self.scan.pos += k as u64;
        }
        let run = self
            .scan
            .run
            .saturating_add(u32::try_from(k).unwrap_or(u32::MAX));
        if k == s.len() || (json && s[k] == b'\\') {
            self.scan.run = run;
        } else {
            self.scan.run = 0;
            self.scan.end_run(run);
        }
        k
    }

    /// The decoded ASCII character (or [`OTHER`]) `c` at a line start
    /// outside fences, as `Scanner::start_step` reads it; a possible fence
    /// is left to the general path.
    fn start_char(&mut self, c: u8, spaces: u8, eligible: bool) -> Start {
        match c {
            b' ' => {
                let more = eligible && spaces < 3;
                self.scan.line = Line::Start {
                    spaces: spaces + u8::from(more),
                    eligible: more,
                };
            }
            b'\t' | b'\r' => {
                self.scan.line = Line::Start {
                    spaces,
                    eligible: false,
                }
            }
            b'\n' => {
                self.scan.end_paragraph();
                self.scan.line = LINE_START;
            }
            b'`' | b'~' if eligible => return Start::Stop,
            _ => {
                // The line's text starts with `c`: read it again as text.
                self.scan.line = Line::Text;
                return Start::Reread;
            }
        }
        Start::Consumed
    }

    /// Paragraph text with nothing pending: consumes ASCII characters that
    /// change nothing, valid UTF-8 sequences, a `[` right after a
    /// backslash and whole markers `[n]` (recorded if they count), and
    /// returns the bytes consumed. Stops before a backslash, LF, backtick,
    /// invalid or incomplete UTF-8 and a marker the piece cuts off. The
    /// first `plain` bytes hold none of the bytes [`BYTE_CLASS`] marks
    /// (the caller has seen them): the run starts after them.
    #[inline(never)]
    pub(super) fn text_run(&mut self, s: &[u8], plain: usize) -> usize {
        debug_assert!(s.get(..plain).is_some_and(is_plain));
        let mut i = plain.min(s.len());
        // Width in bytes minus width in the unit, of what was consumed: the
        // position of byte `i` is `pos0 + i - narrow`.
        let mut narrow = 0;
        let pos0 = self.scan.pos;
        let cont = |j: usize| s.get(j).is_some_and(|&c| c & 0xC0 == 0x80);
        while let Some(&b) = s.get(i) {
            match BYTE_CLASS[usize::from(b)] {
                0 => i = plain_end(s, i + 1),
                // The common sequences first (no surrogate or overlong
                // form starts with these leads).
                NON_ASCII if (0xC2..=0xDF).contains(&b) && cont(i + 1) => {
                    i += 2;
                    narrow += 2 - self.unit.width(2);
                }
                NON_ASCII
                    if matches!(b, 0xE1..=0xEC | 0xEE..=0xEF) && cont(i + 1) && cont(i + 2) =>
                {
                    i += 3;
                    narrow += 3 - self.unit.width(3);
                }
                NON_ASCII => match utf8_seq_len(&s[i..]) {
                    Some(n) => {
                        i += n;
                        narrow += n as u64 - self.unit.width(n);
                    }
                    None => break,
                },
                // Only the first byte can follow a backslash: one stops
                // the run.
                _ if b == b'[' && i == 0 && self.scan.prev_backslash => i += 1,
                _ if b == b'[' => match self.fast_marker(s, i, pos0 + i as u64 - narrow) {
                    Some(end) => i = end,
                    None => break,
                },
                _ => break,
            }
        }
        if i != 0 {
            self.scan.pos = pos0 + i as u64 - narrow;
            self.scan.prev_backslash = false;
        }
        i
    }

    /// A `[` at `s[at]` (position `start`) that opens a marker: reads the
    /// digits and the byte after them, records the marker if it is one,
    /// and returns where scanning resumes (after the `]`, or at the byte
    /// that ended the digits, which is then read normally). `None` when the
    /// piece ends first or a backslash follows the digits (in JSON, an
    /// escape that may decode to a digit or `]`).
    #[inline]
    fn fast_marker(&mut self, s: &[u8], at: usize, start: u64) -> Option<usize> {
        let mut j = at + 1;
        let mut value = 0u32;
        let mut digits = 0;
        while digits < 4 {
            match s.get(j) {
                Some(&d @ b'0'..=b'9') if !(digits == 0 && d == b'0') => {
                    value = value * 10 + u32::from(d - b'0');
                    digits += 1;
                    j += 1;
                }
                _ => break,
            }
        }
        match *s.get(j)? {
            b'\\' => None,
            b']' => {
                if digits > 0 && value >= 1 && value <= self.scan.max_number {
                    self.scan.found(Marker {
                        number: value,
                        start,
                        end: start + (j + 1 - at) as u64,
                    });
                }
                Some(j + 1)
            }
            _ => Some(j),
        }
    }
}

//! [`MarkerTracker`]: the public face of the marker scanner, fed raw
//! JSON string bodies or decoded text, in pieces split anywhere.

use super::scanner::{Escape, Scanner, ascii_prefix_len, find1, utf8_seq_len};
use super::{Marker, OffsetUnit};
use crate::json::simple_escape;

/// Which decoder [`MarkerTracker::push_rest`] drives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Feed {
    /// Raw JSON string bodies ([`MarkerTracker::decode_json`]).
    Json,
    /// Decoded UTF-8 text ([`MarkerTracker::raw`]).
    Text,
}

/// Finds citation markers in the content of one chat choice, fed in pieces,
/// and reports their offsets.
///
/// Feed a tracker either with [`push_json`](Self::push_json) (raw JSON string
/// bodies) or with [`push_text`](Self::push_text) (decoded text), not both:
/// mixing them never panics, but a JSON escape or surrogate left pending by
/// one is not completed by the other, so offsets are then unspecified.
/// After [`finish`](Self::finish), further input is ignored.
///
/// The tracker keeps a few counters, at most 3 bytes of an incomplete UTF-8
/// sequence, the markers held back by an undecided code span, the lengths
/// of nested undecided spans and the markers found; never the content. See
/// the [module documentation](crate::cite) for the rules and the design.
///
/// # Example
///
/// ```
/// use citestream::cite::{Marker, MarkerTracker, OffsetUnit};
///
/// let mut t = MarkerTracker::new(2, OffsetUnit::Chars);
/// // Streamed `delta.content` bodies, split anywhere (here inside `\u00e9`).
/// t.push_json(br#"Caf\u00"#);
/// t.push_json(br#"e9 [1], `[2]` [3]\n"#);
/// t.push_json(b"[2");
/// assert_eq!(t.markers(), &[Marker { number: 1, start: 5, end: 8 }]);
/// t.push_json(b"]");
/// t.finish();
/// assert_eq!(
///     t.markers(),
///     &[
///         Marker { number: 1, start: 5, end: 8 },
///         Marker { number: 2, start: 20, end: 23 },
///     ]
/// );
/// assert_eq!(t.len(), 23);
/// ```
#[derive(Clone, Debug)]
pub struct MarkerTracker {
    pub(super) scan: Scanner,
    pub(super) unit: OffsetUnit,
    pub(super) escape: Escape,
    /// Pending high surrogate from a `\u` escape (0: none).
    pub(super) high: u16,
    /// Incomplete UTF-8 sequence (a valid prefix) and its length.
    utf8: [u8; 3],
    pub(super) utf8_len: u8,
    pub(super) finished: bool,
    /// Not finished, the state is paragraph text with nothing pending, and
    /// the last character is not a backslash (see
    /// [`plain_text`](Self::plain_text)). Set only when the general
    /// entry of a feed returns; a plain piece keeps it true.
    pub(super) text_idle: bool,
}

impl MarkerTracker {
    /// Creates a tracker for which the markers `[1]..=[max_number]` count
    /// (`max_number` is the number of sources; 0 means no marker counts, and
    /// numbers above 9999 never count since a marker has at most 4 digits),
    /// reporting offsets in `unit`.
    ///
    /// # Panics
    ///
    /// Never panics.
    #[must_use]
    pub fn new(max_number: u32, unit: OffsetUnit) -> Self {
        MarkerTracker {
            scan: Scanner::new(max_number),
            unit,
            escape: Escape::None,
            high: 0,
            utf8: [0; 3],
            utf8_len: 0,
            finished: false,
            text_idle: false,
        }
    }

    /// The unit of the offsets this tracker reports.
    #[must_use]
    pub fn unit(&self) -> OffsetUnit {
        self.unit
    }

    /// The largest marker number that counts, as given to
    /// [`new`](Self::new).
    #[must_use]
    pub fn max_number(&self) -> u32 {
        self.scan.max_number
    }

    /// Feeds a piece of a raw JSON string body: the bytes between the quotes,
    /// escapes not decoded. Pieces may be split at any byte (inside an
    /// escape, between the halves of a surrogate pair, inside a UTF-8
    /// sequence, inside a marker).
    ///
    /// Invalid input is never an error: see the module documentation for the
    /// U+FFFD rules. Ignored after [`finish`](Self::finish).
    ///
    /// # Panics
    ///
    /// Never panics.
    pub fn push_json(&mut self, escaped: &[u8]) {
        if self.plain_text(escaped) || self.finished {
            return;
        }
        let n = if self.text_idle {
            self.text_run(escaped, 0)
        } else {
            0
        };
        if n < escaped.len() {
            self.push_rest(&escaped[n..], Feed::Json);
        }
    }

    /// [`push_json`](Self::push_json) of a body whose first `plain` bytes
    /// [`content_token`] found plain (none of the bytes that stop the fast
    /// path in them): the same state after, without scanning them again (a
    /// body plain throughout without any scan).
    ///
    /// [`content_token`]: super::content_token
    #[inline(always)]
    pub(crate) fn push_json_after(&mut self, escaped: &[u8], plain: usize) {
        if !self.text_idle {
            return self.push_json(escaped);
        }
        if plain >= escaped.len() {
            debug_assert!(super::fast::is_plain(escaped));
            // As `plain_text`: no backslash, `prev_backslash` stays false.
            self.scan.pos += escaped.len() as u64;
            return;
        }
        // `text_idle`: not finished, and the plain-piece test would fail.
        let n = self.text_run(escaped, plain);
        if n < escaped.len() {
            self.push_rest(&escaped[n..], Feed::Json);
        }
    }

    /// The general JSON decoder behind [`push_json`](Self::push_json): every
    /// byte through the escape, UTF-8 and scanner state machines.
    fn decode_json(&mut self, escaped: &[u8]) {
        let mut s = escaped;
        while let Some((&b, rest)) = s.split_first() {
            match self.escape {
                Escape::None => {
                    let raw_len = find1(b'\\', s).unwrap_or(s.len());
                    if raw_len > 0 {
                        self.flush_high();
                        self.raw(&s[..raw_len]);
                    }
                    match s.get(raw_len..) {
                        Some([_, rest @ ..]) => {
                            // A backslash: no UTF-8 sequence continues with it.
                            self.flush_utf8();
                            self.escape = Escape::Backslash;
                            s = rest;
                        }
                        _ => s = &[],
                    }
                }
                Escape::Backslash => {
                    if let Some(c) = simple_escape(b) {
                        self.escape = Escape::None;
                        self.flush_high();
                        self.scan.ascii(&[c]);
                        s = rest;
                    } else if b == b'u' {
                        self.escape = Escape::Hex {
                            digits: 0,
                            value: 0,
                        };
                        s = rest;
                    } else {
                        // Invalid escape: U+FFFD for the backslash, and `b`
                        // is processed normally (not consumed here).
                        self.invalid_escape();
                    }
                }
                Escape::Hex { digits, value } => {
                    if let Some(h) = (b as char).to_digit(16) {
                        let value = value << 4 | h as u16;
                        s = rest;
                        if digits == 3 {
                            self.escape = Escape::None;
                            self.code_unit(value);
                        } else {
                            self.escape = Escape::Hex {
                                digits: digits + 1,
                                value,
                            };
                        }
                    } else {
                        self.invalid_escape();
                    }
                }
            }
        }
    }

    /// Feeds a piece of decoded text as UTF-8 bytes. Pieces may be split at
    /// any byte; invalid UTF-8 counts as U+FFFD per maximal subpart, like
    /// [`String::from_utf8_lossy`]. Ignored after [`finish`](Self::finish).
    ///
    /// # Panics
    ///
    /// Never panics.
    pub fn push_text(&mut self, text: &[u8]) {
        if self.plain_text(text) || self.finished {
            return;
        }
        let n = if self.text_idle {
            self.text_run(text, 0)
        } else {
            0
        };
        if n < text.len() {
            self.push_rest(&text[n..], Feed::Text);
        }
    }

    /// A piece that is not [`plain_text`](Self::plain_text): the fast path
    /// ([`fast_prefix`](Self::fast_prefix)) as far as it goes, then from a
    /// byte it does not handle, small steps through the general path, back
    /// to the fast path after each.
    ///
    /// A step is one ASCII byte straight to the scanner when no escape,
    /// surrogate or UTF-8 sequence is pending (what the general path does
    /// with it), else a few bytes through the general decoder: an escape's
    /// first two bytes, a whole UTF-8 sequence, or one byte. The decoders
    /// are split-invariant, so where a step ends changes nothing but the
    /// cost.
    #[inline(never)]
    fn push_rest(&mut self, mut s: &[u8], feed: Feed) {
        loop {
            s = &s[self.fast_prefix(s, feed)..];
            if s.is_empty() {
                break;
            }
            s = &s[self.general_step(s, feed)..];
        }
        self.text_idle = self.is_text_idle() && !self.scan.prev_backslash;
    }

    /// One step of [`push_rest`](Self::push_rest) through the general path
    /// on non-empty `s`; returns the bytes consumed (at least 1).
    #[inline(never)]
    fn general_step(&mut self, s: &[u8], feed: Feed) -> usize {
        let Some(&b) = s.first() else {
            return 0;
        };
        let idle = matches!(self.escape, Escape::None) && self.high == 0 && self.utf8_len == 0;
        if idle && b < 0x80 && (b != b'\\' || feed == Feed::Text) {
            self.scan.byte(b);
            return 1;
        }
        if let Some(c) = s
            .get(1)
            .filter(|_| idle && b == b'\\')
            .and_then(|&e| simple_escape(e))
        {
            // What `decode_json` does with an escape such as `\n`.
            self.scan.byte(c);
            return 2;
        }
        let k = match b {
            b'\\' => 2,
            0x80.. => utf8_seq_len(s).unwrap_or(1),
            _ => 1,
        };
        let (step, _) = s.split_at(k.min(s.len()));
        match feed {
            Feed::Json => self.decode_json(step),
            Feed::Text => self.raw(step),
        }
        step.len()
    }

    /// [`push_json`](Self::push_json) without the fast path: the other
    /// side of the fast-path differential (unit tests and fuzzing only).
    #[cfg(any(test, fuzzing))]
    #[doc(hidden)]
    pub fn push_json_general(&mut self, escaped: &[u8]) {
        if !self.finished {
            self.text_idle = false;
            self.decode_json(escaped);
        }
    }

    /// [`push_text`](Self::push_text) without the fast path (unit tests and
    /// fuzzing only).
    #[cfg(any(test, fuzzing))]
    #[doc(hidden)]
    pub fn push_text_general(&mut self, text: &[u8]) {
        if !self.finished {
            self.text_idle = false;
            self.raw(text);
        }
    }

    /// Ends the content: a pending high surrogate, an unfinished escape and
    /// an incomplete UTF-8 sequence each count as one U+FFFD, an undecided
    /// code span opener is literal, and every marker becomes final.
    /// Idempotent.
    ///
    /// # Panics
    ///
    /// Never panics.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.text_idle = false;
        if self.escape != Escape::None {
            self.invalid_escape();
        }
        self.flush_high();
        self.flush_utf8();
        self.scan.finish();
    }

    /// The markers that are final so far, in content order; after
    /// [`finish`](Self::finish), all of them (minus those already taken with
    /// [`take_markers`](Self::take_markers)).
    ///
    /// A marker is final once no undecided inline code span precedes it in
    /// its paragraph.
    #[must_use]
    pub fn markers(&self) -> &[Marker] {
        &self.scan.markers
    }

    /// Takes the final markers found so far (see [`markers`](Self::markers))
    /// out of the tracker; the next call returns only markers found after
    /// this one.
    #[must_use]
    pub fn take_markers(&mut self) -> Vec<Marker> {
        core::mem::take(&mut self.scan.markers)
    }

    /// Length of the content decoded so far, in the tracker's unit. Bytes of
    /// an incomplete UTF-8 sequence or escape are counted once decided.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.scan.pos
    }

    /// Whether no content has been decoded so far (`len() == 0`).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.scan.pos == 0
    }

    /// Whether [`finish`](Self::finish) has been called.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// One U+FFFD.
    fn replacement(&mut self) {
        self.scan.other(self.unit.width(3));
    }

    /// An invalid or unfinished escape: the pending high surrogate (if any)
    /// and then the escape each count as one U+FFFD.
    fn invalid_escape(&mut self) {
        self.escape = Escape::None;
        self.flush_high();
        self.replacement();
    }

    /// A pending high surrogate is not followed by a low one.
    fn flush_high(&mut self) {
        if self.high != 0 {
            self.high = 0;
            self.replacement();
        }
    }

    /// An incomplete UTF-8 sequence is not continued.
    fn flush_utf8(&mut self) {
        if self.utf8_len != 0 {
            self.utf8_len = 0;
            self.replacement();
        }
    }

    /// The UTF-16 code unit of a complete `\uXXXX` escape.
    fn code_unit(&mut self, u: u16) {
        match u {
            0xD800..=0xDBFF => {
                self.flush_high();
                self.high = u;
            }
            0xDC00..=0xDFFF => {
                if self.high != 0 {
                    self.high = 0;
                    self.scan.other(self.unit.width(4));
                } else {
                    self.replacement();
                }
            }
            _ => {
                self.flush_high();
                if u < 0x80 {
                    self.scan.ascii(&[u as u8]);
                } else {
                    let len = if u < 0x800 { 2 } else { 3 };
                    self.scan.other(self.unit.width(len));
                }
            }
        }
    }

    /// Raw UTF-8 bytes (of text, or of a JSON string between escapes).
    fn raw(&mut self, mut s: &[u8]) {
        // Complete a sequence left incomplete by the previous piece, one
        // byte at a time.
        while self.utf8_len != 0 {
            let Some((&b, rest)) = s.split_first() else {
                return;
            };
            let n = usize::from(self.utf8_len).min(3);
            let mut buf = [0u8; 4];
            buf[..n].copy_from_slice(&self.utf8[..n]);
            buf[n] = b;
            match core::str::from_utf8(&buf[..=n]) {
                Ok(_) => {
                    self.utf8_len = 0;
                    self.scan.other(self.unit.width(n + 1));
                    s = rest;
                }
                Err(e) if e.error_len().is_none() && n < 3 => {
                    self.utf8[n] = b;
                    self.utf8_len += 1;
                    s = rest;
                }
                Err(_) => {
                    // `b` cannot continue the sequence: the prefix is one
                    // maximal subpart, and `b` is processed normally.
                    self.flush_utf8();
                }
            }
        }
        // ASCII runs go straight to the scanner; runs of non-ASCII bytes are
        // validated and counted in bulk.
        while !s.is_empty() {
            let k = ascii_prefix_len(s);
            let (ascii, rest) = s.split_at(k);
            if !ascii.is_empty() {
                self.scan.ascii(ascii);
            }
            let m = rest.iter().position(|&b| b < 0x80).unwrap_or(rest.len());
            let (run, rest) = rest.split_at(m);
            if !run.is_empty() {
                self.non_ascii(run, rest.is_empty());
            }
            s = rest;
        }
    }

    /// A maximal run of non-ASCII bytes; `at_end`: nothing follows it in this
    /// piece, so an incomplete sequence at its end may continue in the next.
    fn non_ascii(&mut self, mut run: &[u8], at_end: bool) {
        loop {
            match core::str::from_utf8(run) {
                Ok(_) => {
                    if !run.is_empty() {
                        self.scan.other(self.unit.width_of_utf8(run));
                    }
                    return;
                }
                Err(e) => {
                    let (ok, bad) = run.split_at(e.valid_up_to());
                    if !ok.is_empty() {
                        self.scan.other(self.unit.width_of_utf8(ok));
                    }
                    match e.error_len() {
                        Some(n) => {
                            self.replacement();
                            run = bad.get(n..).unwrap_or_default();
                        }
                        None if at_end => {
                            let n = bad.len().min(3);
                            self.utf8[..n].copy_from_slice(&bad[..n]);
                            self.utf8_len = n as u8;
                            return;
                        }
                        None => {
                            // Cut off by an ASCII byte: one maximal subpart.
                            self.replacement();
                            return;
                        }
                    }
                }
            }
        }
    }
}

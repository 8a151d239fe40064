//! The scanner: the per-paragraph state machine that finds `[n]` markers
//! in text fed in pieces, code-aware (inline code spans and fences hide
//! markers), with the JSON string escapes of raw chunk text decoded on the
//! fly ([`Escape`]). [`MarkerTracker`](super::MarkerTracker) drives it and
//! converts positions to the configured offset unit.

use memchr::{memchr, memchr3};

use super::Marker;

/// `memchr` for long input; a plain loop for the few bytes of a typical
/// streamed delta, where the call and setup cost more than they save.
#[inline]
pub(super) fn find1(a: u8, s: &[u8]) -> Option<usize> {
    if s.len() <= 16 {
        s.iter().position(|&c| c == a)
    } else {
        memchr(a, s)
    }
}

/// `memchr3` with the same short-input loop as [`find1`].
#[inline]
fn find3(a: u8, b: u8, c: u8, s: &[u8]) -> Option<usize> {
    if s.len() <= 16 {
        s.iter().position(|&x| x == a || x == b || x == c)
    } else {
        memchr3(a, b, c, s)
    }
}

/// Line-level state of the scanner (see the module's state table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Line {
    /// Leading whitespace of a line outside fences. `eligible`: only spaces
    /// so far, at most 3 of them, so a fence may still open here.
    Start { spaces: u8, eligible: bool },
    /// Leading run of `ch` (a backtick or a tilde) of length `len`.
    Lead { ch: u8, len: u32 },
    /// Paragraph text after the line start.
    Text,
    /// Start of a line inside a fence, after `spaces` spaces.
    FenceStart { spaces: u8 },
    /// A run of the fence character at the start of a fence line.
    FenceRun { len: u32 },
    /// Spaces, tabs or CR after a long enough closing run.
    FenceTrail,
    /// The rest of a line inside a fence.
    FenceSkip,
}

pub(super) const LINE_START: Line = Line::Start {
    spaces: 0,
    eligible: true,
};

/// A marker whose `[` has been seen.
#[derive(Clone, Copy, Debug)]
pub(super) struct OpenMarker {
    start: u64,
    value: u16,
    digits: u8,
}

/// An undecided code span opener below the first one (see
/// [`Scanner::end_run`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Opener {
    /// Length of its backtick run.
    pub(super) len: u32,
    /// Index in `Scanner::pending` of the first marker found after it.
    pub(super) first_marker: usize,
}

/// The decoded-character state machine: lines, fences, code spans, markers.
#[derive(Clone, Debug)]
pub(super) struct Scanner {
    /// Offset of the next character, in the tracker's unit.
    pub(super) pos: u64,
    pub(super) max_number: u32,
    pub(super) line: Line,
    /// Character and length of the open fence (meaningful in fence states).
    pub(super) fence_ch: u8,
    pub(super) fence_len: u32,
    /// The previous character was a backslash.
    pub(super) prev_backslash: bool,
    /// Length of the backtick run in progress in `Text` (0: none).
    pub(super) run: u32,
    /// Length of the first undecided code span opener of this paragraph
    /// (0: none).
    pub(super) open: u32,
    /// The openers nested under `open`, outermost first (empty unless
    /// `open != 0`).
    pub(super) deeper: Vec<Opener>,
    pub(super) mark: Option<OpenMarker>,
    /// Markers found after `open`, in content order.
    pub(super) pending: Vec<Marker>,
    /// Final markers, in content order.
    pub(super) markers: Vec<Marker>,
}

impl Scanner {
    pub(super) fn new(max_number: u32) -> Self {
        Scanner {
            pos: 0,
            max_number,
            line: LINE_START,
            fence_ch: 0,
            fence_len: 0,
            prev_backslash: false,
            run: 0,
            open: 0,
            deeper: Vec::new(),
            mark: None,
            pending: Vec::new(),
            markers: Vec::new(),
        }
    }

    /// Feeds ASCII characters (every byte `< 0x80`).
    pub(super) fn ascii(&mut self, s: &[u8]) {
        let mut i = 0;
        while i < s.len() {
            match self.line {
                Line::Text if self.run == 0 && self.mark.is_none() => {
                    // Fast path: only `[`, a backtick or LF change anything.
                    let rest = &s[i..];
                    match find3(b'[', b'`', b'\n', rest) {
                        Some(k) => {
                            self.skip(&rest[..k]);
                            self.byte(rest[k]);
                            i += k + 1;
                        }
                        None => {
                            self.skip(rest);
                            i = s.len();
                        }
                    }
                }
                Line::FenceSkip => {
                    // Inside a fence only the next line start matters.
                    let rest = &s[i..];
                    match find1(b'\n', rest) {
                        Some(k) => {
                            self.skip(&rest[..k]);
                            self.byte(b'\n');
                            i += k + 1;
                        }
                        None => {
                            self.skip(rest);
                            i = s.len();
                        }
                    }
                }
                _ => {
                    self.byte(s[i]);
                    i += 1;
                }
            }
        }
    }

    /// Advances over ASCII characters that change no state.
    #[inline]
    pub(super) fn skip(&mut self, s: &[u8]) {
        if let Some(&last) = s.last() {
            self.pos += s.len() as u64;
            self.prev_backslash = last == b'\\';
        }
    }

    /// Feeds one ASCII character.
    #[inline]
    pub(super) fn byte(&mut self, b: u8) {
        self.step(b);
        self.pos += 1;
        self.prev_backslash = b == b'\\';
    }

    /// One character at the start of a line (up to three spaces of
    /// indentation, then maybe a fence's leading run).
    #[inline]
    fn start_step(&mut self, b: u8, spaces: u8, eligible: bool) {
        match b {
            b' ' => {
                self.line = if eligible && spaces < 3 {
                    Line::Start {
                        spaces: spaces + 1,
                        eligible,
                    }
                } else {
                    Line::Start {
                        spaces,
                        eligible: false,
                    }
                }
            }
            b'\t' | b'\r' => {
                self.line = Line::Start {
                    spaces,
                    eligible: false,
                }
            }
            b'\n' => {
                // A blank line ends the paragraph.
                self.end_paragraph();
                self.line = LINE_START;
            }
            b'`' | b'~' if eligible => self.line = Line::Lead { ch: b, len: 1 },
            _ => {
                self.line = Line::Text;
                self.text(b);
            }
        }
    }

    pub(super) fn step(&mut self, b: u8) {
        match self.line {
            Line::Start { spaces, eligible } => self.start_step(b, spaces, eligible),
            Line::Lead { ch, len } => {
                if b == ch {
                    self.line = Line::Lead {
                        ch,
                        len: len.saturating_add(1),
                    };
                } else {
                    self.end_lead(ch, len);
                    self.step(b);
                }
            }
            Line::Text => self.text(b),
            Line::FenceStart { spaces } => {
                self.line = match b {
                    b' ' if spaces < 3 => Line::FenceStart { spaces: spaces + 1 },
                    b'\n' => Line::FenceStart { spaces: 0 },
                    _ if b == self.fence_ch => Line::FenceRun { len: 1 },
                    _ => Line::FenceSkip,
                }
            }
            Line::FenceRun { len } => {
                self.line = if b == self.fence_ch {
                    Line::FenceRun {
                        len: len.saturating_add(1),
                    }
                } else if len >= self.fence_len {
                    match b {
                        b' ' | b'\t' | b'\r' => Line::FenceTrail,
                        b'\n' => LINE_START,
                        _ => Line::FenceSkip,
                    }
                } else if b == b'\n' {
                    Line::FenceStart { spaces: 0 }
                } else {
                    Line::FenceSkip
                }
            }
            Line::FenceTrail => {
                self.line = match b {
                    b' ' | b'\t' | b'\r' => Line::FenceTrail,
                    b'\n' => LINE_START,
                    _ => Line::FenceSkip,
                }
            }
            Line::FenceSkip => {
                if b == b'\n' {
                    self.line = Line::FenceStart { spaces: 0 };
                }
            }
        }
    }

    /// The leading run of `ch` ended: a fence opens, or the run is text.
    pub(super) fn end_lead(&mut self, ch: u8, len: u32) {
        if len >= 3 {
            // The opening line is not part of the paragraph before it.
            self.end_paragraph();
            self.fence_ch = ch;
            self.fence_len = len;
            self.line = Line::FenceSkip;
        } else {
            self.line = Line::Text;
            if ch == b'`' {
                self.run = len;
            }
        }
    }

    /// One ASCII character of paragraph text.
    pub(super) fn text(&mut self, b: u8) {
        if self.run > 0 && b != b'`' {
            let run = self.run;
            self.run = 0;
            self.end_run(run);
        }
        if let Some(m) = self.mark {
            self.mark = None;
            match b {
                b'0'..=b'9' if m.digits < 4 && !(m.digits == 0 && b == b'0') => {
                    self.mark = Some(OpenMarker {
                        start: m.start,
                        value: m.value * 10 + u16::from(b - b'0'),
                        digits: m.digits + 1,
                    });
                    return;
                }
                b']' => {
                    let number = u32::from(m.value);
                    if m.digits > 0 && number >= 1 && number <= self.max_number {
                        self.found(Marker {
                            number,
                            start: m.start,
                            end: self.pos + 1,
                        });
                    }
                    return;
                }
                _ => {}
            }
        }
        match b {
            b'`' => self.run = self.run.saturating_add(1),
            b'[' if !self.prev_backslash => {
                self.mark = Some(OpenMarker {
                    start: self.pos,
                    value: 0,
                    digits: 0,
                })
            }
            b'\n' => self.line = LINE_START,
            _ => {}
        }
    }

    /// Feeds a run of non-ASCII characters `width` units wide. They are
    /// ordinary, non-blank characters for every rule.
    pub(super) fn other(&mut self, width: u64) {
        match self.line {
            Line::Start { .. } => {
                self.line = Line::Text;
                self.text_other();
            }
            Line::Lead { ch, len } => {
                self.end_lead(ch, len);
                if self.line == Line::Text {
                    self.text_other();
                }
            }
            Line::Text => self.text_other(),
            Line::FenceStart { .. } | Line::FenceRun { .. } | Line::FenceTrail => {
                self.line = Line::FenceSkip
            }
            Line::FenceSkip => {}
        }
        self.pos += width;
        self.prev_backslash = false;
    }

    pub(super) fn text_other(&mut self) {
        if self.run > 0 {
            let run = self.run;
            self.run = 0;
            self.end_run(run);
        }
        self.mark = None;
    }

    /// A maximal backtick run of length `len` ended inside a paragraph.
    ///
    /// The undecided openers form a stack, outermost first: `open`, then
    /// `deeper`. Opener *i* is what the paragraph's first undecided run
    /// would be if openers *0..i* all turn out literal (never closed), which
    /// is exactly where scanning would resume in that case. Their lengths
    /// are distinct, because a run of an opener's length closes it. So a run
    /// either closes the one opener of its length, discarding every deeper
    /// opener and every marker found since (all inside that span), or
    /// becomes the deepest opener. At the end of the paragraph every opener
    /// left is literal and all pending markers count. This is the greedy
    /// left-to-right resolution, done incrementally with no rescans.
    pub(super) fn end_run(&mut self, len: u32) {
        if self.open == 0 {
            self.open = len;
        } else if self.open == len {
            // The outermost span closes: everything since it was code.
            self.open = 0;
            self.deeper.clear();
            self.pending.clear();
        } else if let Some(i) = self.deeper.iter().position(|o| o.len == len) {
            let first_marker = self.deeper[i].first_marker;
            self.pending.truncate(first_marker);
            self.deeper.truncate(i);
        } else {
            self.deeper.push(Opener {
                len,
                first_marker: self.pending.len(),
            });
        }
    }

    pub(super) fn found(&mut self, marker: Marker) {
        if self.open == 0 {
            self.markers.push(marker);
        } else {
            self.pending.push(marker);
        }
    }

    /// The paragraph ended: the undecided openers are literal and the
    /// pending markers count.
    pub(super) fn end_paragraph(&mut self) {
        if self.open != 0 {
            self.open = 0;
            self.deeper.clear();
            self.markers.append(&mut self.pending);
        }
    }

    /// The content ended.
    pub(super) fn finish(&mut self) {
        if let Line::Lead { ch, len } = self.line {
            self.end_lead(ch, len);
        }
        if self.line == Line::Text {
            self.text_other();
        }
        self.end_paragraph();
    }
}

/// State of a JSON escape sequence in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Escape {
    None,
    /// After a backslash.
    Backslash,
    /// After `\u` and `digits` hex digits worth `value`.
    Hex {
        digits: u8,
        value: u16,
    },
}

/// Length of the longest prefix of `s` made of ASCII bytes.
#[inline]
pub(super) fn ascii_prefix_len(s: &[u8]) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    for chunk in s.chunks_exact(8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        if u64::from_le_bytes(word) & HIGH != 0 {
            break;
        }
        i += 8;
    }
    i + s[i..]
        .iter()
        .position(|&b| b >= 0x80)
        .unwrap_or(s.len() - i)
}

/// [`BYTE_CLASS`] bit: the byte stops the fast path in paragraph text.
pub(super) const STOP_TEXT: u8 = 1;
/// [`BYTE_CLASS`] bit: the byte stops the fast path inside a fence line.
pub(super) const STOP_FENCE: u8 = 2;
/// [`BYTE_CLASS`] value of the bytes `>= 0x80`.
pub(super) const NON_ASCII: u8 = 4;

/// What each byte means to the tracker's fast path: 0 for the ASCII bytes
/// that only advance the position in its states; backslash and LF stop it
/// everywhere, `[` and a backtick in paragraph text.
pub(super) static BYTE_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0x80;
    while b < 256 {
        t[b] = NON_ASCII;
        b += 1;
    }
    t[b'\\' as usize] = STOP_TEXT | STOP_FENCE;
    t[b'\n' as usize] = STOP_TEXT | STOP_FENCE;
    t[b'[' as usize] = STOP_TEXT;
    t[b'`' as usize] = STOP_TEXT;
    t
};

/// Length of the valid UTF-8 sequence that `s` starts with (its first byte
/// is `>= 0x80`), or `None` when it is invalid or cut off by the end of `s`
/// (Unicode Table 3-7, well-formed byte sequences).
#[inline]
pub(super) fn utf8_seq_len(s: &[u8]) -> Option<usize> {
    let (n, lo, hi) = match *s.first()? {
        0xC2..=0xDF => (2, 0x80, 0xBF),
        0xE0 => (3, 0xA0, 0xBF),
        0xE1..=0xEC | 0xEE..=0xEF => (3, 0x80, 0xBF),
        0xED => (3, 0x80, 0x9F),
        0xF0 => (4, 0x90, 0xBF),
        0xF1..=0xF3 => (4, 0x80, 0xBF),
        0xF4 => (4, 0x80, 0x8F),
        _ => return None,
    };
    let seq = s.get(..n)?;
    let second_ok = (lo..=hi).contains(&seq[1]);
    (second_ok && seq[2..].iter().all(|&b| b & 0xC0 == 0x80)).then_some(n)
}

//! Citation markers: finding `[n]` in streamed content and reporting their
//! offsets.
//!
//! [`MarkerTracker`] is the single source of truth for marker offsets: the
//! streaming and the whole-body rewriters both feed it the content of one
//! chat choice and read back [`Marker`]s. It never keeps the content itself.
//!
//! # Rules (SPEC section 5)
//!
//! * **Marker**: `[` + 1 to 4 decimal digits without a leading zero + `]`.
//!   `[1][2]` is two markers; `[[2]]` contains the marker `[2]`; `[01]`,
//!   `[0]`, `[12345]`, `[1, 2]`, `[^1]` are not markers. A `[` immediately
//!   preceded by a backslash character of the decoded text opens no marker
//!   (this is literal: `\\[1]` in the decoded text, an escaped backslash in
//!   Markdown terms, still has a backslash right before the `[`). Only the
//!   numbers `1..=max_number` count; others are plain text.
//! * **Fenced code blocks**: content is read as lines split at LF. A fence
//!   opens at a line (outside a fence) that starts, after at most 3 spaces,
//!   with a run of 3 or more backticks or tildes (anything may follow) and
//!   closes at a later line made of at most 3 spaces, a run of at least as
//!   many of the same character, and nothing else but spaces, tabs or CR.
//!   Opening and closing lines belong to the block; an unclosed block runs to
//!   the end. A fence opening line interrupts a paragraph.
//! * **Paragraphs and inline code spans**: outside fences, paragraphs are
//!   runs of lines between blank lines (only spaces, tabs, CR) and fences.
//!   Within a paragraph, a maximal run of k backticks opens a code span that
//!   ends at the next run of exactly k backticks; if the paragraph has no
//!   such run, the opener is literal text and scanning resumes right after
//!   it. Backslashes do not escape backticks (the SPEC gives them no such
//!   role). A marker counts only outside fences and code spans.
//! * **Offsets** are into the choice's whole decoded content, end exclusive,
//!   in the tracker's [`OffsetUnit`].
//!
//! # Decoding
//!
//! [`MarkerTracker::push_json`] takes the raw body of a JSON string (between
//! the quotes, escapes not decoded) and decodes it on the fly:
//!
//! * `\"` `\\` `\/` `\b` `\f` `\n` `\r` `\t` and `\uXXXX` decode as JSON says;
//!   a `\n` is a line break for the code rules.
//! * A high surrogate escape immediately followed by a low surrogate escape
//!   is one character (1 char, 2 UTF-16 units, 4 bytes). A high surrogate not
//!   followed by a low surrogate escape, or a lone low surrogate, is one
//!   U+FFFD (1 char, 1 UTF-16 unit, 3 bytes).
//! * **Invalid escapes**: a backslash followed by a byte that is not one of
//!   `"\/bfnrtu`, or `\u` followed by fewer than 4 hex digits, is one U+FFFD
//!   covering the backslash sequence *up to* the first offending byte; that
//!   byte is then processed normally (it may start a new escape, a raw UTF-8
//!   sequence, a marker, a line break...). An escape cut off by the end of
//!   the content is one U+FFFD. The decision is taken byte by byte, so it
//!   does not depend on how the input is split.
//! * Every other byte is raw UTF-8 text (even bytes a valid JSON string would
//!   not contain, such as a bare `"` or a control character); invalid UTF-8
//!   counts as U+FFFD per maximal subpart, exactly like
//!   [`String::from_utf8_lossy`].
//!
//! [`MarkerTracker::push_text`] takes decoded text as UTF-8 bytes with the
//! same invalid-UTF-8 rule.
//!
//! # Streaming design
//!
//! Pieces may be split at any byte. Three small decoders carry partial input
//! across calls: up to 3 bytes of an incomplete UTF-8 sequence, the state of
//! an escape (`\`, `\u` + up to 3 hex digits), and a pending high surrogate.
//! Decoded characters go to a line/inline state machine that only ever needs
//! the current character and a few counters:
//!
//! ```text
//!  state        meaning                         leaves on
//!  -----------  ------------------------------  -------------------------------
//!  Start        leading spaces/tabs/CR of a     LF: blank line, ends paragraph
//!               line outside fences             ` or ~ (<=3 spaces before): Lead
//!                                               other: Text
//!  Lead         leading run of ` or ~           other char: run >= 3 opens a
//!                                               fence (FenceSkip), else Text
//!  Text         paragraph text: backtick runs,  LF: Start
//!               markers
//!  FenceStart   line start inside a fence       fence char: FenceRun, LF: stay,
//!               (<= 3 spaces)                   other: FenceSkip
//!  FenceRun     candidate closing run           run long enough: space/tab/CR:
//!                                               FenceTrail, LF: closed (Start);
//!                                               else LF: FenceStart, other:
//!                                               FenceSkip
//!  FenceTrail   spaces/tabs/CR after the run    LF: fence closed (Start)
//!                                               other: FenceSkip
//!  FenceSkip    rest of a fence line            LF: FenceStart
//! ```
//!
//! A backtick run whose closing run has not been seen yet cannot be decided:
//! the markers after it are held back as *pending tokens* (never text). The
//! undecided openers form a small stack: the first one, then the opener that
//! would come next if it were literal, and so on. A later run either closes
//! the one opener of its length (dropping the deeper openers and the markers
//! found since, which were inside that span) or becomes the deepest opener;
//! at the end of the paragraph the openers left are literal and the pending
//! markers count. This is CommonMark's left-to-right resolution done
//! incrementally, without rescanning anything. Markers are therefore final
//! (visible in [`MarkerTracker::markers`]) as soon as no code span is
//! undecided before them, and all are final after
//! [`MarkerTracker::finish`].
//!
//! The common case is fast: plain paragraph text is skipped with
//! `memchr3` for `[`, `` ` `` and LF, fenced code with `memchr` for LF, runs
//! of non-ASCII characters are counted in bulk, and no allocation happens
//! except to record a marker or a nested undecided opener (amortized vector
//! growth; a single undecided opener needs no allocation).
//!
//! # Decisions where the SPEC is silent
//!
//! * The backslash rule is literal: any backslash character right before a
//!   `[` blocks it, even one that is itself escaped in Markdown terms
//!   (`\\[1]`). A U+FFFD from an invalid JSON escape such as `\[` is not a
//!   backslash, so `\[1]` in a JSON body (decoded: U+FFFD `[1]`) is a marker.
//! * Backslashes do not escape backticks; only runs of backticks matter.
//! * Indentation before a fence is spaces only: a tab makes the line an
//!   ordinary line. A backtick fence's opening line may contain more
//!   backticks (the SPEC says anything may follow).
//! * A fence opening line ends the paragraph before it even when an inline
//!   code span is undecided there (block structure comes first, as in
//!   CommonMark); the undecided opener is then literal.
//! * `[0]` (and any number with a leading zero) is not a marker; the largest
//!   number is `[9999]`.
//! * Input after [`MarkerTracker::finish`] is ignored.
//!
//! # Examples
//!
//! Whole message content (non-streaming), already decoded:
//!
//! ```
//! use citestream::cite::{MarkerTracker, OffsetUnit};
//!
//! let content = "See `a[1]` and [1].\n\n```\n[2]\n```\nDone [2].";
//! let mut t = MarkerTracker::new(2, OffsetUnit::Utf16);
//! t.push_text(content.as_bytes());
//! t.finish();
//! let spans: Vec<(u32, u64, u64)> = t.markers().iter().map(|m| (m.number, m.start, m.end)).collect();
//! assert_eq!(spans, [(1, 15, 18), (2, 38, 41)]);
//! ```
//!
//! # Note
//!
//! Memory is bounded by the markers found (they are the output), the
//! markers held back after an undecided opener (each stood for at least 3
//! bytes of content of the current paragraph), and one 16-byte entry per
//! nested undecided opener. Nested openers have
//! distinct lengths, so a paragraph of n bytes has fewer than
//! `sqrt(2n)` of them (a 1 MB paragraph crafted for it: under 1,500).

use core::fmt;
use core::str::FromStr;

use memchr::{memchr, memchr3};

/// `memchr` for long input; a plain loop for the few bytes of a typical
/// streamed delta, where the call and setup cost more than they save.
#[inline]
fn find1(a: u8, s: &[u8]) -> Option<usize> {
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

/// Unit of start/end offsets.
///
/// Parses from and displays as `chars`, `utf16` or `bytes`.
///
/// ```
/// use citestream::cite::OffsetUnit;
/// assert_eq!("utf16".parse::<OffsetUnit>(), Ok(OffsetUnit::Utf16));
/// assert_eq!(OffsetUnit::default().to_string(), "chars");
/// assert!("UTF-16".parse::<OffsetUnit>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OffsetUnit {
    /// Unicode scalar values of the decoded content (the default).
    #[default]
    Chars,
    /// UTF-16 code units (JavaScript string indices): a character outside
    /// the Basic Multilingual Plane counts 2.
    Utf16,
    /// Bytes of the UTF-8 encoding.
    Bytes,
}

impl OffsetUnit {
    /// The name of the unit: `"chars"`, `"utf16"` or `"bytes"`.
    ///
    /// # Panics
    ///
    /// Never panics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            OffsetUnit::Chars => "chars",
            OffsetUnit::Utf16 => "utf16",
            OffsetUnit::Bytes => "bytes",
        }
    }

    /// Width, in this unit, of a character whose UTF-8 encoding is
    /// `utf8_len` bytes long.
    #[inline]
    const fn width(self, utf8_len: usize) -> u64 {
        match self {
            OffsetUnit::Chars => 1,
            OffsetUnit::Utf16 => {
                if utf8_len == 4 {
                    2
                } else {
                    1
                }
            }
            OffsetUnit::Bytes => utf8_len as u64,
        }
    }

    /// Width, in this unit, of `s`, which must be a run of whole, valid,
    /// non-ASCII UTF-8 sequences.
    #[inline]
    fn width_of_utf8(self, s: &[u8]) -> u64 {
        match self {
            OffsetUnit::Bytes => s.len() as u64,
            OffsetUnit::Chars => s.iter().filter(|&&b| b & 0xC0 != 0x80).count() as u64,
            OffsetUnit::Utf16 => s
                .iter()
                .map(|&b| u64::from(b & 0xC0 != 0x80) + u64::from(b >= 0xF0))
                .sum(),
        }
    }
}

impl fmt::Display for OffsetUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error returned when parsing an [`OffsetUnit`] from a string other than
/// `chars`, `utf16` or `bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseOffsetUnitError {
    _private: (),
}

impl fmt::Display for ParseOffsetUnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown offset unit (expected chars, utf16 or bytes)")
    }
}

impl std::error::Error for ParseOffsetUnitError {}

impl FromStr for OffsetUnit {
    type Err = ParseOffsetUnitError;

    /// Parses `chars`, `utf16` or `bytes` (exactly, lowercase).
    ///
    /// # Errors
    ///
    /// [`ParseOffsetUnitError`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "chars" => Ok(OffsetUnit::Chars),
            "utf16" => Ok(OffsetUnit::Utf16),
            "bytes" => Ok(OffsetUnit::Bytes),
            _ => Err(ParseOffsetUnitError { _private: () }),
        }
    }
}

/// One citation marker found in the content.
///
/// `start` and `end` (exclusive) are offsets into the choice's whole decoded
/// content, in the unit of the [`MarkerTracker`] that found it; `end - start`
/// is the marker's length (`[1]` is 3 in every unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Marker {
    /// The source number, `1..=max_number`.
    pub number: u32,
    /// Offset of the `[`.
    pub start: u64,
    /// Offset just after the `]`.
    pub end: u64,
}

/// Line-level state of the scanner (see the module's state table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
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

const LINE_START: Line = Line::Start {
    spaces: 0,
    eligible: true,
};

/// A marker whose `[` has been seen.
#[derive(Clone, Copy, Debug)]
struct OpenMarker {
    start: u64,
    value: u16,
    digits: u8,
}

/// An undecided code span opener below the first one (see
/// [`Scanner::end_run`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Opener {
    /// Length of its backtick run.
    len: u32,
    /// Index in `Scanner::pending` of the first marker found after it.
    first_marker: usize,
}

/// The decoded-character state machine: lines, fences, code spans, markers.
#[derive(Clone, Debug)]
struct Scanner {
    /// Offset of the next character, in the tracker's unit.
    pos: u64,
    max_number: u32,
    line: Line,
    /// Character and length of the open fence (meaningful in fence states).
    fence_ch: u8,
    fence_len: u32,
    /// The previous character was a backslash.
    prev_backslash: bool,
    /// Length of the backtick run in progress in `Text` (0: none).
    run: u32,
    /// Length of the first undecided code span opener of this paragraph
    /// (0: none).
    open: u32,
    /// The openers nested under `open`, outermost first (empty unless
    /// `open != 0`).
    deeper: Vec<Opener>,
    mark: Option<OpenMarker>,
    /// Markers found after `open`, in content order.
    pending: Vec<Marker>,
    /// Final markers, in content order.
    markers: Vec<Marker>,
}

impl Scanner {
    fn new(max_number: u32) -> Self {
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
    fn ascii(&mut self, s: &[u8]) {
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
    fn skip(&mut self, s: &[u8]) {
        if let Some(&last) = s.last() {
            self.pos += s.len() as u64;
            self.prev_backslash = last == b'\\';
        }
    }

    /// Feeds one ASCII character.
    fn byte(&mut self, b: u8) {
        self.step(b);
        self.pos += 1;
        self.prev_backslash = b == b'\\';
    }

    fn step(&mut self, b: u8) {
        match self.line {
            Line::Start { spaces, eligible } => match b {
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
            },
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
    fn end_lead(&mut self, ch: u8, len: u32) {
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
    fn text(&mut self, b: u8) {
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
    fn other(&mut self, width: u64) {
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

    fn text_other(&mut self) {
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
    fn end_run(&mut self, len: u32) {
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

    fn found(&mut self, marker: Marker) {
        if self.open == 0 {
            self.markers.push(marker);
        } else {
            self.pending.push(marker);
        }
    }

    /// The paragraph ended: the undecided openers are literal and the
    /// pending markers count.
    fn end_paragraph(&mut self) {
        if self.open != 0 {
            self.open = 0;
            self.deeper.clear();
            self.markers.append(&mut self.pending);
        }
    }

    /// The content ended.
    fn finish(&mut self) {
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
enum Escape {
    None,
    /// After a backslash.
    Backslash,
    /// After `\u` and `digits` hex digits worth `value`.
    Hex {
        digits: u8,
        value: u16,
    },
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
/// the [module documentation](self) for the rules and the design.
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
    scan: Scanner,
    unit: OffsetUnit,
    escape: Escape,
    /// Pending high surrogate from a `\u` escape (0: none).
    high: u16,
    /// Incomplete UTF-8 sequence (a valid prefix) and its length.
    utf8: [u8; 3],
    utf8_len: u8,
    finished: bool,
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
        if self.finished {
            return;
        }
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
                    let decoded = match b {
                        b'"' | b'\\' | b'/' => Some(b),
                        b'b' => Some(0x08),
                        b'f' => Some(0x0C),
                        b'n' => Some(b'\n'),
                        b'r' => Some(b'\r'),
                        b't' => Some(b'\t'),
                        _ => None,
                    };
                    if let Some(c) = decoded {
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
        if self.finished {
            return;
        }
        self.raw(text);
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

/// Length of the longest prefix of `s` made of ASCII bytes.
#[inline]
fn ascii_prefix_len(s: &[u8]) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn json(max: u32, s: &str) -> Vec<(u32, u64, u64)> {
        let mut t = MarkerTracker::new(max, OffsetUnit::Chars);
        t.push_json(s.as_bytes());
        t.finish();
        t.markers()
            .iter()
            .map(|m| (m.number, m.start, m.end))
            .collect()
    }

    #[test]
    fn ascii_prefix() {
        assert_eq!(ascii_prefix_len(b""), 0);
        assert_eq!(ascii_prefix_len(b"abcdefghijk"), 11);
        assert_eq!(ascii_prefix_len(b"abcdefghi\xC3\xA9"), 9);
        assert_eq!(ascii_prefix_len(b"\xC3\xA9"), 0);
        assert_eq!(ascii_prefix_len(b"abc\xFFdefghijk"), 3);
    }

    #[test]
    fn widths() {
        assert_eq!(OffsetUnit::Utf16.width_of_utf8("é😀中".as_bytes()), 4);
        assert_eq!(OffsetUnit::Chars.width_of_utf8("é😀中".as_bytes()), 3);
        assert_eq!(OffsetUnit::Bytes.width_of_utf8("é😀中".as_bytes()), 9);
    }

    #[test]
    fn pending_tokens_are_held_then_dropped_or_resolved() {
        let mut t = MarkerTracker::new(9, OffsetUnit::Chars);
        t.push_text(b"a `` [1] ` [2] `");
        assert!(t.markers().is_empty());
        assert_eq!(t.scan.open, 2);
        assert_eq!(
            t.scan.deeper,
            [Opener {
                len: 1,
                first_marker: 1
            }]
        );
        assert_eq!(t.scan.pending.len(), 2);
        // The last run may still grow: it is not decided yet.
        assert_eq!(t.scan.run, 1);
        // The opener closes: everything pending was code.
        t.push_text(b"` [3]");
        assert_eq!(t.scan.open, 0);
        assert!(t.scan.pending.is_empty());
        assert!(t.scan.deeper.is_empty());
        // Nothing is undecided before `[3]`: it is final at once.
        assert_eq!(t.markers().len(), 1);
        assert_eq!(t.markers()[0].number, 3);

        // Never closed: resolved at the blank line, the inner pair is a span.
        assert_eq!(json(9, r"`` [1] ` [2] ` [3]\n\n"), [(1, 3, 6), (3, 15, 18)]);
    }

    #[test]
    fn nested_openers_close_and_discard() {
        let mut t = MarkerTracker::new(9, OffsetUnit::Chars);
        // ` is never closed; `` pairs; ``` stays open.
        t.push_text(b"a ` `` ``` [1] `` [2] ``` [3]");
        assert_eq!(t.scan.open, 1);
        assert_eq!(
            t.scan.deeper,
            [Opener {
                len: 3,
                first_marker: 1
            }]
        );
        assert_eq!(
            t.scan.pending.iter().map(|m| m.number).collect::<Vec<_>>(),
            [2, 3]
        );
        t.finish();
        assert_eq!(
            t.markers().iter().map(|m| m.number).collect::<Vec<_>>(),
            [2, 3]
        );
    }

    #[test]
    fn openers_are_bounded_by_distinct_lengths() {
        // Many runs, few lengths: the stack never holds two of one length.
        let mut t = MarkerTracker::new(9, OffsetUnit::Chars);
        t.push_text(b"x ````");
        for _ in 0..1000 {
            t.push_text(b" ` `` ``` [1]");
        }
        assert!(t.scan.deeper.len() <= 3, "{:?}", t.scan.deeper);
        t.push_text(b"\n\n");
        assert!(t.scan.deeper.is_empty());
    }

    #[test]
    fn lead_states() {
        let mut t = MarkerTracker::new(9, OffsetUnit::Chars);
        t.push_text(b"   ~~");
        assert_eq!(t.scan.line, Line::Lead { ch: b'~', len: 2 });
        t.push_text(b"~ x\n");
        assert_eq!(t.scan.line, Line::FenceStart { spaces: 0 });
        t.push_text(b"   ~~~~ \r\n");
        assert_eq!(t.scan.line, LINE_START);
        t.push_text(b"    ```");
        assert_eq!(t.scan.line, Line::Text);
    }

    #[test]
    fn heap_storage_is_only_markers_and_pending_state() {
        // The tracker's only heap storage is its three vectors: content
        // without markers and without nested undecided spans leaves them
        // unallocated, whatever the chunking.
        let body = r"Text with [brackets], [^notes], `code`, \u00e9, \ud83d\ude00 and é.\n\n```\n[1]\n```\n"
            .repeat(100);
        for unit in [OffsetUnit::Chars, OffsetUnit::Utf16, OffsetUnit::Bytes] {
            let mut t = MarkerTracker::new(9, unit);
            for piece in body.as_bytes().chunks(7) {
                t.push_json(piece);
            }
            t.finish();
            assert!(t.markers().is_empty());
            assert_eq!(t.scan.markers.capacity(), 0);
            assert_eq!(t.scan.pending.capacity(), 0);
            assert_eq!(t.scan.deeper.capacity(), 0);
        }
        // Pending tokens are dropped when the span closes; their buffer is
        // reused.
        let mut t = MarkerTracker::new(9, OffsetUnit::Chars);
        t.push_text("a `x [1] [2] [3] [4]` b\n".repeat(100).as_bytes());
        assert!(t.markers().is_empty());
        assert!(t.scan.pending.capacity() <= 8);
    }

    #[test]
    fn escapes_decode_to_special_characters() {
        // `\u005b` is `[`, `\u0060` a backtick, `\\` a backslash.
        assert_eq!(json(9, r"\u005b1] \\[2] \u0060[3]\u0060"), [(1, 0, 3)]);
    }
}

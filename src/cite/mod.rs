//! Citation markers: finding `[n]` in streamed content and reporting their
//! offsets.
//!
//! [`MarkerTracker`] is the single source of truth for marker offsets: the
//! streaming and the whole-body rewriters both feed it the content of one
//! chat choice and read back [`Marker`]s. It never keeps the content itself.
//!
//! # Rules (docs/reference/responses.md, "Markers")
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
//!   it. Backslashes do not escape backticks (the rules give them no such
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
//! The common case is fast, in tiers (`fast.rs`). A streamed token in
//! paragraph text with nothing pending (a flag the general entry sets when
//! it returns) and none of the bytes the rules look at (`\`, LF, `[`, a
//! backtick, non-ASCII) only advances the position: one flag test and a
//! check of those bytes, sixteen a step where SSE2 is built (`simd.rs`) and
//! four a step through a class table for short pieces and other builds,
//! without a call. A caller that must scan the JSON string anyway (the
//! chat and Responses chunk templates find the end of each content token)
//! lets one pass do both: `content_token` stops at whatever ends the
//! string or stops the fast path, and
//! `MarkerTracker::push_json_after` then skips the bytes it saw plain (a
//! whole plain token: no scan at all). Next, one call takes paragraph text with valid UTF-8
//! (counted in the unit inline) and whole markers `[n]`, skipping the plain
//! ASCII between them the same way; then a loop decodes one-letter escapes,
//! line starts, line breaks and backtick runs, and skips fence lines to the
//! next LF. Only what none of them handles (`\uXXXX` escapes, invalid or
//! incomplete UTF-8, a marker or run cut by the end of the piece, fence
//! openings and closings) goes through the general decoders above, a few
//! bytes at a time, back to the fast path after each step; they are
//! split-invariant, so where a step ends changes nothing. The fast path is
//! checked against the general path alone at every split
//! (`tests::fast_path_equals_general_path`, the `cite_split` fuzz target).
//! No allocation happens except to record a marker or a nested undecided
//! opener (amortized vector growth; a single undecided opener needs no
//! allocation).
//!
//! # Decisions where the rules are silent
//!
//! * The backslash rule is literal: any backslash character right before a
//!   `[` blocks it, even one that is itself escaped in Markdown terms
//!   (`\\[1]`). A U+FFFD from an invalid JSON escape such as `\[` is not a
//!   backslash, so `\[1]` in a JSON body (decoded: U+FFFD `[1]`) is a marker.
//! * Backslashes do not escape backticks; only runs of backticks matter.
//! * Indentation before a fence is spaces only: a tab makes the line an
//!   ordinary line. A backtick fence's opening line may contain more
//!   backticks (the rules say anything may follow).
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

mod fast;
mod scanner;
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "sse2",
    not(citestream_disable_simd)
))]
mod simd;
mod tracker;

pub(crate) use fast::content_token;
pub use tracker::MarkerTracker;

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

#[cfg(test)]
mod tests {
    use super::scanner::*;
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

    /// `input` cut at `cuts` (ascending), the last piece to its end.
    fn pieces<'a>(input: &'a [u8], cuts: &'a [usize]) -> impl Iterator<Item = &'a [u8]> {
        let ends = cuts.iter().copied().chain([input.len()]);
        let starts = [0].into_iter().chain(cuts.iter().copied());
        starts.zip(ends).map(|(from, to)| &input[from..to])
    }

    /// Asserts that two trackers fed `input` in the pieces `cuts` gives
    /// agree: the same length and markers.
    fn same(a: &MarkerTracker, b: &MarkerTracker, input: &[u8], cuts: &[usize]) {
        assert_eq!(a.len(), b.len(), "{input:?} {cuts:?}");
        assert_eq!(a.markers(), b.markers(), "{input:?} {cuts:?}");
    }

    /// Feeds `input` in the pieces `cuts` gives to a tracker with the fast
    /// path and to one without, comparing the length and the markers after
    /// every piece and at the end.
    fn fast_vs_general(input: &[u8], cuts: &[usize], json: bool, unit: OffsetUnit) {
        let mut fast = MarkerTracker::new(9, unit);
        let mut general = MarkerTracker::new(9, unit);
        for piece in pieces(input, cuts) {
            if json {
                fast.push_json(piece);
                general.push_json_general(piece);
            } else {
                fast.push_text(piece);
                general.push_text_general(piece);
            }
            same(&fast, &general, input, cuts);
        }
        fast.finish();
        general.finish();
        same(&fast, &general, input, cuts);
    }

    #[test]
    fn fast_path_equals_general_path() {
        let cases: &[&[u8]] = &[
            b"Hello",
            b" the [1] and [2][3] `x [4]` y\n\n[5]",
            r"caf\u00e9 na\u00efve \ud83d\ude00 \ud83d x\\[1] \[2] \q [3]".as_bytes(),
            "café naïve 東京 😀 — ü [1] 東[2]京".as_bytes(),
            b"\xC3 \xE2\x82 \xF0\x9F\x98 [1] \xED\xA0\x80 \xE0\x80\xAF \xF4\x90\x80\x80 \xC0\xAF \xFF [2]",
            b"text\n```\ncode [1] \xC3\xA9 `x`\n  ```\n[2] ~~~ [3]\n~~~\n[4]\n~~~~ \r\nafter [5]",
            br"line\n```py\nx = [1]\\n\n```\n\n   [2]\n    ``` [3]\n``x`` [4] ``` [5",
            b"a\\[1] b\\\\[2] c\\\n[3] \\\xC3\xA9[4] `` [5] ` [6] ``",
            b"\xE6\x9D\xB1\xE4\xBA\xAC\xE6\x9D\xB1\xE4\xBA\xAC\xE6\x9D\xB1\xE4\xBA\xAC\xE6\x9D\xB1 [1]",
        ];
        for &input in cases {
            for unit in [OffsetUnit::Chars, OffsetUnit::Utf16, OffsetUnit::Bytes] {
                for json in [true, false] {
                    fast_vs_general(input, &[], json, unit);
                    for a in 0..=input.len() {
                        fast_vs_general(input, &[a], json, unit);
                        for b in (a..=input.len()).step_by(3) {
                            fast_vs_general(input, &[a, b], json, unit);
                        }
                    }
                    let bytewise: Vec<usize> = (0..=input.len()).collect();
                    fast_vs_general(input, &bytewise, json, unit);
                }
            }
        }
    }

    /// Feeds `input` in the pieces `cuts` gives, each as a JSON string
    /// token (with `pad` bytes after its closing quote) read by
    /// [`content_token`] then [`MarkerTracker::push_json_after`], and to a
    /// tracker by `push_json`: the same length and markers after every
    /// piece. A piece the string scan rejects goes to both by `push_json`.
    fn after_vs_push_json(input: &[u8], cuts: &[usize], pad: &[u8], unit: OffsetUnit) {
        let mut after = MarkerTracker::new(9, unit);
        let mut plain = MarkerTracker::new(9, unit);
        for piece in pieces(input, cuts) {
            let token = [&b"\""[..], piece, b"\"", pad].concat();
            let want = crate::json::scan_string(&token, 0).ok().map(|t| t.0);
            let got = content_token(&token);
            assert_eq!(got.map(|t| t.0), want, "{token:?}");
            match got {
                Some((_, known)) => {
                    assert!(known <= piece.len() && fast::is_plain(&piece[..known]));
                    after.push_json_after(piece, known);
                }
                None => after.push_json(piece),
            }
            plain.push_json(piece);
            same(&after, &plain, input, cuts);
        }
        after.finish();
        plain.finish();
        same(&after, &plain, input, cuts);
    }

    #[test]
    fn content_token_then_push_json_after_equals_push_json() {
        let cases: &[&[u8]] = &[
            b"Hello, the weather in Lisbon is sunny today and warm",
            b"- Lisbon is sunny today [1]. xxxxxxxxxxxxxxxxxxxxxxxxx [2][3] tail",
            br#"the [1] and [2][3] `x [4]` y\n\n[5] \"quoted\" [6]"#,
            r"caf\u00e9 na\u00efve \ud83d\ude00 \ud83d x\\[1] \[2] \q [3]".as_bytes(),
            "café naïve 東京 😀 — ü [1] 東[2]京 and more plain text after".as_bytes(),
            b"text\x01 raw control and a \" quote [1]",
            br"line\n```py\nx = [1]\\n\n```\n\n   [2]\n    ``` [3]\n``x`` [4] ``` [5",
        ];
        for &input in cases {
            for unit in [OffsetUnit::Chars, OffsetUnit::Utf16] {
                for pad in [&b""[..], b"},\"finish_reason\":null}]}\n\n"] {
                    after_vs_push_json(input, &[], pad, unit);
                    for a in 0..=input.len() {
                        for b in (a..=input.len()).step_by(5) {
                            after_vs_push_json(input, &[a, b], pad, unit);
                        }
                    }
                }
            }
        }
    }

    /// Where the SIMD scan is built, a plain body with sixteen bytes after
    /// its quote is known plain throughout, and one with a marker up to
    /// the marker: the scan the tracker then skips.
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "sse2",
        not(citestream_disable_simd)
    ))]
    #[test]
    fn content_token_knows_a_plain_body_plain() {
        let tail = b"},\"finish_reason\":null}]}\n\n";
        for len in 0..80 {
            let body = vec![b'a'; len];
            let token = [&b"\""[..], &body, b"\"", tail].concat();
            assert_eq!(content_token(&token), Some((len + 2, len)), "{len}");
            for at in 0..len {
                for stop in [b'[', b'\\', b'`', 0xC3] {
                    let mut body = body.clone();
                    body[at] = stop;
                    if stop == b'\\' {
                        body.insert(at + 1, b'n');
                    }
                    if stop == 0xC3 {
                        body.insert(at + 1, 0xA9);
                    }
                    let token = [&b"\""[..], &body, b"\"", tail].concat();
                    assert_eq!(
                        content_token(&token),
                        Some((body.len() + 2, at)),
                        "{len} {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn escapes_decode_to_special_characters() {
        // `\u005b` is `[`, `\u0060` a backtick, `\\` a backslash.
        assert_eq!(json(9, r"\u005b1] \\[2] \u0060[3]\u0060"), [(1, 0, 3)]);
    }
}

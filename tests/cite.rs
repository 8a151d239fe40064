//! Marker tracker: spec vectors (each checked whole, at every split point,
//! one byte at a time, in every unit and against the reference), unit
//! conversions, and differential property tests against `common::cite_ref`.

mod common;

use citestream::cite::{Marker, MarkerTracker, OffsetUnit};
use common::cite_ref;
use proptest::prelude::*;

const UNITS: [OffsetUnit; 3] = [OffsetUnit::Chars, OffsetUnit::Utf16, OffsetUnit::Bytes];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Feed {
    Json,
    Text,
}

/// Feeds `input` cut at `cuts` (sorted, may repeat, each <= len), checking on
/// the way that `markers()` only ever grows by appending and that
/// `take_markers` loses nothing. Returns the markers and the final length.
fn run(feed: Feed, input: &[u8], cuts: &[usize], max: u32, unit: OffsetUnit) -> (Vec<Marker>, u64) {
    let mut t = MarkerTracker::new(max, unit);
    let mut taken: Vec<Marker> = Vec::new();
    let mut seen: Vec<Marker> = Vec::new();
    let mut from = 0;
    for (k, &cut) in cuts.iter().chain(std::iter::once(&input.len())).enumerate() {
        let piece = &input[from..cut];
        match feed {
            Feed::Json => t.push_json(piece),
            Feed::Text => t.push_text(piece),
        }
        from = cut;
        let now: Vec<Marker> = taken.iter().chain(t.markers()).copied().collect();
        assert!(
            now.starts_with(&seen),
            "markers() went back: {seen:?} then {now:?}"
        );
        seen = now;
        if k % 3 == 2 {
            taken.extend(t.take_markers());
        }
    }
    t.finish();
    let len = t.len();
    let mut all = taken;
    all.extend(t.take_markers());
    assert!(all.starts_with(&seen));
    // finish() is idempotent and later input is ignored.
    t.finish();
    t.push_json(b"[1]");
    t.push_text(b"[1]");
    assert!(t.markers().is_empty());
    assert_eq!(t.len(), len);
    (all, len)
}

fn reference(feed: Feed, input: &[u8], max: u32, unit: OffsetUnit) -> (Vec<Marker>, u64) {
    let text = match feed {
        Feed::Json => cite_ref::decode_json(input),
        Feed::Text => cite_ref::decode_text(input),
    };
    (
        cite_ref::markers(&text, max, unit),
        cite_ref::length(&text, unit),
    )
}

/// The full check of one vector: expected chars markers, then every unit at
/// every split point and byte by byte against the reference.
fn check(feed: Feed, input: &[u8], max: u32, expected: &[(u32, u64, u64)]) {
    let expected: Vec<Marker> = expected
        .iter()
        .map(|&(number, start, end)| Marker { number, start, end })
        .collect();
    let whole = run(feed, input, &[], max, OffsetUnit::Chars);
    assert_eq!(whole.0, expected, "fast tracker, whole input, chars");
    let refr = reference(feed, input, max, OffsetUnit::Chars);
    assert_eq!(refr.0, expected, "reference, chars");
    for unit in UNITS {
        let want = reference(feed, input, max, unit);
        assert_eq!(run(feed, input, &[], max, unit), want, "whole, {unit}");
        for cut in 0..=input.len() {
            assert_eq!(
                run(feed, input, &[cut], max, unit),
                want,
                "split at {cut}, {unit}"
            );
        }
        let bytewise: Vec<usize> = (0..=input.len()).collect();
        assert_eq!(
            run(feed, input, &bytewise, max, unit),
            want,
            "byte by byte, {unit}"
        );
    }
}

/// One named test per vector. `json` inputs are raw JSON string bodies (as
/// a Rust raw string: `\n` below is the JSON escape), `text` inputs are
/// decoded UTF-8 bytes. Expected markers are `(number, start, end)` in chars.
macro_rules! vectors {
    ($($name:ident: $feed:ident $max:literal $input:expr => [$(($n:expr, $s:expr, $e:expr)),* $(,)?];)*) => {
        $(
            #[test]
            fn $name() {
                check(Feed::$feed, AsRef::<[u8]>::as_ref($input), $max, &[$(($n, $s, $e)),*]);
            }
        )*
    };
}

vectors! {
    // Markers.
    spec_example: Json 3 "Saturday in Lisbon is forecast to be sunny with a high near 24 °C [1]. Sunday turns cloudy, with a chance of light rain in the afternoon [2]." => [(1, 66, 69), (2, 137, 140)];
    single_marker: Json 9 "a [1] b" => [(1, 2, 5)];
    adjacent_markers: Json 9 "[1][2]" => [(1, 0, 3), (2, 3, 6)];
    double_brackets: Json 9 "[[2]]" => [(2, 1, 4)];
    leading_zero: Json 99 "[01] [09] [010]" => [];
    zero: Json 9 "[0]" => [];
    five_digits: Json 4294967295 "[12345] [99999]" => [];
    four_digits: Json 9999 "[1234] [9999]" => [(1234, 0, 6), (9999, 7, 13)];
    out_of_range: Json 2 "[3] [2] [10]" => [(2, 4, 7)];
    max_zero: Json 0 "[1] [2]" => [];
    other_forms: Json 9 "[1, 2] [^1] [ 1] [1 ] [] [1a] [a1] (1) {1}" => [];
    unterminated: Json 9 "[1 [2" => [];
    marker_not_across_line: Json 9 r"[1\n] [2\n]" => [];
    restart_after_digits: Json 9 "[123[4]" => [(4, 4, 7)];
    backslash_before_bracket: Json 9 r"\\[1] [2]" => [(2, 5, 8)];
    escaped_backslash_pair_still_blocks: Json 9 r"\\\\[1]" => [];
    backslash_not_adjacent: Json 9 r"\\ [1]" => [(1, 2, 5)];
    backslash_via_text: Text 9 r"\[1] x\[2]y [3]" => [(3, 12, 15)];

    // Fenced code blocks.
    fence_backticks: Json 9 r"```\n[1]\n```\n[2]" => [(2, 12, 15)];
    fence_tildes: Json 9 r"~~~\n[1]\n~~~\n[2]" => [(2, 12, 15)];
    fence_opening_line_is_code: Json 9 r"``` [1]\n```\n[2]" => [(2, 12, 15)];
    fence_info_anything: Json 9 r"~~~ `[1]`\n[2]\n~~~\n[3]" => [(3, 18, 21)];
    fence_three_spaces: Json 9 r"   ```\n[1]\n   ```\n[2]" => [(2, 18, 21)];
    fence_four_spaces_is_not_a_fence: Json 9 r"    ```\n[1]" => [(1, 8, 11)];
    fence_tab_indent_is_not_a_fence: Json 9 r"\t```\n[1]" => [(1, 5, 8)];
    fence_two_backticks_is_not_a_fence: Json 9 r"``\n[1]\n``" => [];
    fence_two_tildes_is_not_a_fence: Json 9 r"~~\n[1]\n~~" => [(1, 3, 6)];
    fence_close_longer: Json 9 r"```\n[1]\n`````\n[2]" => [(2, 14, 17)];
    fence_close_too_short: Json 9 r"````\n[1]\n```\n[2]\n````\n[3]" => [(3, 22, 25)];
    fence_close_other_char: Json 9 r"```\n[1]\n~~~\n[2]" => [];
    fence_close_trailing_whitespace: Json 9 r"```\n[1]\n``` \t\r\n[2]" => [(2, 15, 18)];
    fence_close_trailing_text: Json 9 r"```\n[1]\n``` x\n[2]" => [];
    fence_close_three_spaces: Json 9 r"~~~\n[1]\n   ~~~\n[2]" => [(2, 15, 18)];
    fence_close_four_spaces: Json 9 r"```\n[1]\n    ```\n[2]" => [];
    fence_close_not_on_opening_line: Json 9 r"``` ```\n[1]" => [];
    fence_unclosed: Json 9 r"[1]\n```python\n[2]\n[3]" => [(1, 0, 3)];
    fence_ends_paragraph: Json 9 r"a `[1]\n```\n`[2]" => [(1, 3, 6)];
    fence_after_paragraph_closed: Json 9 r"x\n```\n[1]\n```\ny [2]" => [(2, 16, 19)];
    fence_non_ascii_line: Json 9 r"```\né```\n[1]" => [];

    // Inline code spans.
    span_one_backtick: Json 9 "`[1]` [2]" => [(2, 6, 9)];
    span_two_backticks: Json 9 "``a ` [1]`` [2]" => [(2, 12, 15)];
    span_three_backticks: Json 9 "a ```[1]``` [2]" => [(2, 12, 15)];
    span_needs_exact_length: Json 9 "a `` [1] ``` [2]" => [(1, 5, 8), (2, 13, 16)];
    span_unmatched_then_later_span: Json 9 "`` [1] `[2]` [3]" => [(1, 3, 6), (3, 13, 16)];
    span_across_line: Json 9 r"a `[1]\n[2]` [3]" => [(3, 12, 15)];
    span_not_across_blank_line: Json 9 r"a `[1]\n\n[2]` [3]" => [(1, 3, 6), (2, 8, 11), (3, 13, 16)];
    span_not_across_whitespace_line: Json 9 r"a `[1]\n \t\r\n[2]`" => [(1, 3, 6), (2, 11, 14)];
    span_at_line_start: Json 9 "`` [1] ``" => [];
    span_unmatched_at_line_start: Json 9 "`` [1]" => [(1, 3, 6)];
    span_nested_resolution: Json 9 r"`` [1] ` [2] ` [3]\n\n[4]" => [(1, 3, 6), (3, 15, 18), (4, 20, 23)];
    span_closed_then_marker: Json 9 "`x` [1]" => [(1, 4, 7)];
    span_via_escapes: Json 9 r"\u0060[1]\u0060 [2]" => [(2, 6, 9)];
    tildes_are_not_spans: Json 9 "a ~[1]~ ~~[2]~~" => [(1, 3, 6), (2, 10, 13)];

    // JSON escapes.
    escape_u_bmp: Json 9 r"caf\u00e9 [1]" => [(1, 5, 8)];
    escape_slash_and_quote: Json 9 r#"\/[1]\"[2]\""# => [(1, 1, 4), (2, 5, 8)];
    escape_controls: Json 9 r"\b\f\t\r[1]" => [(1, 4, 7)];
    escape_newline_is_a_line_break: Json 9 r"x\n```\n[1]" => [];
    escape_u_newline_is_a_line_break: Json 9 r"x\u000a```\u000A[1]" => [];
    escape_u_bracket: Json 9 r"\u005b1\u005d" => [(1, 0, 3)];
    surrogate_pair: Json 9 r"\ud83d\ude00 [1]" => [(1, 2, 5)];
    surrogate_pair_upper_hex: Json 9 r"\uD83D\uDE00[1]" => [(1, 1, 4)];
    lone_high_surrogate: Json 9 r"\ud83d [1]" => [(1, 2, 5)];
    lone_high_at_end: Json 9 r"[1]\ud83d" => [(1, 0, 3)];
    lone_low_surrogate: Json 9 r"\ude00[1]" => [(1, 1, 4)];
    high_high_low: Json 9 r"\ud83d\ud83d\ude00[1]" => [(1, 2, 5)];
    high_then_raw_low_text: Json 9 r"\ud83dx\ude00[1]" => [(1, 3, 6)];
    high_then_newline_escape: Json 9 r"\ud83d\n[1]" => [(1, 2, 5)];
    high_then_invalid_escape: Json 9 r"\ud83d\x[1]" => [(1, 3, 6)];
    invalid_escape_char: Json 9 r"\x[1]" => [(1, 2, 5)];
    invalid_escape_bracket: Json 9 r"\[1]" => [(1, 1, 4)];
    invalid_escape_non_hex: Json 9 r"\u12G4[1]" => [(1, 3, 6)];
    invalid_escape_short_u: Json 9 r"\u00[1]" => [(1, 1, 4)];
    invalid_escape_bare_u: Json 9 r"\u[1]" => [(1, 1, 4)];
    invalid_escape_then_escape: Json 9 r"\u0\n[1]" => [(1, 2, 5)];
    invalid_escape_then_backslash: Json 9 r"\u0\\[1]" => [];
    invalid_escape_non_ascii: Json 9 r"\é[1]" => [(1, 2, 5)];
    trailing_backslash: Json 9 r"[1]\" => [(1, 0, 3)];
    trailing_short_u: Json 9 r"[1]\u00e" => [(1, 0, 3)];

    // Non-ASCII, invalid UTF-8, CRLF.
    non_ascii: Json 9 "日本語 [1] émoji 😀 [2]" => [(1, 4, 7), (2, 16, 19)];
    non_ascii_breaks_marker: Json 9 "[1é] [é1]" => [];
    invalid_utf8_json_raw: Json 9 b"\xff[1] \xe2\x82[2]\xed\xa0\x80[3]" => [(1, 1, 4), (2, 6, 9), (3, 12, 15)];
    invalid_utf8_text: Text 9 b"\xff[1] \xe2\x82[2] \xf0\x9f\x98\x80[3]" => [(1, 1, 4), (2, 6, 9), (3, 11, 14)];
    invalid_utf8_text_truncated: Text 9 b"[1] \xf0\x9f\x98" => [(1, 0, 3)];
    invalid_utf8_text_overlong: Text 9 b"\xc0\xaf[1]\xf0\x80\x80[2]" => [(1, 2, 5), (2, 8, 11)];
    text_with_fences: Text 9 "é\n```\n[1]\n```\n[2] 😀" => [(2, 14, 17)];
    crlf_content: Json 9 r"a [1]\r\n\r\n```\r\n[2]\r\n```\r\n[3]" => [(1, 2, 5), (3, 24, 27)];
    crlf_blank_line_ends_paragraph: Text 9 "a `[1]\r\n\r\n[2]`" => [(1, 3, 6), (2, 10, 13)];
    raw_newline_in_json: Json 9 b"x\n```\n[1]\n```\n[2]" => [(2, 14, 17)];
    empty: Json 9 "" => [];
}

#[test]
fn spec_example_in_every_unit() {
    let s = "Saturday in Lisbon is forecast to be sunny with a high near 24 °C [1]. Sunday turns cloudy, with a chance of light rain in the afternoon [2].";
    let got = |unit| run(Feed::Json, s.as_bytes(), &[], 3, unit).0;
    let m = |number, start, end| Marker { number, start, end };
    assert_eq!(got(OffsetUnit::Chars), [m(1, 66, 69), m(2, 137, 140)]);
    assert_eq!(got(OffsetUnit::Utf16), [m(1, 66, 69), m(2, 137, 140)]);
    // `°` is 2 bytes in UTF-8.
    assert_eq!(got(OffsetUnit::Bytes), [m(1, 67, 70), m(2, 138, 141)]);
}

#[test]
fn units_of_non_bmp_and_replacement() {
    // 😀 (pair), a lone surrogate (U+FFFD), é, then the marker.
    let input = br"\ud83d\ude00\ud800\u00e9[1]";
    let want = |unit, start: u64| {
        let mut t = MarkerTracker::new(1, unit);
        t.push_json(input);
        t.finish();
        assert_eq!(
            t.markers(),
            [Marker {
                number: 1,
                start,
                end: start + 3
            }]
        );
        assert_eq!(t.len(), start + 3);
    };
    want(OffsetUnit::Chars, 3);
    want(OffsetUnit::Utf16, 4);
    want(OffsetUnit::Bytes, 4 + 3 + 2);
}

#[test]
fn len_and_is_empty() {
    let mut t = MarkerTracker::new(1, OffsetUnit::Bytes);
    assert!(t.is_empty());
    t.push_text("é".as_bytes()[..1].as_ref());
    // An incomplete sequence is not counted yet.
    assert!(t.is_empty());
    t.push_text(&"é".as_bytes()[1..]);
    assert_eq!(t.len(), 2);
    assert!(!t.is_empty());
    assert_eq!(t.unit(), OffsetUnit::Bytes);
    assert_eq!(t.max_number(), 1);
    assert!(!t.is_finished());
    t.finish();
    assert!(t.is_finished());
}

#[test]
fn markers_are_final_early_when_nothing_is_undecided() {
    let mut t = MarkerTracker::new(9, OffsetUnit::Chars);
    t.push_text(b"a [1] b `code` [2");
    assert_eq!(
        t.markers(),
        [Marker {
            number: 1,
            start: 2,
            end: 5
        }]
    );
    t.push_text(b"] `x [3]");
    assert_eq!(t.markers().len(), 2, "[3] waits for the open span");
    t.push_text(b"\n\n");
    assert_eq!(t.markers().len(), 3, "the blank line resolved it");
}

#[test]
fn mixing_feeds_does_not_panic() {
    let mut t = MarkerTracker::new(9, OffsetUnit::Utf16);
    t.push_json(br"\ud83d");
    t.push_text(b"\xf0\x9f");
    t.push_json(br"\u00");
    t.push_text(b"[1]");
    t.push_json(b"\xe2");
    t.finish();
    let _ = t.markers();
}

#[test]
fn offset_unit_parse_and_display() {
    for unit in UNITS {
        assert_eq!(unit.to_string().parse::<OffsetUnit>(), Ok(unit));
        assert_eq!(unit.as_str(), unit.to_string());
    }
    assert_eq!(OffsetUnit::default(), OffsetUnit::Chars);
    let err = "Chars".parse::<OffsetUnit>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown offset unit (expected chars, utf16 or bytes)"
    );
    assert!("".parse::<OffsetUnit>().is_err());
    let _: &dyn std::error::Error = &err;
}

#[test]
fn tracker_is_small_send_and_sync() {
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<MarkerTracker>();
    let size = std::mem::size_of::<MarkerTracker>();
    assert!(size <= 160, "MarkerTracker is {size} bytes");
    assert_eq!(std::mem::size_of::<Marker>(), 24);
}

#[test]
fn no_content_is_kept() {
    // A long content without markers or backticks leaves no trace.
    let mut t = MarkerTracker::new(9, OffsetUnit::Chars);
    let line = "Plain text with [brackets], [^notes] and é characters.\n".repeat(1000);
    t.push_text(line.as_bytes());
    assert!(t.markers().is_empty());
    assert_eq!(t.len(), line.chars().count() as u64);
}

#[test]
fn reference_decoder_agrees_with_serde_json_on_fixed_cases() {
    for s in [
        r#"a\"b\\c\/d\b\f\n\r\t"#,
        r"\u00e9\u4e2d\ud83d\ude00\uD83D\uDE00",
        "raw é 中 😀",
        r"\u0000\u001f\u007f\u0080\uffff",
    ] {
        let serde: String = serde_json::from_str(&format!("\"{s}\"")).unwrap();
        let mine: String = cite_ref::decode_json(s.as_bytes()).into_iter().collect();
        assert_eq!(mine, serde, "{s}");
    }
}

/// JSON-escapes every character of `s` as `\uXXXX` (pairs for non-BMP).
fn u_escape_all(s: &str) -> String {
    s.encode_utf16().map(|u| format!("\\u{u:04x}")).collect()
}

/// Fragments of escaped JSON string bodies for the differential tests.
const FRAGMENTS: &[&[u8]] = &[
    b"[1]",
    b"[2]",
    b"[3]",
    b"[9]",
    b"[10]",
    b"[1234]",
    b"[[2]]",
    b"[01]",
    b"[0]",
    b"[12345]",
    b"[",
    b"]",
    b"1",
    b"0",
    b"2",
    br"\\[1]",
    br"\[1]",
    b"[1, 2]",
    b"[^1]",
    b"`",
    b"``",
    b"```",
    b"````",
    b"~~~",
    b"~~~~",
    b"~",
    b" ",
    b"   ",
    b"    ",
    br"\t",
    br"\r",
    br"\n",
    br"\n",
    br"\n",
    br"\r\n",
    br"\n\n",
    b"\n",
    b"a",
    b"text ",
    "é".as_bytes(),
    br"\u00e9",
    br"\u005b",
    br"\u005d",
    br"\u0060",
    br"\u000a",
    br"\u0020",
    br"\ud83d",
    br"\ude00",
    br"\ud83d\ude00",
    "😀".as_bytes(),
    "日".as_bytes(),
    br"\u12G4",
    br"\x",
    br"\u",
    br"\u0",
    br"\",
    br"\\",
    br"\/",
    br#"\""#,
    b"\xff",
    b"\xe2\x82",
    b"\xf0\x9f",
    b"\x98\x80",
    b"\xed\xa0\x80",
    b"^",
    b",",
];

fn content() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..48).prop_map(|parts| parts.concat())
}

fn chunked(len: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..=len, 0..12).prop_map(|mut cuts| {
        cuts.sort_unstable();
        cuts
    })
}

/// Line-shaped contents: indents, fence-like runs and inline fragments,
/// joined by line breaks of every spelling, so that fences and paragraphs
/// get exercised far more often than with flat fragments.
fn lines() -> impl Strategy<Value = Vec<u8>> {
    let indent = prop::sample::select(&["", "", " ", "  ", "   ", "    ", r"\t", "\t"][..]);
    let lead = prop::sample::select(
        &[
            "",
            "",
            "```",
            "````",
            "`````",
            "~~~",
            "~~~~",
            "``",
            "~~",
            "`",
            r"\u0060\u0060\u0060",
        ][..],
    );
    let tail = prop::collection::vec(prop::sample::select(FRAGMENTS), 0..5);
    let trail = prop::sample::select(&["", "", " ", r"\t", r"\r", r" \r", "x"][..]);
    let brk =
        prop::sample::select(&[r"\n", r"\n", r"\r\n", r"\u000a", r"\n\n", r"\n   \n", "\n"][..]);
    let line = (indent, lead, tail, trail, brk).prop_map(|(i, l, t, tr, b)| {
        let mut v = Vec::new();
        v.extend_from_slice(i.as_bytes());
        v.extend_from_slice(l.as_bytes());
        for f in t {
            v.extend_from_slice(f);
        }
        v.extend_from_slice(tr.as_bytes());
        v.extend_from_slice(b.as_bytes());
        v
    });
    prop::collection::vec(line, 0..12).prop_map(|ls| ls.concat())
}

/// Mostly small maxima, sometimes large ones so that 4- and 5-digit numbers
/// are in range.
fn max_number() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..12, 1 => Just(9999u32), 1 => Just(u32::MAX)]
}

/// The decoded (UTF-8) form of [`lines`], for `push_text`.
fn text_lines() -> impl Strategy<Value = Vec<u8>> {
    lines().prop_map(|escaped| {
        let decoded: String = cite_ref::decode_json(&escaped).into_iter().collect();
        decoded.into_bytes()
    })
}

fn with_cuts(
    content: impl Strategy<Value = Vec<u8>>,
) -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    content.prop_flat_map(|c| {
        let len = c.len();
        (Just(c), chunked(len))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn json_fast_equals_reference((input, cuts) in with_cuts(prop_oneof![content(), lines()]), max in max_number()) {
        for unit in UNITS {
            let want = reference(Feed::Json, &input, max, unit);
            prop_assert_eq!(run(Feed::Json, &input, &cuts, max, unit), want);
        }
    }

    #[test]
    fn text_fast_equals_reference((input, cuts) in with_cuts(prop_oneof![content(), text_lines()]), max in max_number()) {
        for unit in UNITS {
            let want = reference(Feed::Text, &input, max, unit);
            prop_assert_eq!(run(Feed::Text, &input, &cuts, max, unit), want);
        }
    }

    #[test]
    fn arbitrary_bytes_equal_reference(
        (input, cuts) in with_cuts(prop::collection::vec(any::<u8>(), 0..64)),
        max in max_number(),
    ) {
        for unit in UNITS {
            prop_assert_eq!(run(Feed::Json, &input, &cuts, max, unit), reference(Feed::Json, &input, max, unit));
            prop_assert_eq!(run(Feed::Text, &input, &cuts, max, unit), reference(Feed::Text, &input, max, unit));
        }
    }

    #[test]
    fn byte_by_byte_equals_whole(input in prop_oneof![content(), lines()], max in max_number()) {
        let cuts: Vec<usize> = (0..=input.len()).collect();
        for unit in UNITS {
            prop_assert_eq!(
                run(Feed::Json, &input, &cuts, max, unit),
                run(Feed::Json, &input, &[], max, unit)
            );
        }
    }

    #[test]
    fn reference_decoder_agrees_with_serde_json(s in any::<String>()) {
        let plain = serde_json::to_string(&s).unwrap();
        let body = &plain[1..plain.len() - 1];
        let decoded: String = cite_ref::decode_json(body.as_bytes()).into_iter().collect();
        prop_assert_eq!(&decoded, &s);
        let escaped = u_escape_all(&s);
        let serde: String = serde_json::from_str(&format!("\"{escaped}\"")).unwrap();
        prop_assert_eq!(&serde, &s);
        let decoded: String = cite_ref::decode_json(escaped.as_bytes()).into_iter().collect();
        prop_assert_eq!(&decoded, &s);
    }

    #[test]
    fn json_and_text_feeds_agree_on_valid_json(
        parts in prop::collection::vec(prop::sample::select(&[
            "[1]", "[2]", "[[3]]", "\\[1]", "`", "``", "```", "~~~", "\n", "\n\n", "   ",
            "\r\n", "é", "😀", "中", "\"", "\\", "a ", "[01]", "\t",
        ][..]), 0..40),
        escape_all in any::<bool>(),
    ) {
        let s: String = parts.concat();
        let body = if escape_all {
            u_escape_all(&s)
        } else {
            let plain = serde_json::to_string(&s).unwrap();
            plain[1..plain.len() - 1].to_owned()
        };
        for unit in UNITS {
            let from_json = run(Feed::Json, body.as_bytes(), &[], 9, unit);
            let from_text = run(Feed::Text, s.as_bytes(), &[], 9, unit);
            prop_assert_eq!(&from_json, &from_text);
            prop_assert_eq!(from_text, reference(Feed::Text, s.as_bytes(), 9, unit));
        }
    }
}

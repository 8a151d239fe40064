//! The marker tracker alone: a JSON string body (or decoded text) fed split
//! at arbitrary points gives the same markers and length as fed whole, as
//! fed one byte at a time, as the general path without the fast path
//! (`push_json_general`), and as the slow reference
//! (`tests/common/cite_ref.rs`), in every offset unit. The input is raw
//! bytes or, for `shaped` cases, a concatenation of Markdown and JSON
//! fragments the rules care about (markers, backtick runs, fences, escapes,
//! surrogates, non-ASCII and invalid UTF-8). Never panics.
#![no_main]

use arbitrary::Arbitrary;
use citestream::cite::{Marker, MarkerTracker, OffsetUnit};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/cite_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod cite_ref;

/// What a `shaped` input is built from, one fragment per fuzz byte.
const FRAGMENTS: &[&[u8]] = &[
    b"[",
    b"]",
    b"1",
    b"2",
    b"0",
    b"9",
    b"12",
    b"[1]",
    b"[2]",
    b"[10]",
    b"[9999]",
    b"`",
    b"``",
    b"```",
    b"~~~",
    b" ",
    b"   ",
    b"\t",
    b"\r",
    b"\n",
    br"\n",
    br"\n\n",
    br"\t",
    br"\r",
    br#"\""#,
    br"\\",
    br"\/",
    b"\\",
    br"\u",
    br"\u005b",
    br"\u005d",
    br"\u0060",
    br"\u0031",
    br"\u000a",
    br"\ud83d",
    br"\ude00",
    br"\ud83d\ude00",
    br"\q",
    b"a",
    b"the ",
    b"x",
    "é".as_bytes(),
    "東".as_bytes(),
    "😀".as_bytes(),
    b"\xC3",
    b"\xF0\x9F",
    b"\x98\x80",
    b"\xFF",
    b"\xED\xA0\x80",
    b"\xE0\x80",
    b"\"",
    b"^",
    b",",
];

#[derive(Arbitrary, Debug)]
struct Case {
    json: bool,
    shaped: bool,
    max: u8,
    cuts: Vec<u16>,
    data: Vec<u8>,
}

fn feed(t: &mut MarkerTracker, json: bool, piece: &[u8], general: bool) {
    match (json, general) {
        (true, false) => t.push_json(piece),
        (false, false) => t.push_text(piece),
        (true, true) => t.push_json_general(piece),
        (false, true) => t.push_text_general(piece),
    }
}

/// Feeds `pieces`, checking that the final markers only ever grow.
fn run(
    pieces: &[&[u8]],
    json: bool,
    max: u32,
    unit: OffsetUnit,
    general: bool,
) -> (Vec<Marker>, u64) {
    let mut t = MarkerTracker::new(max, unit);
    let mut seen = 0;
    for piece in pieces {
        feed(&mut t, json, piece, general);
        assert!(t.markers().len() >= seen, "markers went back");
        seen = t.markers().len();
    }
    t.finish();
    (t.markers().to_vec(), t.len())
}

fuzz_target!(|case: Case| {
    let input: Vec<u8> = if case.shaped {
        case.data
            .iter()
            .flat_map(|&b| FRAGMENTS[usize::from(b) % FRAGMENTS.len()].iter().copied())
            .collect()
    } else {
        case.data
    };
    if input.len() > 8192 {
        return;
    }
    let max = u32::from(case.max % 12);
    let cuts = citestream::fuzzing::cuts(&case.cuts, input.len());
    let mut pieces = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain([&input.len()]) {
        pieces.push(&input[from..cut]);
        from = cut;
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let text = if case.json {
        cite_ref::decode_json(&input)
    } else {
        cite_ref::decode_text(&input)
    };
    for unit in [OffsetUnit::Chars, OffsetUnit::Utf16, OffsetUnit::Bytes] {
        let want = (
            cite_ref::markers(&text, max, unit),
            cite_ref::length(&text, unit),
        );
        let whole = run(&[&input], case.json, max, unit, false);
        assert_eq!(whole, want, "whole vs reference, {unit}");
        assert_eq!(
            run(&pieces, case.json, max, unit, false),
            want,
            "split at {cuts:?}, {unit}"
        );
        assert_eq!(
            run(&bytes, case.json, max, unit, false),
            want,
            "byte by byte, {unit}"
        );
        assert_eq!(
            run(&pieces, case.json, max, unit, true),
            want,
            "general path, split at {cuts:?}, {unit}"
        );
    }
});

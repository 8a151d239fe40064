//! Property tests: the fast parser against the reference parser on random
//! SSE-ish bytes and random chunkings, size limits, and the writer round
//! trip.

mod common;

use bytes::Bytes;
use citestream::sse::{Config, Frame, Parser, write_event};
use common::sse_ref::{self, RefDetail, interpret, interpret_limited, pieces_at, run_pieces};
use proptest::collection::vec;
use proptest::prelude::*;

/// Tokens that make up SSE-ish input: field names with and without colons,
/// spaces, every line end, BOM bytes whole and partial, invalid UTF-8, NUL.
const TOKENS: &[&[u8]] = &[
    b"data",
    b"data:",
    b"data: ",
    b"event:",
    b"event: ",
    b"id:",
    b"id: ",
    b"retry:",
    b"retry: ",
    b":",
    b": ",
    b" ",
    b"\r",
    b"\n",
    b"\r\n",
    b"\n\n",
    b"\r\n\r\n",
    b"\xEF\xBB\xBF",
    b"\xEF",
    b"\xBB",
    b"\xBF",
    b"\xEF\xBB",
    b"\xFF",
    b"\xC3",
    b"\xE2\x82",
    b"\0",
    b"x",
    b"ab",
    b"7",
    b"12",
    b"\xC3\xA9",
    b"foo",
    b"Data",
    b"[DONE]",
    b"{\"a\":1}",
];

/// SSE-ish bytes: mostly tokens, now and then any byte at all.
fn sse_bytes(max_tokens: usize) -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        8 => prop::sample::select(TOKENS).prop_map(<[u8]>::to_vec),
        1 => any::<u8>().prop_map(|b| vec![b]),
    ];
    vec(token, 0..max_tokens).prop_map(|t| t.concat())
}

/// Input, sorted cut points, and a drain pattern (drain after a piece or
/// let pieces queue up).
fn chunked(max_tokens: usize) -> impl Strategy<Value = (Vec<u8>, Vec<usize>, Vec<bool>)> {
    sse_bytes(max_tokens).prop_flat_map(|input| {
        let n = input.len();
        (
            Just(input),
            vec(0..=n, 0..12).prop_map(|mut c| {
                c.sort_unstable();
                c
            }),
            vec(any::<bool>(), 1..4),
        )
    })
}

/// 1024 cases by default; `SSE_PROPTEST_CASES=N` for a longer search.
fn cases() -> u32 {
    match std::env::var("SSE_PROPTEST_CASES") {
        Ok(n) => n.parse().expect("SSE_PROPTEST_CASES must be a number"),
        Err(_) if cfg!(miri) => 8,
        Err(_) => 1024,
    }
}

fn initial_id() -> impl Strategy<Value = Option<String>> {
    prop::option::of("[a-z0-9 ]{0,6}")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// The fast parser gives the reference's events (and retry values,
    /// reconnection time, last event ID) whatever the chunking, and its
    /// frames plus the `finish()` tail are the input byte for byte.
    #[test]
    fn fast_parser_matches_reference(
        (input, cuts, drain) in chunked(80),
        id in initial_id(),
    ) {
        let input = Bytes::from(input);
        let reference = interpret(&input, id.as_deref());
        let run = run_pieces(
            &Config::new(),
            id.as_deref().map(str::as_bytes),
            &pieces_at(&input, &cuts),
            &drain,
        );
        prop_assert_eq!(run.details(), reference.events);
        prop_assert_eq!(&run.concat()[..], &input[..]);
        check_frames(&run)?;
        prop_assert_eq!(run.reconnection_time, reference.reconnection_time_at_last_blank_line);
        prop_assert_eq!(
            String::from_utf8_lossy(&run.last_event_id),
            reference.last_event_id
        );
        // The tail is exactly the bytes after the last blank line.
        let whole = run_pieces(&Config::new(), id.as_deref().map(str::as_bytes), std::slice::from_ref(&input), &[]);
        prop_assert_eq!(&run.tail, &whole.tail);
    }

    /// The byte-level limited reference with no limit is the WHATWG one.
    #[test]
    fn limited_reference_without_limit_is_the_reference(input in sse_bytes(80)) {
        let limited = interpret_limited(&input, None, usize::MAX);
        let whatwg = interpret(&input, None);
        prop_assert_eq!(limited.complete_blocks(), whatwg.complete_blocks());
    }

    /// With a small event size limit: events over it are never dispatched,
    /// the same events come out whatever the chunking (those the limited
    /// reference gives), nothing is lost, and the parser never holds more
    /// than the limit plus one line end.
    #[test]
    fn small_limits_bound_memory_and_do_not_depend_on_chunking(
        (input, cuts, drain) in chunked(80),
        (cuts2, drain2) in (vec(0..=400usize, 0..12), vec(any::<bool>(), 1..4)),
        max in 0usize..48,
    ) {
        let input = Bytes::from(input);
        let mut config = Config::new();
        config.max_event_size(max);
        let run = run_pieces(&config, None, &pieces_at(&input, &cuts), &drain);
        let reference = interpret_limited(&input, None, max);
        prop_assert_eq!(run.details(), reference.events);
        prop_assert_eq!(&run.concat()[..], &input[..]);
        prop_assert!(run.max_buffered <= max + 2, "buffered {} > {} + 2", run.max_buffered, max);
        // What the parser holds back after a drain is at most the current
        // block, which is within the limit, plus a line end: oversized
        // bytes are handed out as they arrive.
        prop_assert!(run.max_held <= max + 2, "held {} > {} + 2", run.max_held, max);
        for e in run.events() {
            // The raw bytes are the event's lines plus a blank line of at
            // most two bytes.
            prop_assert!(e.raw().len() <= max + 2, "dispatched {} bytes over {}", e.raw().len(), max);
        }
        // An independent second chunking gives the same events exactly.
        let mut cuts2: Vec<usize> = cuts2.into_iter().filter(|&c| c <= input.len()).collect();
        cuts2.sort_unstable();
        let run2 = run_pieces(&config, None, &pieces_at(&input, &cuts2), &drain2);
        prop_assert_eq!(run2.keys(), run.keys());
        prop_assert_eq!(&run2.concat()[..], &input[..]);
        prop_assert_eq!(&run2.tail, &run.tail);
        prop_assert_eq!(run2.reconnection_time, run.reconnection_time);
        prop_assert_eq!(&run2.last_event_id, &run.last_event_id);
        check_frames(&run)?;
        // Every byte of a block over the limit is handed out as an
        // `Oversized` frame, and nothing else is.
        let (sizes, trailing) = sse_ref::blocks(&input);
        let over: usize = sizes.iter().filter(|&&s| s > max).sum();
        prop_assert!(run.oversized_bytes() >= over);
        if over == 0 && trailing <= max {
            prop_assert_eq!(run.oversized_bytes(), 0);
        }
    }

    /// One byte at a time, with a small limit.
    #[test]
    fn small_limits_one_byte_at_a_time(input in sse_bytes(60), max in 0usize..40) {
        let input = Bytes::from(input);
        let mut config = Config::new();
        config.max_event_size(max);
        let cuts: Vec<usize> = (1..input.len()).collect();
        let run = run_pieces(&config, None, &pieces_at(&input, &cuts), &[]);
        prop_assert_eq!(run.details(), interpret_limited(&input, None, max).events);
        prop_assert_eq!(&run.concat()[..], &input[..]);
        prop_assert!(run.max_buffered <= max + 2);
        prop_assert!(run.max_held <= max + 2, "held {} > {} + 2", run.max_held, max);
    }

    /// Events written with `write_event` parse back to the same event type,
    /// data (line ends in it normalised to LF, as the writer documents),
    /// last event ID and retry, in any chunking.
    #[test]
    fn write_then_parse_round_trips(
        events in vec(
            (
                prop::option::of(vec(prop::sample::select(TOKENS), 0..4)),
                prop::option::of(vec(prop::sample::select(TOKENS), 0..4)),
                prop::option::of(any::<u64>()),
                vec(prop::sample::select(TOKENS), 0..8),
            ),
            0..8,
        ),
        cut_seed in any::<u64>(),
    ) {
        let mut wire = Vec::new();
        let mut want = Vec::new();
        let mut last_id: Vec<u8> = Vec::new();
        for (event, id, retry, data) in &events {
            let event = event.as_ref().map(|t| t.concat());
            let id = id.as_ref().map(|t| t.concat());
            let data = data.concat();
            write_event(&mut wire, event.as_deref(), id.as_deref(), *retry, &data);
            let ty = match event.as_deref().map(first_line) {
                Some(t) if !t.is_empty() => t.to_vec(),
                _ => b"message".to_vec(),
            };
            if let Some(id) = id.as_deref().map(first_line) {
                if !id.contains(&0) {
                    last_id = id.to_vec();
                }
            }
            want.push(RefDetail {
                event_type: String::from_utf8_lossy(&ty).into_owned(),
                data: String::from_utf8_lossy(&normalise_line_ends(&data)).into_owned(),
                last_event_id: String::from_utf8_lossy(&last_id).into_owned(),
                retry: *retry,
                event_field: event
                    .as_deref()
                    .map(|e| String::from_utf8_lossy(first_line(e)).into_owned()),
                id_field: id
                    .as_deref()
                    .map(|i| String::from_utf8_lossy(first_line(i)).into_owned()),
            });
        }
        // Canonical framing: LF only, no BOM, every block has data.
        prop_assert!(!wire.contains(&b'\r'));
        let wire = Bytes::from(wire);
        let mut rng = sse_ref::Rng::new(cut_seed);
        let cuts = rng.cuts(wire.len(), 16);
        let run = run_pieces(&Config::new(), None, &pieces_at(&wire, &cuts), &[]);
        prop_assert_eq!(run.details(), want);
        prop_assert!(run.tail.is_none());
        prop_assert!(run.frames.iter().all(|f| matches!(f, Frame::Event(_))));
    }

    /// Parse, write every event back, parse again: the same events.
    #[test]
    fn parse_write_parse_is_stable(input in sse_bytes(80)) {
        let input = Bytes::from(input);
        let first = run_pieces(&Config::new(), None, &[input], &[]);
        let mut wire = Vec::new();
        for e in first.events() {
            write_event(&mut wire, Some(e.event_type()), Some(e.last_event_id()), e.retry(), e.data());
        }
        let second = run_pieces(&Config::new(), None, &[Bytes::from(wire)], &[]);
        let strip = |r: &sse_ref::Run| -> Vec<_> {
            r.keys().into_iter().map(|k| (k.event_type, k.data, k.last_event_id, k.retry)).collect()
        };
        prop_assert_eq!(strip(&second), strip(&first));
    }
}

/// Structural checks on a run's frames that hold for any input: no empty
/// frame; `LineEnd` is one LF right after a frame ending in CR; events and
/// skipped blocks end with a line end; a single-line event's data range
/// points at its data; and re-parsing a frame's raw bytes on their own
/// gives the same event (or none, for a skipped block).
fn check_frames(run: &sse_ref::Run) -> Result<(), TestCaseError> {
    // A frame re-parsed on its own: after a blank line unless it is the
    // first, so that a BOM starting a later frame is not taken for the
    // stream's leading BOM.
    let alone = |i: usize, raw: &Bytes| -> sse_ref::Run {
        let raw = if i == 0 {
            raw.clone()
        } else {
            Bytes::from([&b"\n"[..], raw].concat())
        };
        run_pieces(&Config::new(), None, &[raw], &[])
    };
    let mut prev: Option<&Frame> = None;
    for (i, f) in run.frames.iter().enumerate() {
        prop_assert!(!f.raw().is_empty(), "empty frame");
        match f {
            Frame::LineEnd(b) => {
                prop_assert_eq!(&b[..], b"\n");
                let p = prev.expect("LineEnd first");
                prop_assert_eq!(p.raw().last(), Some(&b'\r'), "LineEnd after {:?}", p);
            }
            Frame::Event(e) => {
                prop_assert!(matches!(e.raw().last(), Some(b'\n' | b'\r')));
                if let Some(r) = e.data_range() {
                    prop_assert_eq!(&e.raw()[r], e.data());
                }
                let again = alone(i, e.raw());
                let evs: Vec<_> = again.events().collect();
                prop_assert_eq!(evs.len(), 1);
                prop_assert_eq!(evs[0].data(), e.data());
                prop_assert_eq!(evs[0].event_type(), e.event_type());
                prop_assert_eq!(evs[0].event_field(), e.event_field());
                prop_assert_eq!(evs[0].id_field(), e.id_field());
                prop_assert_eq!(evs[0].retry(), e.retry());
                prop_assert!(again.tail.is_none());
            }
            Frame::Skipped(b) => {
                prop_assert!(matches!(b.last(), Some(b'\n' | b'\r')));
                let again = alone(i, b);
                prop_assert_eq!(again.events().count(), 0);
                prop_assert!(again.tail.is_none());
            }
            Frame::Oversized(_) => {}
        }
        prev = Some(f);
    }
    Ok(())
}

fn first_line(v: &[u8]) -> &[u8] {
    match v.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(i) => &v[..i],
        None => v,
    }
}

/// CRLF and CR to LF.
fn normalise_line_ends(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'\r' {
            out.push(b'\n');
            i += if v.get(i + 1) == Some(&b'\n') { 2 } else { 1 };
        } else {
            out.push(v[i]);
            i += 1;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases() / 4))]

    /// After `finish()`, one parser parses a second stream exactly as a
    /// fresh parser with the same configuration and initial ID does.
    #[test]
    fn finish_then_reuse_is_a_fresh_parser(
        first in sse_bytes(40),
        second in sse_bytes(40),
        max in prop::option::of(0usize..48),
        id in initial_id(),
        seed in any::<u64>(),
    ) {
        let mut config = Config::new();
        if let Some(max) = max {
            config.max_event_size(max);
        }
        let mut rng = sse_ref::Rng::new(seed);
        let mut p = Parser::with_config(&config);
        if let Some(id) = &id {
            p.set_last_event_id(Bytes::copy_from_slice(id.as_bytes()));
        }
        for stream in [first, second] {
            let stream = Bytes::from(stream);
            let mut frames = Vec::new();
            for piece in pieces_at(&stream, &rng.cuts(stream.len(), 8)) {
                p.feed(piece);
                frames.extend(std::iter::from_fn(|| p.next_frame()));
            }
            let tail = p.finish();
            let fresh = run_pieces(&config, id.as_deref().map(str::as_bytes), &[stream], &[]);
            let keys: Vec<_> = frames
                .iter()
                .filter_map(|f| match f {
                    Frame::Event(e) => Some(sse_ref::EventKey::of(e)),
                    _ => None,
                })
                .collect();
            prop_assert_eq!(keys, fresh.keys());
            prop_assert_eq!(tail, fresh.tail);
        }
    }
}

/// `finish()` resets the parser for a new stream: a second stream parses
/// as if on a fresh parser with the same initial ID and limit.
#[test]
fn finish_resets_for_a_new_stream() {
    let mut config = Config::new();
    config.max_event_size(64);
    let mut p = Parser::with_config(&config);
    p.set_last_event_id(Bytes::from_static(b"init"));
    p.feed(Bytes::from_static(
        b"id: 1\nretry: 5\ndata: a\n\nevent: x\ndata: cut",
    ));
    let mut n = 0;
    while let Some(f) = p.next_frame() {
        assert!(matches!(f, Frame::Event(_)));
        n += 1;
    }
    assert_eq!(n, 1);
    assert_eq!(p.last_event_id(), b"1");
    assert_eq!(p.finish().as_deref(), Some(&b"event: x\ndata: cut"[..]));
    assert_eq!(p.last_event_id(), b"init");
    assert_eq!(p.buffered(), 0);
    p.feed(Bytes::from_static(b"\xEF\xBB\xBFdata: b\n\n"));
    let Some(Frame::Event(e)) = p.next_frame() else {
        panic!("no event after finish")
    };
    assert_eq!(e.event_type(), b"message");
    assert_eq!(e.data(), b"b");
    assert_eq!(e.last_event_id(), b"init");
    // The limit is kept.
    p.feed(Bytes::from(vec![b'x'; 100]));
    p.feed(Bytes::from_static(b"\n\n"));
    let mut oversized = 0;
    while let Some(f) = p.next_frame() {
        assert!(matches!(f, Frame::Oversized(_)), "{f:?}");
        oversized += f.raw().len();
    }
    assert_eq!(oversized, 102);
    assert!(p.finish().is_none());
}

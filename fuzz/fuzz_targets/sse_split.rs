//! A stream plus split points (and when to drain the parser): the same
//! events, `finish()` tail, reconnection time and last event ID as a
//! one-shot parse, and the frames plus the tail are the input byte for byte.
//! With and without a small event size limit.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use citestream::sse::Config;
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/sse_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod sse_ref;

#[derive(Arbitrary, Debug)]
struct Case {
    /// A small event size limit, or the default.
    limit: Option<u8>,
    cuts: Vec<u16>,
    /// Drain after piece `i` when `drain[i % len]` (always when empty).
    drain: Vec<bool>,
    /// The stream: the rest of the fuzzer's input.
    data: Vec<u8>,
}

fuzz_target!(|case: Case| {
    let input = Bytes::from(case.data);
    let mut config = Config::new();
    if let Some(max) = case.limit {
        config.max_event_size(usize::from(max));
    }
    let one = sse_ref::run_pieces(&config, None, std::slice::from_ref(&input), &[]);
    let mut cuts: Vec<usize> = case
        .cuts
        .iter()
        .map(|&c| usize::from(c) % (input.len() + 1))
        .collect();
    cuts.sort_unstable();
    let split = sse_ref::run_pieces(
        &config,
        None,
        &sse_ref::pieces_at(&input, &cuts),
        &case.drain,
    );
    assert!(
        one.concat() == input[..],
        "one piece: frames + tail != input"
    );
    assert!(split.concat() == input[..], "split: frames + tail != input");
    assert_eq!(split.keys(), one.keys());
    assert_eq!(split.tail, one.tail);
    assert_eq!(split.reconnection_time, one.reconnection_time);
    assert_eq!(split.last_event_id, one.last_event_id);
    if let Some(max) = case.limit {
        assert!(split.max_buffered <= usize::from(max) + 2);
    }
});

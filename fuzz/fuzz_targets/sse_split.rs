//! A stream plus split points (and when to drain the parser): the same
//! events, `finish()` tail, reconnection time and last event ID as a
//! one-shot parse, and the frames plus the tail are the input byte for byte.
//! With and without a small event size limit. And the borrowing read path
//! (`next_frame_ref`, which has its own entry to the quick path for common
//! blocks) hands out the same frames as `next_frame` under the same split,
//! also with pieces queued before the parser is drained.
//! One-byte reads (the general loop only) give the same events too.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use citestream::sse::{Config, Frame, Parser};
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
    let cuts = citestream::fuzzing::cuts(&case.cuts, input.len());
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
    // One-byte reads: no line end is ever whole in a piece, so the quick
    // layers (whole events, comment blocks, open `data` lines) hand out
    // nothing and the general loop does all the work: the same events.
    let bytewise = sse_ref::run_pieces(&config, None, &sse_ref::pieces_of(&input, 1), &[]);
    assert_eq!(bytewise.keys(), one.keys(), "one-byte reads");
    assert_eq!(bytewise.tail, one.tail);
    assert_eq!(bytewise.reconnection_time, one.reconnection_time);
    assert_eq!(bytewise.last_event_id, one.last_event_id);
    let pieces = sse_ref::pieces_at(&input, &cuts);
    assert_eq!(
        drive(&config, &pieces, &[], true),
        drive(&config, &pieces, &[], false),
        "next_frame_ref vs next_frame"
    );
    // Pieces queued before a drain: the general loop goes on into them
    // while the current piece is lent.
    let queued = drive(&config, &pieces, &case.drain, true);
    assert_eq!(
        queued,
        drive(&config, &pieces, &case.drain, false),
        "next_frame_ref vs next_frame, queued pieces"
    );
    let mut out: Vec<u8> = queued.0.iter().flat_map(|f| f.raw().to_vec()).collect();
    out.extend_from_slice(queued.1.as_deref().unwrap_or_default());
    assert!(out == input[..], "queued: frames + tail != input");
});

/// Every frame (and the `finish` tail), read through `next_frame_ref` (as
/// owned frames) or `next_frame`, draining after piece `i` when
/// `drain[i % len]` (always when empty; pieces fed in between are queued).
fn drive(
    config: &Config,
    pieces: &[Bytes],
    drain: &[bool],
    by_ref: bool,
) -> (Vec<Frame>, Option<Bytes>) {
    let mut p = Parser::with_config(config);
    let mut frames = Vec::new();
    let last = pieces.len().saturating_sub(1);
    for (i, piece) in pieces.iter().enumerate() {
        p.feed(piece.clone());
        if i < last && !drain.is_empty() && !drain[i % drain.len()] {
            continue;
        }
        loop {
            let f = if by_ref {
                // A gathered frame (no piece) is the one `take_gathered`
                // then hands out, once (taken every other piece).
                let f = p
                    .next_frame_ref()
                    .map(|f| (f.to_frame(), f.piece().is_none()));
                if let Some((frame, lent)) = &f {
                    if !lent || i % 2 == 0 {
                        let taken = p.take_gathered();
                        assert!(
                            taken.as_ref() == lent.then_some(frame.raw()),
                            "take_gathered"
                        );
                        assert!(p.take_gathered().is_none(), "take_gathered twice");
                    }
                }
                f.map(|(frame, _)| frame)
            } else {
                p.next_frame()
            };
            let Some(f) = f else { break };
            frames.push(f);
        }
    }
    (frames, p.finish())
}

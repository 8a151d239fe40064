//! Arbitrary bytes, fed in pieces under a small event size limit.
//!
//! Input layout: byte 0 is the limit (0..=255 bytes), byte 1 picks the
//! read size (1..=64), the rest is the stream. Checks: no panic;
//! `buffered()` never above the limit plus one line end; no dispatched
//! event over the limit; frames plus `finish()` tail are the input byte for
//! byte; the events are those of the byte-level reference parser under the
//! same limit; and without a limit, in one piece, those of the WHATWG
//! reference parser.
#![no_main]

use bytes::Bytes;
use citestream::sse::Config;
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/sse_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod sse_ref;

fuzz_target!(|data: &[u8]| {
    let [max, read, stream @ ..] = data else {
        return;
    };
    let max = usize::from(*max);
    let read = usize::from(*read % 64) + 1;
    let input = Bytes::copy_from_slice(stream);

    let mut config = Config::new();
    config.max_event_size(max);
    let run = sse_ref::run_pieces(&config, None, &sse_ref::pieces_of(&input, read), &[]);
    assert!(
        run.max_buffered <= max + 2,
        "buffered {} over the limit {max}",
        run.max_buffered
    );
    for e in run.events() {
        assert!(e.raw().len() <= max + 2, "dispatched an oversized event");
    }
    assert!(run.concat() == input[..], "frames + tail != input");
    assert_eq!(
        run.details(),
        sse_ref::interpret_limited(&input, None, max).events
    );

    let whole = sse_ref::run_pieces(&Config::new(), None, std::slice::from_ref(&input), &[]);
    assert!(whole.concat() == input[..]);
    let reference = sse_ref::interpret(&input, None);
    assert_eq!(whole.details(), reference.events);
    assert_eq!(
        whole.reconnection_time,
        reference.reconnection_time_at_last_blank_line
    );
});

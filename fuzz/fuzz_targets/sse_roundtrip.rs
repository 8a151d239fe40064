//! Parse arbitrary bytes, re-emit every event with `write_event`, parse
//! again (in pieces): the same event types, data, last event IDs and retry
//! values, and the written stream is canonical (LF only, every block an
//! event, nothing left over).
#![no_main]

use bytes::Bytes;
use citestream::sse::{Config, Frame, write_event};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/sse_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod sse_ref;

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    let first = sse_ref::run_pieces(&Config::new(), None, &[input], &[]);
    let mut wire = Vec::new();
    for e in first.events() {
        write_event(
            &mut wire,
            Some(e.event_type()),
            Some(e.last_event_id()),
            e.retry(),
            e.data(),
        );
    }
    assert!(!wire.contains(&b'\r'), "written stream has a CR");
    let wire = Bytes::from(wire);
    let read = data.first().map_or(1, |b| usize::from(*b % 16) + 1);
    let second = sse_ref::run_pieces(&Config::new(), None, &sse_ref::pieces_of(&wire, read), &[]);
    assert!(second.tail.is_none(), "written stream left a tail");
    assert!(second.concat() == wire[..]);
    assert!(
        second.frames.iter().all(|f| matches!(f, Frame::Event(_))),
        "written stream has a non-event frame"
    );
    let fields = |r: &sse_ref::Run| -> Vec<_> {
        r.keys()
            .into_iter()
            .map(|k| (k.event_type, k.data, k.last_event_id, k.retry))
            .collect()
    };
    assert_eq!(fields(&second), fields(&first));
});

//! `ChatStream` gives the same output whatever the chunking, with and
//! without the fused path (events recognised in the input pieces): one shot,
//! split at arbitrary points, one byte at a time, as slices the caller
//! keeps (`feed_slice`, the small-read path), and fed whole then
//! finished before draining. Raw bytes or a chat-shaped stream built from
//! the fuzz bytes (`chat_ref::chat_stream_from_fuzz`), any options, 0 to 4
//! sources, with or without a small event size limit. Never panics.
#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use bytes::Bytes;
use citestream::{ChatStream, Sources, StreamRewriter};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/cite_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod cite_ref;

#[path = "../../tests/common/chat_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod chat_ref;

#[derive(Arbitrary, Debug)]
struct Case {
    opts: u8,
    sources: u8,
    limit: Option<u16>,
    shaped: bool,
    cuts: Vec<u16>,
    /// Drain after piece `i` when `drain[i % len]` (always when empty).
    drain: Vec<bool>,
    data: Vec<u8>,
}

fuzz_target!(|case: Case| {
    let input = if case.shaped {
        chat_ref::chat_stream_from_fuzz(&case.data)
    } else {
        case.data
    };
    let o = chat_ref::opts_from_byte(case.opts, case.limit.map(|l| usize::from(l) % 2048));
    let sources = Arc::new(Sources::new(chat_ref::make_sources(usize::from(
        case.sources % 5,
    ))));
    let new = || ChatStream::new(sources.clone(), o.rewrite_options());

    let whole = chat_ref::drive(&mut new(), &[&input]);
    // The fused path (events recognised in the pieces) against the parser
    // + handler alone, on the same pieces.
    let unfused = || citestream::fuzzing::chat_stream_unfused(sources.clone(), o.rewrite_options());
    let cuts = citestream::fuzzing::cuts(&case.cuts, input.len());
    let split = chat_ref::drive(&mut new(), &chat_ref::split_at(&input, &cuts));
    assert!(split == whole, "split at {cuts:?} differs");
    let plain = chat_ref::drive(&mut unfused(), &chat_ref::split_at(&input, &cuts));
    assert!(plain == whole, "the fused path differs at {cuts:?}");
    let mixed = chat_ref::drive_mixed(&mut new(), &chat_ref::split_at(&input, &cuts), &case.drain);
    assert!(mixed == whole, "draining {:?} differs", case.drain);
    if input.len() <= 4096 {
        let bytes = chat_ref::drive(&mut new(), &chat_ref::pieces(&input, 1));
        assert!(bytes == whole, "one byte at a time differs");
    }
    // Everything fed, finish, then drain.
    let mut rw = new();
    for p in chat_ref::split_at(&input, &cuts) {
        rw.feed(Bytes::copy_from_slice(p));
    }
    StreamRewriter::finish(&mut rw);
    let mut late = Vec::new();
    while let Some(b) = rw.next_output() {
        late.extend_from_slice(&b);
    }
    assert!(late == whole, "finish before draining differs");
    // The small-read path: the same pieces as slices the caller keeps,
    // drained as `drain` says.
    let mut rw = new();
    let mut slices = Vec::new();
    for (i, p) in chat_ref::split_at(&input, &cuts).into_iter().enumerate() {
        rw.feed_slice(p);
        if case.drain.is_empty() || case.drain[i % case.drain.len()] {
            while let Some(b) = rw.next_output() {
                slices.extend_from_slice(&b);
            }
        }
    }
    rw.finish();
    while let Some(b) = rw.next_output() {
        slices.extend_from_slice(&b);
    }
    assert!(slices == whole, "feed_slice differs");
    if sources.is_empty() {
        assert!(whole == input, "no sources: output must be the input");
    }
});

//! `MessagesStream` gives the same output whatever the chunking (one shot,
//! arbitrary splits, one byte at a time, finish before draining), and its
//! output is what the reference expects (`chat_ref::check_messages`:
//! everything byte-identical except the first `message_delta`, which
//! differs only by our members). Raw bytes or an Anthropic-shaped stream
//! built from the fuzz bytes. Never panics.
#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use bytes::Bytes;
use citestream::{MessagesStream, Sources, StreamRewriter};
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
        chat_ref::messages_stream_from_fuzz(&case.data)
    } else {
        case.data
    };
    let o = chat_ref::opts_from_byte(case.opts, case.limit.map(|l| usize::from(l) % 2048));
    let list = chat_ref::make_sources(usize::from(case.sources % 5));
    let sources = Arc::new(Sources::new(list.clone()));
    let new = || MessagesStream::new(sources.clone(), o.rewrite_options());

    let (whole, _) = chat_ref::check_messages("messages_split", &input, &list, &o, &[]);
    let cuts = citestream::fuzzing::cuts(&case.cuts, input.len());
    let split = chat_ref::drive(&mut new(), &chat_ref::split_at(&input, &cuts));
    assert!(split == whole, "split at {cuts:?} differs");
    let mixed = chat_ref::drive_mixed(&mut new(), &chat_ref::split_at(&input, &cuts), &case.drain);
    assert!(mixed == whole, "draining {:?} differs", case.drain);
    if input.len() <= 4096 {
        let bytes = chat_ref::drive(&mut new(), &chat_ref::pieces(&input, 1));
        assert!(bytes == whole, "one byte at a time differs");
    }
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
});

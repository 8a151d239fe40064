//! Arbitrary input through `ChatStream`: no panic, and the output is the
//! input plus exactly our additions. The check is the structural one of
//! `chat_ref::check`: every upstream frame the reference does not modify
//! comes out byte for byte and in order; synthesized events are only the
//! annotations chunks (right before their choice's finish chunk) and the
//! `choices: []` trailer; a modified chunk equals the original once our
//! top-level members are removed (a split one recombines to it); the output
//! re-parses as SSE and every event we wrote is a JSON object. Raw bytes
//! or a chat-shaped stream built from the fuzz bytes; any options.
#![no_main]

use arbitrary::Arbitrary;
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
    data: Vec<u8>,
}

fuzz_target!(|case: Case| {
    let input = if case.shaped {
        chat_ref::chat_stream_from_fuzz(&case.data)
    } else {
        case.data
    };
    let o = chat_ref::opts_from_byte(case.opts, case.limit.map(|l| usize::from(l) % 2048));
    let list = chat_ref::make_sources(usize::from(case.sources % 5));
    let (out, _, _) = chat_ref::check_chat("chat_lossless", &input, &list, &o, &[]);
    if list.is_empty() {
        assert!(out == input);
    }
});

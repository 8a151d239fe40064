//! Drives one response rewriter over one input once, for instruction
//! counts under `valgrind --tool=callgrind` (see `scripts/callgrind.sh`,
//! `SUITE=chat`). The input is built and split before `measured` runs; the
//! script collects only inside `measured`.
//!
//! ```text
//! chat_callgrind <endpoint> <impl> <input> <read> [repeat]
//!   endpoint: chat | messages | responses
//!   impl:     citestream | naive (chat, messages) | conventional (chat,
//!             responses)
//!   input:    openai_obfuscation_4000 | openai_4000 | openai_n3_4000 |
//!             openai_n3_packed_4000 | perplexity_4000 | fixtures (chat)
//!             anthropic_4000 | fixtures (messages)
//!             responses_4000 | fixtures (responses)
//!   read:     piece size in bytes, `event` (one read per event) or `whole`
//!   repeat:   run this many times (default 1; for `perf record`)
//! ```
//!
//! Prints `<bytes> <pieces> <events> <output bytes>`.

#[path = "../benches/common/mod.rs"]
mod common;

use common::chat::{self, Setup, Streams};
use common::responses;

#[inline(never)]
fn measured(endpoint: &str, imp: &str, setup: &Setup, streams: &Streams) -> usize {
    chat::run(endpoint, imp, setup, streams)
}

fn usage(msg: &str) -> ! {
    eprintln!("chat_callgrind: {msg}");
    eprintln!("usage: chat_callgrind <endpoint> <impl> <input> <read> [repeat]");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (endpoint, imp, input, read, repeat) = match &args[..] {
        [e, m, i, r] => (e, m, i, r, 1),
        [e, m, i, r, n] => match n.parse::<usize>() {
            Ok(n) if n > 0 => (e, m, i, r, n),
            _ => usage(&format!("bad repeat count {n:?}")),
        },
        _ => usage("expected four or five arguments"),
    };
    let streams: Vec<Vec<u8>> = match (endpoint.as_str(), input.as_str()) {
        ("chat", "openai_obfuscation_4000") => vec![chat::chat_stream(4000, true)],
        ("chat", "openai_4000") => vec![chat::chat_stream(4000, false)],
        ("chat", "openai_n3_4000") => vec![chat::chat_stream_n3(4000)],
        ("chat", "openai_n3_packed_4000") => vec![chat::chat_stream_n3_packed(4000)],
        ("chat", "perplexity_4000") => vec![chat::perplexity_stream(4000)],
        ("chat", "fixtures") => chat::fixtures(false).into_iter().map(|f| f.1).collect(),
        ("messages", "anthropic_4000") => vec![chat::messages_stream(4000)],
        ("messages", "fixtures") => chat::fixtures(true).into_iter().map(|f| f.1).collect(),
        ("responses", "responses_4000") => vec![responses::responses_stream(4000)],
        ("responses", "fixtures") => common::responses_fixtures(),
        (e, i) => usage(&format!("unknown input {e}/{i}")),
    };
    let size = match read.as_str() {
        "whole" => None,
        "event" => common::EVENT_READS,
        n => match n.parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => usage(&format!("bad read size {n:?}")),
        },
    };
    let setup = Setup::new();
    if endpoint == "responses" && input == "responses_4000" {
        // Both implementations add the same (outside `measured`).
        responses::check(&setup, &streams[0]);
    }
    let split = chat::split_streams(&streams, size);
    let bytes: usize = streams.iter().map(Vec::len).sum();
    let pieces: usize = split.iter().map(Vec::len).sum();
    let events: usize = streams.iter().map(|s| chat::additions(s).events).sum();
    let mut out = 0;
    for _ in 0..repeat {
        out = measured(endpoint, imp, &setup, &split);
    }
    println!("{bytes} {pieces} {events} {out}");
}

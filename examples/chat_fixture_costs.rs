//! Instruction counts per recorded chat fixture, for callgrind: runs
//! `ChatStream` over one fixture (or all) at one read size, inside
//! `measured` only, like `chat_callgrind chat citestream fixtures <read>`.
//!
//! ```text
//! chat_fixture_costs <fixture stem | all | list | done> <read> [repeat]
//! ```
//!
//! Prints `<name> <bytes> <events>` for `list`, else
//! `<bytes> <pieces> <events> <output bytes>`. Use with
//! `valgrind --tool=callgrind --toggle-collect='*chat_fixture_costs::measured*'`.

#[path = "../benches/common/mod.rs"]
mod common;

use common::chat::{self, Setup, Streams};

#[inline(never)]
fn measured(setup: &Setup, streams: &Streams) -> usize {
    chat::run("chat", "citestream", setup, streams)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (which, read) = match &args[..] {
        [w, r, ..] => (w.as_str(), r.as_str()),
        _ => {
            eprintln!(
                "usage: chat_fixture_costs <fixture stem | all | list | done> <read> [repeat]"
            );
            std::process::exit(2)
        }
    };
    let repeat = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(1);
    let fixtures = chat::fixtures(false);
    if which == "list" {
        for (name, f) in &fixtures {
            println!("{name} {} {}", f.len(), chat::additions(f).events);
        }
        return;
    }
    // `done`: a stream that is only `[DONE]`, 26 times (the per-stream
    // setup and teardown: `ChatStream::new`, the drop).
    let streams: Vec<Vec<u8>> = if which == "done" {
        vec![b"data: [DONE]\n\n".to_vec(); 26]
    } else {
        fixtures
            .into_iter()
            .filter(|(name, _)| which == "all" || name == which)
            .map(|f| f.1)
            .collect()
    };
    let size = match read {
        "whole" => None,
        "event" => common::EVENT_READS,
        n => Some(n.parse::<usize>().expect("read size").max(1)),
    };
    let setup = Setup::new();
    let split = chat::split_streams(&streams, size);
    let bytes: usize = streams.iter().map(Vec::len).sum();
    let pieces: usize = split.iter().map(Vec::len).sum();
    let events: usize = streams.iter().map(|s| chat::additions(s).events).sum();
    let mut out = 0;
    for _ in 0..repeat {
        out = measured(&setup, &split);
    }
    println!("{bytes} {pieces} {events} {out}");
}

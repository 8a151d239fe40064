//! Drives one SSE parser over one input once, for instruction counts under
//! `valgrind --tool=callgrind` (see `scripts/callgrind.sh`). The input is
//! built and split before `measured` runs; the script collects only inside
//! `measured`.
//!
//! ```text
//! sse_callgrind <parser> <input> <read> [repeat]
//!   parser: citestream | citestream-ref | sse-stream | sse-stream-body | eventsource-stream
//!   input:  openai_4000 | upstream_fixtures | long_line_<KiB>
//!   read:   piece size in bytes, `event` (one read per event) or `whole`
//!   repeat: run the parse this many times (default 1; for `perf record`)
//! ```
//!
//! Prints `<bytes> <pieces> <events>`.

#[path = "../benches/common/mod.rs"]
mod common;

use bytes::Bytes;
use citestream::sse::Config;

use common::sse as drive;

#[inline(never)]
fn measured(parser: &str, config: &Config, pieces: &[Bytes]) -> usize {
    match parser {
        "citestream" => drive::citestream(config, pieces),
        "citestream-ref" => drive::citestream_ref(config, pieces),
        "sse-stream" => drive::sse_stream(pieces),
        "sse-stream-body" => drive::sse_stream_body(pieces),
        "eventsource-stream" => drive::eventsource_stream(pieces),
        other => usage(&format!("unknown parser {other:?}")),
    }
}

fn usage(msg: &str) -> ! {
    eprintln!("sse_callgrind: {msg}");
    eprintln!("usage: sse_callgrind <parser> <input> <read> [repeat]");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (parser, input, read, repeat) = match &args[..] {
        [p, i, r] => (p, i, r, 1),
        [p, i, r, n] => match n.parse::<usize>() {
            Ok(n) if n > 0 => (p, i, r, n),
            _ => usage(&format!("bad repeat count {n:?}")),
        },
        _ => usage("expected three or four arguments"),
    };
    let mut config = Config::new();
    let input = match input.as_str() {
        "openai_4000" => common::openai_stream(4000),
        "upstream_fixtures" => common::upstream_fixtures(),
        other => match other
            .strip_prefix("long_line_")
            .and_then(|k| k.parse::<usize>().ok())
        {
            Some(kib) => {
                config.max_event_size(2 * (kib << 10) + 64);
                common::long_line(kib << 10)
            }
            None => usage(&format!("unknown input {other:?}")),
        },
    };
    let size = match read.as_str() {
        "whole" => None,
        "event" => common::EVENT_READS,
        n => match n.parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => usage(&format!("bad read size {n:?}")),
        },
    };
    let pieces = common::split(&input, size);
    let mut events = 0;
    for _ in 0..repeat {
        events = measured(parser, &config, &pieces);
    }
    println!("{} {} {events}", input.len(), pieces.len());
}

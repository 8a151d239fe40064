//! The response rewriters against the gateway baselines, in the same run,
//! on the same pieces (`benches/common/chat.rs` has the implementations).
//!
//! * `chat/openai_obfuscation_4000`: a generated OpenAI chat stream of 4,000
//!   one-token content chunks in the current gpt-4.1 shape (`service_tier`,
//!   `usage: null`, a random `obfuscation` string; about 290 bytes per
//!   event), markers `[1]`–`[3]` among the tokens (some inside inline code),
//!   the finish chunk, a usage chunk and `[DONE]`; 3 sources.
//!   `chat/openai_4000`: the same without `obfuscation` (gpt-4o shape, about
//!   260 bytes per event). `chat/fixtures`: every non-Anthropic recorded
//!   stream in `tests/fixtures/upstream/`, each through its own rewriter.
//!   citestream (`ChatStream`) vs `naive` (`serde_json::Value` per chunk)
//!   and `conventional` (`sse-stream` + borrowed serde fields + original
//!   data forwarded).
//! * `messages/anthropic_4000`: a generated Anthropic text stream of 4,000
//!   `text_delta` events; `messages/fixtures`: the `anthropic_*` recordings.
//!   citestream (`MessagesStream`) vs `naive`.
//!
//! Read sizes: one read per event, 1 B, 1460 B, 16 KiB and whole. Pieces are slices of one
//! shared `Bytes` per stream, prepared before timing. One iteration: a
//! fresh rewriter per stream, every piece fed, every output drained (the
//! lengths summed into `black_box`). Before timing, the setup asserts that
//! each baseline adds the same annotations and sources as citestream.
//!
//! Under `cargo test --benches` the inputs are cut down (100 generated
//! events, fixtures under 16 KiB).

#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use criterion::{criterion_group, criterion_main, measurement::WallTime};

use common::chat::{self, Setup, Streams};

/// Read sizes: label and piece length (`None`: whole; see
/// `common::READ_SIZES`).
const READS: [(&str, Option<usize>); 5] = [
    ("event", common::EVENT_READS),
    ("1", Some(1)),
    ("1460", Some(1460)),
    ("16384", Some(16 << 10)),
    ("whole", None),
];

/// Whether criterion runs in test mode (see `benches/sse.rs`).
fn test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test")
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

/// One input: named streams, benchmarked with every implementation of
/// `endpoint` at every read size.
fn bench_input(
    c: &mut Criterion,
    setup: &Setup,
    endpoint: &str,
    input: &str,
    streams: &[(String, Vec<u8>)],
) {
    let impls: &[&str] = if endpoint == "chat" {
        &["citestream", "naive", "conventional"]
    } else {
        &["citestream", "naive"]
    };
    let names: Vec<String> = streams.iter().map(|s| s.0.clone()).collect();
    let bytes: Vec<Vec<u8>> = streams.iter().map(|s| s.1.clone()).collect();
    let total: usize = bytes.iter().map(Vec::len).sum();
    let reads: Vec<(&str, Streams)> = READS
        .iter()
        .map(|&(label, size)| (label, chat::split_streams(&bytes, size)))
        .collect();
    for (label, split) in &reads {
        let (events, annotations, sources) = chat::check(endpoint, setup, &names, split);
        let pieces: usize = split.iter().map(Vec::len).sum();
        eprintln!(
            "{endpoint}/{input}/{label}: {total} bytes, {pieces} pieces, {events} events; \
             citestream and baselines add {annotations} annotations, {sources} sources"
        );
    }

    let mut group = c.benchmark_group(format!("{endpoint}/{input}"));
    group.throughput(Throughput::Bytes(total as u64));
    for (label, split) in &reads {
        if *label == "1" {
            // Tens to hundreds of milliseconds per iteration.
            group.sampling_mode(SamplingMode::Flat).sample_size(10);
        } else {
            group.sampling_mode(SamplingMode::Auto).sample_size(30);
        }
        for imp in impls {
            bench(&mut group, setup, endpoint, imp, label, split);
        }
    }
    group.finish();
}

fn bench(
    group: &mut BenchmarkGroup<'_, WallTime>,
    setup: &Setup,
    endpoint: &str,
    imp: &str,
    label: &str,
    streams: &Streams,
) {
    group.bench_with_input(BenchmarkId::new(imp, label), streams, |b, s| {
        b.iter(|| black_box(chat::run(endpoint, imp, setup, black_box(s))))
    });
}

fn small(streams: Vec<(String, Vec<u8>)>, quick: bool) -> Vec<(String, Vec<u8>)> {
    if quick {
        streams
            .into_iter()
            .filter(|s| s.1.len() < 16 << 10)
            .collect()
    } else {
        streams
    }
}

fn benches(c: &mut Criterion) {
    let quick = test_mode();
    let events = if quick { 100 } else { 4000 };
    let setup = Setup::new();
    let one = |name: &str, s: Vec<u8>| vec![(name.to_owned(), s)];
    bench_input(
        c,
        &setup,
        "chat",
        "openai_obfuscation_4000",
        &one("openai_obfuscation", chat::chat_stream(events, true)),
    );
    bench_input(
        c,
        &setup,
        "chat",
        "openai_4000",
        &one("openai", chat::chat_stream(events, false)),
    );
    bench_input(
        c,
        &setup,
        "chat",
        "fixtures",
        &small(chat::fixtures(false), quick),
    );
    bench_input(
        c,
        &setup,
        "messages",
        "anthropic_4000",
        &one("anthropic", chat::messages_stream(events)),
    );
    bench_input(
        c,
        &setup,
        "messages",
        "fixtures",
        &small(chat::fixtures(true), quick),
    );
}

criterion_group! {
    name = chat;
    config = config();
    targets = benches
}
criterion_main!(chat);

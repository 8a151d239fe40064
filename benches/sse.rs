//! SSE parse throughput: citestream against `sse-stream` 0.3 and
//! `eventsource-stream` 0.2 in the same run, on the same pieces.
//!
//! * `sse/openai_4000`: a generated OpenAI chat stream of 4,000 content
//!   chunks (about 250 bytes per event), and `sse/upstream_fixtures`: every
//!   recorded stream in `tests/fixtures/upstream/` concatenated; each at
//!   read sizes: one read per event, 1 B, 64 B, 1460 B, 16 KiB and whole.
//! * `sse/long_line`: one event with a single 8 MiB `data` line, in 1460-byte
//!   reads and in one read (the linear-time check). `eventsource-stream`
//!   copies its buffer on every line and re-scans a partial line on every
//!   read, so it gets a 512 KiB line (and 1 MiB to show the growth).
//!
//! Every measured iteration builds a fresh parser, feeds every piece and
//! takes out every event, touching its data. The pieces are prepared before
//! timing; before timing each input, the setup asserts that the three
//! parsers dispatch the same number of events.
//!
//! Under `cargo test --benches` (criterion's test mode: each benchmark runs
//! once) the inputs are cut down: 100 generated events, the first 32 KiB of
//! the fixtures, lines 128 times shorter.
//!
//! Criterion times are wall clock and noisy on a shared 2-core machine; for
//! comparisons that must repeat, see `scripts/callgrind.sh`.

#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]

mod common;

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use citestream::sse::Config;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use criterion::{criterion_group, criterion_main, measurement::WallTime};

use common::sse as drive;

/// Payload of the long line in the linear-time check.
const LONG_LINE: usize = 8 << 20;
/// The same for `eventsource-stream` (quadratic on long lines).
const LONG_LINE_EVENTSOURCE: [usize; 2] = [512 << 10, 1 << 20];

/// Whether criterion runs in test mode (`cargo test --benches`: each
/// benchmark once, usually unoptimized). Mirrors criterion's own rule: no
/// `--bench` flag, or `--test`. The inputs are then cut down so the check
/// takes seconds rather than minutes.
fn test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test")
}

/// `input` cut after its last blank line within the first `max` bytes.
fn prefix(input: &[u8], max: usize) -> &[u8] {
    if input.len() <= max {
        return input;
    }
    let end = memchr::memmem::rfind(&input[..max], b"\n\n").map_or(0, |i| i + 2);
    &input[..end]
}

/// For benchmarks whose single iteration takes tens of milliseconds or
/// more: ten samples of a fixed iteration count.
fn configure_slow(group: &mut BenchmarkGroup<'_, WallTime>) {
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
}

/// The defaults for this file (command-line flags such as
/// `--measurement-time` still override them): short enough that the whole
/// file runs in a few minutes on two cores.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

fn bench_stream(c: &mut Criterion, name: &str, input: &[u8]) {
    let config = Config::new();
    let reads: Vec<(&str, Vec<Bytes>)> = common::READ_SIZES
        .iter()
        .map(|&(label, size)| (label, common::split(input, size)))
        .collect();
    for (label, pieces) in &reads {
        let events = drive::citestream(&config, pieces);
        assert_eq!(drive::citestream_ref(&config, pieces), events);
        assert_eq!(
            drive::sse_stream(pieces),
            events,
            "sse-stream on {name}/{label}"
        );
        assert_eq!(
            drive::eventsource_stream(pieces),
            events,
            "eventsource-stream on {name}/{label}"
        );
        eprintln!(
            "sse/{name}/{label}: {} bytes, {} pieces, {events} events",
            input.len(),
            pieces.len()
        );
    }

    let mut group = c.benchmark_group(format!("sse/{name}"));
    group.throughput(Throughput::Bytes(input.len() as u64));
    for (label, pieces) in &reads {
        bench_pieces(&mut group, "citestream", label, pieces, |p| {
            drive::citestream(&config, p)
        });
        bench_pieces(&mut group, "citestream-ref", label, pieces, |p| {
            drive::citestream_ref(&config, p)
        });
        bench_pieces(&mut group, "sse-stream", label, pieces, drive::sse_stream);
    }
    // eventsource-stream is quadratic in line length at small reads and in
    // buffer size at large ones: one iteration can take a second.
    configure_slow(&mut group);
    for (label, pieces) in &reads {
        bench_pieces(
            &mut group,
            "eventsource-stream",
            label,
            pieces,
            drive::eventsource_stream,
        );
    }
    group.finish();
}

/// `len` bytes as `8MiB` or `512KiB`, for benchmark ids.
fn size_label(len: usize) -> String {
    if len % (1 << 20) == 0 {
        format!("{}MiB", len >> 20)
    } else {
        format!("{}KiB", len >> 10)
    }
}

/// The linear-time check; line lengths divided by `shrink` (test mode).
fn bench_long_line(c: &mut Criterion, shrink: usize) {
    let mut group = c.benchmark_group("sse/long_line");
    configure_slow(&mut group);
    let len = LONG_LINE / shrink;
    let mut config = Config::new();
    config.max_event_size(2 * len);

    let input = common::long_line(len);
    group.throughput(Throughput::Bytes(input.len() as u64));
    for (read, size) in [("1460", Some(1460)), ("whole", None)] {
        let pieces = common::split(&input, size);
        assert_eq!(drive::citestream(&config, &pieces), 1);
        assert_eq!(drive::sse_stream(&pieces), 1);
        let label = format!("{}/{read}", size_label(len));
        bench_pieces(&mut group, "citestream", &label, &pieces, |p| {
            drive::citestream(&config, p)
        });
        bench_pieces(&mut group, "sse-stream", &label, &pieces, drive::sse_stream);
    }

    for len in LONG_LINE_EVENTSOURCE.map(|l| l / shrink) {
        let input = common::long_line(len);
        group.throughput(Throughput::Bytes(input.len() as u64));
        for (read, size) in [("1460", Some(1460)), ("whole", None)] {
            let pieces = common::split(&input, size);
            assert_eq!(drive::eventsource_stream(&pieces), 1);
            let label = format!("{}/{read}", size_label(len));
            bench_pieces(
                &mut group,
                "eventsource-stream",
                &label,
                &pieces,
                drive::eventsource_stream,
            );
        }
    }
    group.finish();
}

fn bench_pieces(
    group: &mut BenchmarkGroup<'_, WallTime>,
    parser: &str,
    label: &str,
    pieces: &[Bytes],
    run: impl Fn(&[Bytes]) -> usize,
) {
    group.bench_with_input(BenchmarkId::new(parser, label), pieces, |b, p| {
        b.iter(|| run(black_box(p)))
    });
}

fn benches(c: &mut Criterion) {
    let quick = test_mode();
    let openai = common::openai_stream(if quick { 100 } else { 4000 });
    let fixtures = common::upstream_fixtures();
    let fixtures = if quick {
        prefix(&fixtures, 32 << 10)
    } else {
        &fixtures
    };
    bench_stream(c, "openai_4000", &openai);
    bench_stream(c, "upstream_fixtures", fixtures);
    bench_long_line(c, if quick { 128 } else { 1 });
}

criterion_group! {
    name = sse;
    config = config();
    targets = benches
}
criterion_main!(sse);

//! SSE parse throughput: citestream against `sse-stream` 0.3 and
//! `eventsource-stream` 0.2 in the same run, on the same pieces.
//!
//! * `sse/openai_4000`: a generated OpenAI chat stream of 4,000 content
//!   chunks (about 250 bytes per event), and `sse/upstream_fixtures`: every
//!   recorded stream in `tests/fixtures/upstream/` concatenated; each at
//!   read sizes 1 B, 64 B, 1460 B, 16 KiB and whole.
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

fn bench_long_line(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse/long_line");
    configure_slow(&mut group);
    let mut config = Config::new();
    config.max_event_size(2 * LONG_LINE);

    let input = common::long_line(LONG_LINE);
    group.throughput(Throughput::Bytes(input.len() as u64));
    for (label, size) in [("8MiB/1460", Some(1460)), ("8MiB/whole", None)] {
        let pieces = common::split(&input, size);
        assert_eq!(drive::citestream(&config, &pieces), 1);
        assert_eq!(drive::sse_stream(&pieces), 1);
        bench_pieces(&mut group, "citestream", label, &pieces, |p| {
            drive::citestream(&config, p)
        });
        bench_pieces(&mut group, "sse-stream", label, &pieces, drive::sse_stream);
    }

    for len in LONG_LINE_EVENTSOURCE {
        let input = common::long_line(len);
        group.throughput(Throughput::Bytes(input.len() as u64));
        for (read, size) in [("1460", Some(1460)), ("whole", None)] {
            let pieces = common::split(&input, size);
            assert_eq!(drive::eventsource_stream(&pieces), 1);
            let label = format!("{}KiB/{read}", len >> 10);
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
    bench_stream(c, "openai_4000", &common::openai_stream(4000));
    bench_stream(c, "upstream_fixtures", &common::upstream_fixtures());
    bench_long_line(c);
}

criterion_group! {
    name = sse;
    config = config();
    targets = benches
}
criterion_main!(sse);

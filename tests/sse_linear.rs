//! The parser's cost is linear in its input, however the input is split:
//! no rescanning of buffered bytes, no copying of the rest of a buffer per
//! line (the quadratic behaviour of `eventsource-stream`).
//!
//! These are timing comparisons, so the bounds are loose (10x where linear
//! code shows 1-3x and quadratic code 100x or more), each time is the best
//! of three, and all cases run in one test so they do not compete with each
//! other for the CPU.

use std::time::{Duration, Instant};

use bytes::Bytes;
use citestream::sse::{Config, Frame, Parser};

fn best_of_3(mut f: impl FnMut()) -> Duration {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

fn pieces(input: &Bytes, size: usize) -> Vec<Bytes> {
    (0..input.len())
        .step_by(size)
        .map(|at| input.slice(at..(at + size).min(input.len())))
        .collect()
}

/// Parses `pieces`, returns (events, total data bytes).
fn parse(config: &Config, pieces: &[Bytes]) -> (usize, usize) {
    let mut p = Parser::with_config(config);
    let (mut events, mut data) = (0, 0);
    for piece in pieces {
        p.feed(piece.clone());
        while let Some(f) = p.next_frame() {
            if let Frame::Event(e) = f {
                events += 1;
                data += e.data().len();
            }
        }
    }
    assert!(p.finish().is_none());
    (events, data)
}

fn check(what: &str, base: Duration, scaled: Duration, factor: u32) {
    let bound = base * factor + Duration::from_millis(250);
    println!("{what}: {base:?} -> {scaled:?} (bound {bound:?})");
    assert!(
        scaled <= bound,
        "{what}: {base:?} -> {scaled:?}, over {bound:?}"
    );
}

#[test]
fn cost_is_linear() {
    let mut big = Config::new();
    big.max_event_size(64 << 20);

    // An 8 MiB line in 1460-byte reads against the same line in one read.
    let mut line = b"data: ".to_vec();
    line.resize(6 + (8 << 20), b'x');
    line.extend_from_slice(b"\n\n");
    let line = Bytes::from(line);
    let whole = vec![line.clone()];
    let reads = pieces(&line, 1460);
    assert_eq!(parse(&big, &whole), (1, 8 << 20));
    assert_eq!(parse(&big, &reads), (1, 8 << 20));
    let t_whole = best_of_3(|| {
        std::hint::black_box(parse(&big, &whole));
    });
    let t_reads = best_of_3(|| {
        std::hint::black_box(parse(&big, &reads));
    });
    check(
        "8 MiB line, one read vs 1460-byte reads",
        t_whole,
        t_reads,
        10,
    );

    // Many events in one large read: 16x the events costs about 16x.
    let stream = |n: usize| {
        let mut s = Vec::new();
        for i in 0..n {
            s.extend_from_slice(
                format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"token {i}\"}}}}]}}\n\n")
                    .as_bytes(),
            );
        }
        vec![Bytes::from(s)]
    };
    let (small, large) = (stream(4_000), stream(64_000));
    assert_eq!(parse(&big, &large).0, 64_000);
    let t_small = best_of_3(|| {
        std::hint::black_box(parse(&big, &small));
    });
    let t_large = best_of_3(|| {
        std::hint::black_box(parse(&big, &large));
    });
    check(
        "4k vs 64k events in one read (x16)",
        t_small * 16,
        t_large,
        10,
    );

    // One event of many data lines: joining them is linear too.
    let lines = |n: usize| {
        let mut s = b"data: x\n".repeat(n);
        s.extend_from_slice(b"\n");
        let s = Bytes::from(s);
        pieces(&s, 1460)
    };
    let (few, many) = (lines(20_000), lines(320_000));
    assert_eq!(parse(&big, &many), (1, 2 * 320_000 - 1));
    let t_few = best_of_3(|| {
        std::hint::black_box(parse(&big, &few));
    });
    let t_many = best_of_3(|| {
        std::hint::black_box(parse(&big, &many));
    });
    check("20k vs 320k data lines (x16)", t_few * 16, t_many, 10);
}

//! The parser's cost is linear in its input, however the input is split:
//! no rescanning of buffered bytes, no copying of the rest of a buffer per
//! line (the quadratic behaviour of `eventsource-stream`).
//!
//! Times are never asserted (the machines are shared and noisy); what a
//! quadratic parser would multiply is the bytes it allocates and copies, so
//! that is what is measured here, exactly, with a counting allocator. The
//! timing side lives in `benches/sse.rs` (the 8 MiB line group).

use bytes::Bytes;
use citestream::sse::{Config, Frame, Parser};

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

/// Bytes allocated while parsing (the pieces themselves exist already).
fn allocated(config: &Config, pieces: &[Bytes]) -> u64 {
    for p in pieces {
        drop(p.clone());
    }
    allocation_counter::measure(|| {
        std::hint::black_box(parse(config, pieces));
    })
    .bytes_total
}

#[test]
fn gathering_a_long_line_is_linear() {
    let mut big = Config::new();
    big.max_event_size(64 << 20);
    // An 8 MiB line in 1460-byte reads against the same line in one read.
    let line = |n: usize| {
        let mut v = b"data: ".to_vec();
        v.resize(6 + n, b'x');
        v.extend_from_slice(b"\n\n");
        Bytes::from(v)
    };
    let (one_mib, eight_mib) = (line(1 << 20), line(8 << 20));
    assert_eq!(parse(&big, std::slice::from_ref(&eight_mib)), (1, 8 << 20));
    assert_eq!(parse(&big, &pieces(&eight_mib, 1460)), (1, 8 << 20));
    // One read: nothing is copied.
    assert_eq!(allocated(&big, std::slice::from_ref(&eight_mib)), 0);
    // 1460-byte reads: the line is gathered once into a growing buffer
    // (doubling: at most about 4x its size allocated in all)...
    let a8 = allocated(&big, &pieces(&eight_mib, 1460));
    println!("8 MiB line in 1460-byte reads: {a8} bytes allocated");
    assert!(a8 <= 4 * (8 << 20) + 4096, "{a8}");
    // ...and 8x the line costs about 8x, not 64x.
    let a1 = allocated(&big, &pieces(&one_mib, 1460));
    assert!(a8 <= 10 * a1, "1 MiB: {a1}, 8 MiB: {a8}");
}

#[test]
fn many_events_and_many_lines_cost_no_more_per_unit() {
    let big = {
        let mut c = Config::new();
        c.max_event_size(64 << 20);
        c
    };
    // Many events in 1460-byte reads: the gathering buffer is reused, so
    // 16x the events allocates no more than a constant.
    let stream = |n: usize| {
        let mut s = Vec::new();
        for i in 0..n {
            s.extend_from_slice(
                format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"token {i}\"}}}}]}}\n\n")
                    .as_bytes(),
            );
        }
        pieces(&Bytes::from(s), 1460)
    };
    let (small, large) = (stream(4_000), stream(64_000));
    assert_eq!(parse(&big, &large).0, 64_000);
    let (a_small, a_large) = (allocated(&big, &small), allocated(&big, &large));
    println!("4k events: {a_small} bytes, 64k events: {a_large} bytes");
    assert!(a_large <= a_small + 64 * 1024, "{a_small} -> {a_large}");

    // One event of many data lines: joining them is linear.
    let lines = |n: usize| {
        let mut s = b"data: x\n".repeat(n);
        s.extend_from_slice(b"\n");
        pieces(&Bytes::from(s), 1460)
    };
    let (few, many) = (lines(20_000), lines(320_000));
    assert_eq!(parse(&big, &many), (1, 2 * 320_000 - 1));
    let (a_few, a_many) = (allocated(&big, &few), allocated(&big, &many));
    println!("20k data lines: {a_few} bytes, 320k: {a_many} bytes");
    assert!(a_many <= 16 * a_few * 2, "{a_few} -> {a_many}");
}

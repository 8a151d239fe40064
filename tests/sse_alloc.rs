//! Allocation behaviour of the SSE parser, measured with a counting global
//! allocator.
//!
//! This is its own test binary: `allocation_counter` installs its counting
//! allocator as the global allocator of every binary that links it, and
//! only this one does. Its counters are per thread, so tests running in
//! parallel do not see each other's allocations.
//!
//! The input is a generated OpenAI-shaped stream of ~250-byte
//! `data: {...}\n\n` chunks. All input pieces are cut from one `Bytes`
//! before counting starts (the first clone of a `Bytes` made from a `Vec`
//! allocates its shared header), so only the parser's own allocations are
//! counted.

use std::hint::black_box;

use allocation_counter::{AllocationInfo, measure};
use bytes::Bytes;
use citestream::sse::{Frame, Parser};

/// A stream of `n` chat-completion chunks, ~250 bytes each.
fn openai_stream(n: usize) -> (Bytes, Vec<usize>) {
    let mut out = Vec::with_capacity(n * 260);
    let mut ends = Vec::with_capacity(n);
    for i in 0..n {
        let word = ["Hello", " world", ",", " this", " is", " a", " test"][i % 7];
        out.extend_from_slice(
            format!(
                "data: {{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\
                 \"created\":1741454235,\"model\":\"gpt-4o\",\"system_fingerprint\":\"fp_eb9dce56a8\",\
                 \"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"logprobs\":null,\
                 \"finish_reason\":null}}]}}\n\n"
            )
            .as_bytes(),
        );
        ends.push(out.len());
    }
    (Bytes::from(out), ends)
}

/// Cuts `input` at `cuts` into pieces, before any counting.
fn pieces(input: &Bytes, cuts: impl IntoIterator<Item = usize>) -> Vec<Bytes> {
    let mut at = 0;
    let mut v = Vec::new();
    for c in cuts {
        v.push(input.slice(at..c));
        at = c;
    }
    if at < input.len() {
        v.push(input.slice(at..));
    }
    v
}

/// Feeds `pieces` and drains the parser, dropping each frame after a look
/// at it. Returns the number of events.
fn feed_all(p: &mut Parser, pieces: &[Bytes]) -> usize {
    let mut events = 0;
    for piece in pieces {
        p.feed(piece.clone());
        while let Some(frame) = p.next_frame() {
            if let Frame::Event(e) = &frame {
                black_box(e.data());
                events += 1;
            }
        }
    }
    events
}

#[test]
fn one_event_per_piece_allocates_nothing() {
    let (input, ends) = openai_stream(10_100);
    let avg = input.len() / ends.len();
    assert!((230..=270).contains(&avg), "events are {avg} bytes");
    let pieces = pieces(&input, ends);
    let (warm_up, counted) = pieces.split_at(100);
    let mut p = Parser::new();
    assert_eq!(feed_all(&mut p, warm_up), 100);
    let mut events = 0;
    let info = measure(|| events = feed_all(&mut p, counted));
    assert_eq!(events, 10_000);
    println!("one event per piece: {info:?}");
    assert_eq!(
        info.count_total, 0,
        "allocations in steady state, one event per piece: {info:?}"
    );
    assert!(p.finish().is_none());
}

/// Events whose bytes span a read boundary when read in `read`-byte pieces.
fn spanning(ends: &[usize], read: usize) -> usize {
    let mut start = 0;
    let mut n = 0;
    for &end in ends {
        if start / read != (end - 1) / read {
            n += 1;
        }
        start = end;
    }
    n
}

/// With 1460-byte reads about one event in six spans two pieces; its bytes
/// are gathered into the parser's buffer and handed out as a frozen slice
/// of it. When the consumer drops each event before the next one is
/// gathered (a proxy forwarding events), the buffer is reclaimed and reused
/// in place: no allocation at all in steady state. Measured numbers are
/// printed (`cargo test --test sse_alloc -- --nocapture`).
#[test]
fn network_reads_allocate_nothing_when_events_are_dropped() {
    let (input, ends) = openai_stream(20_000);
    let reads: Vec<usize> = (1..)
        .map(|k| k * 1460)
        .take_while(|&c| c < input.len())
        .collect();
    let pieces = pieces(&input, reads);
    let spanning = spanning(&ends, 1460);
    let (warm_up, counted) = pieces.split_at(20);
    let mut p = Parser::new();
    let warm_events = feed_all(&mut p, warm_up);
    let mut events = 0;
    let info = measure(|| events = feed_all(&mut p, counted));
    assert_eq!(warm_events + events, 20_000);
    println!(
        "1460-byte reads, events dropped: {events} events, {spanning} span two reads, \
         {} allocations ({:.4} per event), {} bytes, peak {} bytes",
        info.count_total,
        info.count_total as f64 / events as f64,
        info.bytes_total,
        info.bytes_max
    );
    assert_eq!(info.count_total, 0, "{info:?}");
    assert!(p.finish().is_none());
}

/// When the consumer keeps the events (so the gathering buffer cannot be
/// reused), each event that spans two reads gets a buffer of its own: the
/// parser's `BytesMut` allocates for the first part, grows once for the
/// rest, and freezing it allocates the shared header (measured: about 2.5
/// allocations per spanning event, at most 3). Events within one read still
/// cost nothing, and the bytes allocated stay within three times the bytes
/// gathered (a grow at most doubles).
#[test]
fn network_reads_allocate_a_few_times_per_spanning_event_when_kept() {
    let (input, ends) = openai_stream(20_000);
    let reads: Vec<usize> = (1..)
        .map(|k| k * 1460)
        .take_while(|&c| c < input.len())
        .collect();
    let pieces = pieces(&input, reads);
    let spanning = spanning(&ends, 1460);
    let mut kept: Vec<Frame> = Vec::with_capacity(30_000);
    let mut p = Parser::new();
    let info = measure(|| {
        for piece in &pieces {
            p.feed(piece.clone());
            while let Some(frame) = p.next_frame() {
                kept.push(frame);
            }
        }
    });
    assert_eq!(kept.len(), 20_000);
    println!(
        "1460-byte reads, events kept: {} events, {spanning} span two reads, {} allocations \
         ({:.4} per event, {:.4} per spanning event), {} bytes",
        kept.len(),
        info.count_total,
        info.count_total as f64 / kept.len() as f64,
        info.count_total as f64 / spanning as f64,
        info.bytes_total
    );
    // The gathered bytes: those of the events that are not a slice of a
    // single read.
    let gathered: usize = kept
        .iter()
        .filter(|f| !pieces.iter().any(|p| within(f.raw(), p)))
        .map(|f| f.raw().len())
        .sum();
    println!("gathered {gathered} bytes");
    assert!(info.count_total <= 3 * spanning as u64, "{info:?}");
    assert!(
        info.bytes_total as usize <= 3 * gathered + 64 * spanning,
        "{info:?}, gathered {gathered}"
    );
}

fn within(inner: &[u8], outer: &[u8]) -> bool {
    let (i, o) = (inner.as_ptr() as usize, outer.as_ptr() as usize);
    o <= i && i + inner.len() <= o + outer.len()
}

/// Peak memory held by the parser does not grow with the stream's length:
/// the same for 1 000 and 20 000 events, at several read sizes.
#[test]
fn peak_memory_does_not_grow_with_stream_length() {
    for read in [1, 64, 1460, 16 * 1024] {
        let mut peaks = Vec::new();
        for n in [1_000, 20_000] {
            let (input, _) = openai_stream(n);
            let cuts: Vec<usize> = (1..)
                .map(|k| k * read)
                .take_while(|&c| c < input.len())
                .collect();
            let pieces = pieces(&input, cuts);
            let mut p = Parser::new();
            let mut events = 0;
            let info: AllocationInfo = measure(|| {
                events = feed_all(&mut p, &pieces);
                drop(p.finish());
            });
            assert_eq!(events, n);
            peaks.push(info.bytes_max);
            // Everything the parser allocated while parsing is released or
            // bounded by one event's buffer.
            assert!(
                info.bytes_current <= 1024,
                "read {read}, {n} events: {info:?}"
            );
        }
        println!("read size {read}: peak bytes {peaks:?} for 1000 / 20000 events");
        assert!(
            peaks[1] <= peaks[0].max(1024),
            "read size {read}: peak grew from {} to {} bytes",
            peaks[0],
            peaks[1]
        );
        assert!(
            peaks[1] <= 4096,
            "read size {read}: peak {} bytes",
            peaks[1]
        );
    }
}

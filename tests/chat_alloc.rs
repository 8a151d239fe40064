//! Allocation and memory bounds of the streaming rewriters, measured with a
//! counting global allocator (`allocation-counter`).

use std::sync::Arc;

use bytes::Bytes;
use citestream::{ChatStream, MessagesStream, RewriteOptions, Sources, StreamRewriter};

fn chunk(i: usize) -> String {
    chunk_with(
        i,
        &[
            "The",
            " quick",
            " brown [1]",
            " fox",
            " \u{e9}t\u{e9}",
            " `code`",
            " [2].",
        ],
    )
}

fn chunk_with(i: usize, words: &[&str]) -> String {
    let w = words[i % words.len()];
    format!(
        "data: {{\"id\":\"chatcmpl-AbCdEfGh\",\"object\":\"chat.completion.chunk\",\"created\":1731456789,\"model\":\"gpt-4o\",\"system_fingerprint\":\"fp_45c6de4934\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}},\"logprobs\":null,\"finish_reason\":null}}],\"obfuscation\":\"{}\"}}\n\n",
        serde_json::to_string(w).unwrap(),
        "x".repeat(i % 13)
    )
}

fn sources() -> Arc<Sources> {
    Arc::new(
        Sources::from_json(br#"[{"title":"A","url":"https://a"},{"title":"B","url":"https://b"}]"#)
            .unwrap(),
    )
}

/// Input pieces, cloned once so `Bytes` promotion happens before counting.
fn pieces(events: usize, read: usize) -> Vec<Bytes> {
    let all: String = (0..events).map(chunk).collect();
    let pieces: Vec<Bytes> = if read == 0 {
        all.split_inclusive("\n\n")
            .map(|e| Bytes::copy_from_slice(e.as_bytes()))
            .collect()
    } else {
        all.as_bytes()
            .chunks(read)
            .map(Bytes::copy_from_slice)
            .collect()
    };
    for p in &pieces {
        drop(p.clone());
    }
    pieces
}

fn drive(rw: &mut dyn StreamRewriter, pieces: Vec<Bytes>) -> usize {
    let mut n = 0;
    for p in pieces {
        rw.feed(p);
        while let Some(b) = rw.next_output() {
            n += b.len();
        }
    }
    n
}

#[test]
fn chat_pass_through_allocates_nothing_per_event() {
    let mut rw = ChatStream::new(sources(), RewriteOptions::new());
    // Warm up: the first chunks learn the template, size the queues.
    drive(&mut rw, pieces(50, 0));
    let steady = pieces(5_000, 0);
    let info = allocation_counter::measure(|| {
        drive(&mut rw, steady);
    });
    eprintln!(
        "chat, whole events: {} allocations for 5,000 events",
        info.count_total
    );
    // Markers found add to a Vec (amortized growth); nothing per event.
    assert!(
        info.count_total <= 16,
        "{} allocations for 5,000 events",
        info.count_total
    );
}

#[test]
fn chat_pass_through_without_markers_allocates_nothing() {
    let words = [
        "The",
        " quick",
        " brown",
        " fox",
        " \u{e9}t\u{e9}",
        " `code [1]`",
        ".",
    ];
    let mk = |n: usize| -> Vec<Bytes> {
        (0..n)
            .map(|i| Bytes::from(chunk_with(i, &words)))
            .inspect(|b| drop(b.clone()))
            .collect()
    };
    let mut rw = ChatStream::new(sources(), RewriteOptions::new());
    drive(&mut rw, mk(50));
    let steady = mk(5_000);
    let info = allocation_counter::measure(|| {
        drive(&mut rw, steady);
    });
    assert_eq!(info.count_total, 0, "allocations in steady state");
}

#[test]
fn chat_memory_is_bounded_at_network_read_sizes() {
    for read in [1, 1460, 16 * 1024] {
        let mut rw = ChatStream::new(sources(), RewriteOptions::new());
        drive(&mut rw, pieces(50, read));
        let short = pieces(1_000, read);
        let long = pieces(10_000, read);
        let a = allocation_counter::measure(|| {
            drive(&mut rw, short);
        });
        let b = allocation_counter::measure(|| {
            drive(&mut rw, long);
        });
        // Peak memory held does not grow with stream length (only the
        // markers found accumulate, a few bytes each).
        assert!(
            b.bytes_max <= a.bytes_max + 64 * 1024,
            "read {read}: peak {} vs {}",
            b.bytes_max,
            a.bytes_max
        );
        // Events spanning reads are gathered into a reused buffer.
        let per_event = b.count_total as f64 / 10_000.0;
        eprintln!(
            "read {read}: {per_event:.3} allocations/event, peak {} B (1k events) vs {} B (10k)",
            a.bytes_max, b.bytes_max
        );
        assert!(
            per_event <= 2.0,
            "read {read}: {per_event} allocations per event"
        );
    }
}

#[test]
fn messages_pass_through_allocates_nothing_per_event() {
    let ev = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello [1]\"}}\n\n";
    let mk = |n: usize| -> Vec<Bytes> {
        let v: Vec<Bytes> = (0..n).map(|_| Bytes::from_static(ev.as_bytes())).collect();
        v
    };
    let mut rw = MessagesStream::new(sources(), RewriteOptions::new());
    drive(&mut rw, mk(10));
    let steady = mk(5_000);
    let info = allocation_counter::measure(|| {
        drive(&mut rw, steady);
    });
    assert!(
        info.count_total <= 4,
        "{} allocations for 5,000 events",
        info.count_total
    );
}

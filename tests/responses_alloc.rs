//! Allocation and memory bounds of the `/v1/responses` rewriter, measured
//! with a counting global allocator (`allocation-counter`).

use std::sync::Arc;

use bytes::Bytes;
use citestream::{ResponsesStream, RewriteOptions, Sources, StreamRewriter};

const WORDS: &[&str] = &[
    "The",
    " quick",
    " brown [1]",
    " fox",
    " \u{e9}t\u{e9}",
    " `code`",
    " [2].",
];

/// A text delta of part (`o`, 0) with sequence number `seq`.
fn delta(o: usize, seq: usize) -> String {
    let w = WORDS[seq % WORDS.len()];
    format!(
        "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"content_index\":0,\"delta\":{},\"item_id\":\"msg_0f9c4b2f224d858000695fa063d4708197af73c2f37cb0b9d3\",\"logprobs\":[],\"obfuscation\":\"{}\",\"output_index\":{o},\"sequence_number\":{seq}}}\n\n",
        serde_json::to_string(w).unwrap(),
        "x".repeat(seq % 13)
    )
}

/// The `output_text.done` of part (`o`, 0).
fn done(o: usize, seq: usize) -> String {
    format!(
        "event: response.output_text.done\ndata: {{\"type\":\"response.output_text.done\",\"content_index\":0,\"item_id\":\"m\",\"logprobs\":[],\"output_index\":{o},\"sequence_number\":{seq},\"text\":\"\"}}\n\n"
    )
}

fn sources() -> Arc<Sources> {
    Arc::new(
        Sources::from_json(br#"[{"title":"A","url":"https://a"},{"title":"B","url":"https://b"}]"#)
            .unwrap(),
    )
}

/// `text` in pieces (`read` 0: one per event), cloned once so `Bytes`
/// promotion happens before counting.
fn pieces(text: &str, read: usize) -> Vec<Bytes> {
    let pieces: Vec<Bytes> = if read == 0 {
        text.split_inclusive("\n\n")
            .map(|e| Bytes::copy_from_slice(e.as_bytes()))
            .collect()
    } else {
        text.as_bytes()
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
fn pass_through_deltas_allocate_nothing() {
    let mut rw = ResponsesStream::new(sources(), RewriteOptions::new());
    let warm: String = (0..50).map(|s| delta(0, s)).collect();
    drive(&mut rw, pieces(&warm, 0));
    let steady: String = (50..5_050).map(|s| delta(0, s)).collect();
    let steady = pieces(&steady, 0);
    let info = allocation_counter::measure(|| {
        drive(&mut rw, steady);
    });
    eprintln!(
        "responses: {} allocations for 5,000 deltas",
        info.count_total
    );
    // The tracker's markers vector grows (amortized doubling): a handful.
    assert!(info.count_total <= 16, "{}", info.count_total);
}

#[test]
fn renumbered_deltas_allocate_almost_nothing() {
    // After a part's annotation events every later event's number goes up:
    // a splice of its digits, written into a shared arena.
    let mut rw = ResponsesStream::new(sources(), RewriteOptions::new());
    let mut warm: String = (0..50).map(|s| delta(0, s)).collect();
    warm.push_str(&done(0, 50));
    warm.extend((51..100).map(|s| delta(1, s)));
    drive(&mut rw, pieces(&warm, 0));
    let steady: String = (100..10_100).map(|s| delta(1, s)).collect();
    let steady = pieces(&steady, 0);
    let info = allocation_counter::measure(|| {
        drive(&mut rw, steady);
    });
    let per = info.count_total as f64 / 10_000.0;
    eprintln!("responses renumbered: {per:.4} allocations per delta");
    assert!(per <= 0.01, "{per}");
}

#[test]
fn memory_is_flat_in_stream_length() {
    for read in [0, 1, 1460, 16 * 1024] {
        let run = |events: usize| {
            let mut text: String = (0..50).map(|s| delta(0, s)).collect();
            text.push_str(&done(0, 50));
            text.extend((51..51 + events).map(|s| delta(1, s)));
            let p = pieces(&text, read);
            let mut rw = ResponsesStream::new(sources(), RewriteOptions::new());
            allocation_counter::measure(|| {
                drive(&mut rw, p);
            })
        };
        let (a, b) = (run(1_000), run(10_000));
        eprintln!(
            "read {read}: peak {} B (1k events) vs {} B (10k)",
            a.bytes_max, b.bytes_max
        );
        // Only the markers found accumulate (24 bytes each, about one in
        // three deltas here).
        assert!(
            b.bytes_max <= a.bytes_max + 128 * 1024,
            "read {read}: peak {} vs {}",
            b.bytes_max,
            a.bytes_max
        );
    }
}

//! The fused path of the Responses rewriter changes no byte of the output:
//! every recorded Responses stream (plain, and with markers put into its
//! deltas) and generated streams (markers, escapes, UTF-8, invalid text,
//! several parts and items, upstream annotations, `obfuscation`, with and
//! without `sequence_number` and `event:` lines, shape changes) give the
//! same bytes with the fused path on, at any split, as with it off on the
//! whole input; and the fused path does take the deltas it should.

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;

use crate::sources::Sources;
use crate::sse::DEFAULT_MAX_EVENT_SIZE;
use crate::{ResponsesStream, RewriteOptions};

fn sources() -> Arc<Sources> {
    Arc::new(
        Sources::from_json(
            br#"[{"title":"A","url":"https://a/"},{"title":"B","url":"https://b/"},{"title":"C","url":"https://c/"}]"#,
        )
        .expect("sources"),
    )
}

fn rewriter(fused: bool) -> ResponsesStream {
    let mut rw = ResponsesStream::new(sources(), RewriteOptions::new());
    rw.handler_mut().set_fused(fused);
    rw
}

/// The output for `input` cut at `cuts` (sorted offsets).
fn run(fused: bool, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut rw = rewriter(fused);
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain([&input.len()]) {
        rw.feed(Bytes::copy_from_slice(&input[at..c]));
        at = c;
        while let Some(b) = rw.next_output() {
            out.extend_from_slice(&b);
        }
    }
    rw.finish();
    while let Some(b) = rw.next_output() {
        out.extend_from_slice(&b);
    }
    out
}

/// Offsets every `size` bytes.
fn reads(len: usize, size: usize) -> Vec<usize> {
    (size..len).step_by(size).collect()
}

/// The end of every event (after each `\n\n`).
fn event_reads(input: &[u8]) -> Vec<usize> {
    input
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w == b"\n\n")
        .map(|(i, _)| i + 2)
        .collect()
}

/// The stream with ` [k]` markers put into its text deltas.
fn with_markers(input: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(input);
    let mut out = String::new();
    for (k, line) in s.split_inclusive('\n').enumerate() {
        if line.starts_with("data:") && line.contains("\"response.output_text.delta\"") {
            let n = k % 4 + 1;
            out.push_str(&line.replacen("\"delta\":\"", &format!("\"delta\":\"[{n}] "), 1));
        } else {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

/// The recorded Responses streams, each plain and with markers.
fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/responses");
    let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).expect("fixture")))
        .collect();
    all.sort();
    assert!(all.len() >= 15, "the recorded Responses streams");
    let marked: Vec<_> = all
        .iter()
        .map(|(n, b)| (format!("{n} (markers)"), with_markers(b)))
        .collect();
    all.extend(marked);
    all
}

/// A small xorshift generator (the same cuts every run).
fn rand_fn(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n.max(1) as u64) as usize
    }
}

/// Every recorded stream, plain and with markers: whole, cut once at
/// every byte (the first 2 KiB; then some 300 cuts), at event, 1460 B
/// and 16 KiB reads, and at random cuts, the same bytes as the general
/// path's on the whole input.
#[test]
fn fixtures_fused_and_parsed_outputs_are_identical() {
    let mut rand = rand_fn(0x9E37_79B9_7F4A_7C15);
    for (name, input) in fixtures() {
        let want = run(false, &input, &[]);
        assert_eq!(run(true, &input, &[]), want, "{name}: whole");
        // (Every byte of the first 2 KiB; past that some 300 cuts a
        // stream, the random cuts below cutting many events each.)
        let step = (input.len() / 300).max(7);
        for i in (0..=input.len()).filter(|&i| i <= 2048 || i % step == 0) {
            assert_eq!(run(true, &input, &[i]), want, "{name}: cut at {i}");
        }
        let events = event_reads(&input);
        assert_eq!(run(true, &input, &events), want, "{name}: event reads");
        for size in [1, 7, 64, 300, 1460, 16 * 1024] {
            let cuts = reads(input.len(), size);
            assert_eq!(run(true, &input, &cuts), want, "{name}: {size} B reads");
        }
        for _ in 0..30 {
            let mut cuts: Vec<usize> = (0..rand(60)).map(|_| rand(input.len() + 1)).collect();
            cuts.sort_unstable();
            assert_eq!(run(true, &input, &cuts), want, "{name}: cuts {cuts:?}");
        }
    }
}

/// Text pieces of a delta: markers, escapes (also invalid ones), UTF-8,
/// code, brackets, quotes.
const TOKENS: &[&str] = &[
    "[1]",
    "[2]",
    "[3]",
    "[12]",
    "[0]",
    "\\\\[1]",
    "[",
    "]",
    "1",
    " ",
    "word",
    ".",
    "\\n",
    "\\n\\n",
    "`",
    "```\\n",
    "\\u00e9",
    "é",
    "😀",
    "\\ud83d\\ude00",
    "\\\"",
    "\\\\",
    "\\t",
    "\\/",
    "ü[2]",
    "[1][2]",
    // Invalid JSON string contents: the event is not a delta the general
    // path reads.
    "\\x",
    "\\u12",
    "\t",
];

/// How a generated stream writes its events.
#[derive(Clone, Debug)]
struct Shape {
    seq: bool,
    event_lines: bool,
    obfuscation: bool,
    /// The `sequence_number` first, as Azure and Grok write it.
    seq_first: bool,
    /// Upstream `annotation.added` events after a part's first delta.
    upstream: u8,
    /// Every `weird`-th delta is written another way (CRLF, an `id:`
    /// line, varying `logprobs`, a comment between its lines, no space
    /// after `data:`, a second `delta` member); 0: none.
    weird: u8,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0u8..3,
        prop::sample::select(vec![0u8, 0, 3, 5, 11]),
    )
        .prop_map(
            |(seq, event_lines, obfuscation, seq_first, upstream, weird)| Shape {
                seq,
                event_lines,
                obfuscation,
                seq_first,
                upstream,
                weird,
            },
        )
}

/// A Responses stream: items of parts of deltas, in the real event
/// sequence (a reasoning item first).
fn build(items: &[Vec<Vec<String>>], g: &Shape) -> String {
    let mut out = String::new();
    let mut seq = 0u64;
    let mut n = 0usize;
    let mut ev = |out: &mut String, ty: &str, body: &str, weird: u8| {
        let sn = if g.seq {
            seq += 1;
            format!("\"sequence_number\":{}", seq - 1)
        } else {
            String::new()
        };
        let data = match (g.seq, g.seq_first) {
            (false, _) => format!("{{\"type\":\"{ty}\",{body}}}"),
            (true, true) => format!("{{\"type\":\"{ty}\",{sn},{body}}}"),
            (true, false) => format!("{{\"type\":\"{ty}\",{body},{sn}}}"),
        };
        let event = if g.event_lines {
            format!("event: {ty}\n")
        } else {
            String::new()
        };
        match weird {
            1 => out.push_str(&format!(
                "{}data: {data}\r\n\r\n",
                event.replace('\n', "\r\n")
            )),
            2 => out.push_str(&format!("id: {seq}\n{event}data: {data}\n\n")),
            3 => out.push_str(&format!("{event}: keep-alive\ndata: {data}\n\n")),
            4 => out.push_str(&format!("{event}data:{data}\n\n")),
            _ => out.push_str(&format!("{event}data: {data}\n\n")),
        }
    };
    ev(
        &mut out,
        "response.created",
        r#""response":{"id":"r","object":"response","output":[]}"#,
        0,
    );
    ev(
        &mut out,
        "response.reasoning_text.delta",
        r#""output_index":0,"content_index":0,"item_id":"rs","delta":"think [1]""#,
        0,
    );
    let mut final_items = Vec::new();
    for (j, parts) in items.iter().enumerate() {
        let o = j + 1;
        let id = format!("\"msg_{j}\"");
        let mut content = Vec::new();
        for (i, deltas) in parts.iter().enumerate() {
            let at = format!(r#""output_index":{o},"content_index":{i},"item_id":{id}"#);
            ev(
                &mut out,
                "response.content_part.added",
                &format!(r#"{at},"part":{{"type":"output_text","text":"","annotations":[]}}"#),
                0,
            );
            let mut text = String::new();
            for (k, d) in deltas.iter().enumerate() {
                n += 1;
                let weird = match g.weird {
                    0 => 0,
                    w if n % usize::from(w) == 0 => (n / usize::from(w) % 6) as u8 + 1,
                    _ => 0,
                };
                let ob = if g.obfuscation {
                    format!(r#","obfuscation":"x{}""#, "y".repeat(n % 7))
                } else {
                    String::new()
                };
                let lp = if weird == 5 {
                    format!(r#"[{{"token":"t","logprob":-{n}}}]"#)
                } else {
                    "[]".into()
                };
                let extra = if weird == 6 { r#""delta":"[1]","# } else { "" };
                ev(
                    &mut out,
                    "response.output_text.delta",
                    &format!(r#"{at},{extra}"delta":"{d}","logprobs":{lp}{ob}"#),
                    weird,
                );
                text.push_str(d);
                if k == 0 {
                    for a in 0..g.upstream {
                        ev(
                            &mut out,
                            "response.output_text.annotation.added",
                            &format!(
                                r#"{at},"annotation_index":{a},"annotation":{{"type":"url_citation","start_index":0,"end_index":0,"url":"u","title":"t"}}"#
                            ),
                            0,
                        );
                    }
                }
            }
            let part = format!(r#"{{"type":"output_text","text":"{text}","annotations":[]}}"#);
            ev(
                &mut out,
                "response.output_text.done",
                &format!(r#"{at},"text":"{text}""#),
                0,
            );
            ev(
                &mut out,
                "response.content_part.done",
                &format!(r#"{at},"part":{part}"#),
                0,
            );
            content.push(part);
        }
        let item = format!(
            r#"{{"id":{id},"type":"message","content":[{}]}}"#,
            content.join(",")
        );
        ev(
            &mut out,
            "response.output_item.done",
            &format!(r#""output_index":{o},"item":{item}"#),
            0,
        );
        final_items.push(item);
    }
    let output = format!(
        r#"[{{"type":"reasoning","id":"rs","content":[]}},{}]"#,
        final_items.join(",")
    );
    ev(
        &mut out,
        "response.completed",
        &format!(r#""response":{{"id":"r","object":"response","output":{output}}}"#),
        0,
    );
    out
}

fn items() -> impl Strategy<Value = Vec<Vec<Vec<String>>>> {
    let delta = prop::collection::vec(prop::sample::select(TOKENS), 0..5).prop_map(|v| v.concat());
    let part = prop::collection::vec(delta, 0..12);
    let item = prop::collection::vec(part, 1..3);
    prop::collection::vec(item, 1..3)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Generated streams at random splits (markers, escapes and UTF-8
    /// sequences cut anywhere), at event reads and at a few read sizes:
    /// the fused path's bytes are the general path's.
    #[test]
    fn generated_fused_and_parsed_outputs_are_identical(
        items in items(),
        g in shape(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
        size in 1usize..400,
    ) {
        let input = build(&items, &g).into_bytes();
        let want = run(false, &input, &[]);
        prop_assert_eq!(&run(true, &input, &[]), &want, "whole");
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(&run(true, &input, &cuts), &want, "cuts {:?}", cuts);
        prop_assert_eq!(&run(true, &input, &event_reads(&input)), &want, "event reads");
        prop_assert_eq!(&run(true, &input, &reads(input.len(), size)), &want, "{} B reads", size);
    }
}

/// Invalid UTF-8 inside a delta (not a `str`, so not in the generator):
/// the same bytes either way, whole and cut at every byte.
#[test]
fn invalid_utf8_in_a_delta() {
    let ev = |d: &[u8], seq: usize| {
        let mut v = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"content_index\":0,\"delta\":\"".to_vec();
        v.extend_from_slice(d);
        v.extend_from_slice(
            format!("\",\"item_id\":\"m\",\"output_index\":0,\"sequence_number\":{seq}}}\n\n")
                .as_bytes(),
        );
        v
    };
    let mut input = Vec::new();
    for (k, d) in [
        &b"a [1]"[..],
        b"b",
        b"\xff [2]",
        b"\xc3",
        b"c",
        b"\xe2\x82 [3]",
        b"d",
    ]
    .iter()
    .enumerate()
    {
        input.extend_from_slice(&ev(d, k));
    }
    input.extend_from_slice(b"event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"content_index\":0,\"item_id\":\"m\",\"output_index\":0,\"text\":\"x\",\"sequence_number\":9}\n\n");
    let want = run(false, &input, &[]);
    for i in 0..=input.len() {
        assert_eq!(run(true, &input, &[i]), want, "cut at {i}");
    }
}

/// The fused path takes the deltas it should: after one delta of a part
/// (learned) and a second (its first match refines the template), whole
/// deltas of the part in a piece are taken at once; another part's, one
/// over the size limit, or any once an event has been inserted, are not.
#[test]
fn the_fused_path_takes_the_deltas_of_a_part() {
    let delta = |o: u32, d: &str, seq: u32| {
        format!(
            "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"content_index\":0,\"delta\":\"{d}\",\"item_id\":\"m{o}\",\"logprobs\":[],\"obfuscation\":\"{}\",\"output_index\":{o},\"sequence_number\":{seq}}}\n\n",
            "z".repeat(seq as usize % 5)
        )
    };
    let mut rw = rewriter(true);
    let max = DEFAULT_MAX_EVENT_SIZE;
    assert_eq!(
        rw.handler_mut()
            .fused_events(delta(0, "a", 1).as_bytes(), max),
        0,
        "nothing learned"
    );
    let first = [delta(0, "a [1]", 1), delta(0, "b", 2)].concat();
    rw.feed(Bytes::from(first.clone()));
    let out: Vec<Bytes> = std::iter::from_fn(|| rw.next_output()).collect();
    assert_eq!(out.concat(), first.as_bytes());
    let more = [delta(0, "c", 3), delta(0, "d [2]", 4), delta(0, "e", 15)].concat();
    let h = rw.handler_mut();
    assert_eq!(h.fused_events(more.as_bytes(), max), more.len());
    assert_eq!(
        h.fused_events(more.as_bytes(), 100),
        0,
        "over the size limit"
    );
    assert_eq!(
        h.fused_events(delta(1, "x", 5).as_bytes(), max),
        0,
        "another part"
    );
    // The part's text so far went to its tracker, on both paths.
    let done = "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"content_index\":0,\"item_id\":\"m0\",\"output_index\":0,\"text\":\"\",\"sequence_number\":16}\n\n";
    rw.feed(Bytes::from(done));
    let out: Vec<u8> = std::iter::from_fn(|| rw.next_output()).flatten().collect();
    let out = String::from_utf8(out).expect("UTF-8");
    assert_eq!(out.matches("annotation.added").count(), 4, "{out}");
    // Events inserted: later numbers are raised, so nothing is fused.
    let h = rw.handler_mut();
    assert_eq!(
        h.fused_events(delta(0, "f", 17).as_bytes(), max),
        0,
        "renumbered"
    );
}

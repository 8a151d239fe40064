//! Differential property tests for the chat rewriter: random streams built
//! from a vocabulary of tricky content pieces (markers whole and split
//! across deltas, `[[2]]`, `[01]`, `[12345]`, `\[1]`, out-of-range numbers,
//! fences, inline code, unclosed backticks, escapes, surrogate pairs and
//! their halves in separate deltas, raw UTF-8 split across deltas, CR/LF),
//! `n` > 1 with interleaved choices, finish chunks with and without
//! content, usage chunks, `[DONE]` or truncation, every offset unit.
//!
//! For each stream: the output at random chunkings == whole-input output ==
//! one-byte-at-a-time output (every split point for short streams); the
//! structure and annotations equal the reference (`chat_ref`); the
//! annotations equal those of the whole-body rewrite of the equivalent
//! `chat.completion`.

mod common;

use std::sync::Arc;

use citestream::cite::OffsetUnit;
use citestream::{Dialect, Sources, chat};
use common::chat_ref::{self, RefOpts};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Content pieces, as raw JSON string bodies (escapes not decoded).
const VOCAB: &[&[u8]] = &[
    b"[1]",
    b"[2]",
    b"[3]",
    b"[",
    b"1",
    b"2",
    b"]",
    b"[[2]]",
    b"[01]",
    b"[12345]",
    b"[1234]",
    b"[4]",
    b"[0]",
    b"\\\\[1]",
    b"\\\\",
    b"[1, 2]",
    b"[^1]",
    b"```",
    b"```py",
    b"~~~",
    b"`",
    b"``",
    b"`x [1]`",
    b"\\n",
    b"\\n\\n",
    b"\\r\\n",
    b"\\r",
    b"   ",
    b"    ",
    b"\\t",
    b"a",
    b" word ",
    "é".as_bytes(),
    b"\\u00e9",
    "😀".as_bytes(),
    b"\\ud83d\\ude00",
    b"\\ud83d",
    b"\\ude00",
    b"\\u005b",
    b"\\u005d",
    b"\\u005B2]",
    b"\\/",
    b"\\\"",
    "中文".as_bytes(),
    b"\xc3",
    b"\xa9",
    b"\xf0\x9f",
    b"\x98\x80",
];

#[derive(Clone, Debug)]
enum Finish {
    /// A separate chunk with an empty delta.
    Separate,
    /// On the chunk carrying the last delta.
    WithLast,
    /// A separate chunk whose delta carries `"content":""`.
    EmptyContent,
    /// Never (truncated choice).
    Never,
}

#[derive(Clone, Debug)]
struct ChoiceSpec {
    deltas: Vec<Vec<u8>>,
    finish: Finish,
}

#[derive(Clone, Debug)]
struct StreamSpec {
    choices: Vec<ChoiceSpec>,
    schedule: Vec<(usize, bool)>,
    fingerprint: bool,
    usage: bool,
    done: bool,
    cut: usize,
}

fn delta_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(VOCAB), 0..5).prop_map(|v| v.concat())
}

fn choice_strategy() -> impl Strategy<Value = ChoiceSpec> {
    (
        prop::collection::vec(delta_strategy(), 0..8),
        prop_oneof![
            4 => Just(Finish::Separate),
            3 => Just(Finish::WithLast),
            1 => Just(Finish::EmptyContent),
            1 => Just(Finish::Never),
        ],
    )
        .prop_map(|(deltas, finish)| ChoiceSpec { deltas, finish })
}

fn stream_strategy() -> impl Strategy<Value = StreamSpec> {
    (
        prop::collection::vec(choice_strategy(), 1..4),
        prop::collection::vec((0..8usize, any::<bool>()), 0..40),
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.8),
        prop_oneof![4 => Just(0usize), 1 => 1..40usize],
    )
        .prop_map(
            |(choices, schedule, fingerprint, usage, done, cut)| StreamSpec {
                choices,
                schedule,
                fingerprint,
                usage,
                done,
                cut,
            },
        )
}

fn envelope(fp: bool) -> Vec<u8> {
    let mut e =
        b"\"id\":\"chatcmpl-p\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\""
            .to_vec();
    if fp {
        e.extend_from_slice(b",\"system_fingerprint\":\"fp_1\"");
    }
    e
}

/// One choice entry of a chunk.
fn entry(i: usize, content: Option<&[u8]>, finish: bool) -> Vec<u8> {
    let mut v = format!("{{\"index\":{i},\"delta\":{{").into_bytes();
    if let Some(c) = content {
        v.extend_from_slice(b"\"content\":\"");
        v.extend_from_slice(c);
        v.push(b'"');
    }
    v.extend_from_slice(b"},\"logprobs\":null,\"finish_reason\":");
    v.extend_from_slice(if finish { b"\"stop\"" } else { b"null" });
    v.push(b'}');
    v
}

/// Builds the stream bytes and, per choice, the content it sent up to and
/// including its finish chunk (`None`: never finished).
fn build(spec: &StreamSpec) -> (Vec<u8>, Vec<Option<Vec<u8>>>) {
    // Per choice, its list of chunk entries in order.
    let mut queues: Vec<std::collections::VecDeque<(Vec<u8>, bool)>> = Vec::new();
    let mut contents = Vec::new();
    for (i, c) in spec.choices.iter().enumerate() {
        let mut q = std::collections::VecDeque::new();
        let k = c.deltas.len();
        for (j, d) in c.deltas.iter().enumerate() {
            let fin = matches!(c.finish, Finish::WithLast) && j + 1 == k;
            q.push_back((entry(i, Some(d), fin), fin));
        }
        match c.finish {
            Finish::Separate => q.push_back((entry(i, None, true), true)),
            Finish::EmptyContent => q.push_back((entry(i, Some(b""), true), true)),
            Finish::WithLast if k == 0 => q.push_back((entry(i, Some(b""), true), true)),
            _ => {}
        }
        queues.push(q);
        let finished = !matches!(c.finish, Finish::Never);
        contents.push(finished.then(|| c.deltas.concat()));
    }
    let env = envelope(spec.fingerprint);
    let mut out = Vec::new();
    let mut sched = spec.schedule.iter().cycle();
    let push_chunk = |out: &mut Vec<u8>, entries: &[Vec<u8>], extra: &[u8]| {
        out.extend_from_slice(b"data: {");
        out.extend_from_slice(&env);
        out.extend_from_slice(b",\"choices\":[");
        out.extend_from_slice(&entries.join(&b","[..]));
        out.extend_from_slice(b"]");
        out.extend_from_slice(extra);
        out.extend_from_slice(b"}\n\n");
    };
    loop {
        let live: Vec<usize> = (0..queues.len())
            .filter(|&i| !queues[i].is_empty())
            .collect();
        if live.is_empty() {
            break;
        }
        let (pick, pack) = if spec.schedule.is_empty() {
            (0, false)
        } else {
            *sched.next().unwrap()
        };
        let a = live[pick % live.len()];
        let mut entries = vec![queues[a].pop_front().unwrap().0];
        if pack && live.len() > 1 {
            let b = live[(pick + 1) % live.len()];
            entries.push(queues[b].pop_front().unwrap().0);
        }
        push_chunk(&mut out, &entries, b"");
    }
    if spec.usage {
        push_chunk(&mut out, &[], b",\"usage\":{\"total_tokens\":9}");
    }
    if spec.done {
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
    let cut = spec.cut.min(out.len());
    out.truncate(out.len() - cut);
    (out, contents)
}

/// The annotations of the whole-body rewrite of the equivalent
/// `chat.completion` (finished choices only).
fn whole_body_annotations(
    contents: &[Option<Vec<u8>>],
    sources: &Sources,
    o: &RefOpts,
) -> Vec<(u32, Value)> {
    let mut body = b"{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[".to_vec();
    let mut first = true;
    for (i, c) in contents.iter().enumerate() {
        let Some(c) = c else { continue };
        if !first {
            body.push(b',');
        }
        first = false;
        body.extend_from_slice(
            format!("{{\"index\":{i},\"message\":{{\"role\":\"assistant\",\"content\":\"")
                .as_bytes(),
        );
        body.extend_from_slice(c);
        body.extend_from_slice(b"\"},\"finish_reason\":\"stop\"}");
    }
    body.extend_from_slice(b"]}");
    let out = chat::rewrite_body(&body, sources, &o.rewrite_options());
    let v = chat_ref::parse(&out)
        .expect("whole-body output parses")
        .to_value();
    v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["index"].as_u64().unwrap() as u32,
                c["message"]["annotations"].clone(),
            )
        })
        .collect()
}

fn unit_strategy() -> impl Strategy<Value = OffsetUnit> {
    prop_oneof![
        Just(OffsetUnit::Chars),
        Just(OffsetUnit::Utf16),
        Just(OffsetUnit::Bytes)
    ]
}

fn dialect_strategy() -> impl Strategy<Value = Dialect> {
    prop_oneof![3 => Just(Dialect::SOURCES), 1 => Just(Dialect::CITATIONS), 1 => Just(Dialect::BOTH)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn streamed_equals_reference_and_whole_body(
        spec in stream_strategy(),
        unit in unit_strategy(),
        dialect in dialect_strategy(),
        extra_n in 0..2u32,
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let (input, contents) = build(&spec);
        let sources = chat_ref::make_sources(3);
        let o = RefOpts {
            dialect,
            unit,
            n: spec.choices.len() as u32 + extra_n,
            ..RefOpts::default()
        };
        let (whole, ex, found) = chat_ref::check_chat("prop", &input, &sources, &o, &[1, 3]);
        // Truncation may cut off a finish chunk: only the choices the stream
        // really finished are compared.
        let contents: Vec<Option<Vec<u8>>> = contents
            .into_iter()
            .enumerate()
            .map(|(i, c)| c.filter(|_| ex.markers.iter().any(|m| m.0 as usize == i)))
            .collect();
        let arc = Arc::new(Sources::new(sources.clone()));
        // Random chunking.
        let mut cs: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
        cs.sort_unstable();
        let out = chat_ref::run_chat(&arc, &o, &chat_ref::split_at(&input, &cs));
        prop_assert!(out == whole, "random chunking {:?} differs", cs);
        // Whole-body rewrite of the same contents.
        if dialect.sources {
            let body = whole_body_annotations(&contents, &arc, &o);
            for (i, anns) in &body {
                let streamed = found.iter().find(|f| f.0 == *i).map_or(json!([]), |f| f.1.clone());
                prop_assert_eq!(&streamed, anns, "choice {} streamed vs whole body", i);
            }
            // Every streamed annotation belongs to a finished choice.
            for f in &found {
                prop_assert!(body.iter().any(|b| b.0 == f.0));
            }
        } else {
            prop_assert!(found.is_empty());
        }
    }

    #[test]
    fn short_streams_every_split_point(
        spec in stream_strategy(),
        unit in unit_strategy(),
    ) {
        let (input, _) = build(&spec);
        prop_assume!(input.len() <= 900);
        let sources = chat_ref::make_sources(3);
        let o = RefOpts { unit, n: spec.choices.len() as u32, ..RefOpts::default() };
        let (whole, _, _) = chat_ref::check_chat("split", &input, &sources, &o, &[1]);
        let arc = Arc::new(Sources::new(sources));
        for cut in 1..input.len() {
            let out = chat_ref::run_chat(&arc, &o, &chat_ref::split_at(&input, &[cut]));
            prop_assert!(out == whole, "split at {} differs", cut);
        }
    }
}

/// A sanity check that the generator produces what the properties are
/// about (markers that annotate, split finish chunks, truncation).
#[test]
fn generator_covers_the_interesting_cases() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut annotated, mut split, mut multi, mut untopped) = (0, 0, 0, 0);
    let sources = chat_ref::make_sources(3);
    for _ in 0..300 {
        let spec = stream_strategy().new_tree(&mut runner).unwrap().current();
        let (input, _) = build(&spec);
        let o = RefOpts {
            n: spec.choices.len() as u32,
            ..RefOpts::default()
        };
        let ex = chat_ref::expect_chat(&input, &sources, &o);
        annotated += usize::from(ex.markers.iter().any(|m| !m.1.is_empty()));
        split += usize::from(
            ex.items
                .iter()
                .any(|i| matches!(i, chat_ref::Item::SplitContent { .. })),
        );
        multi += usize::from(spec.choices.len() > 1);
        untopped += usize::from(!ex.top);
    }
    assert!(annotated > 60, "{annotated}");
    assert!(split > 20, "{split}");
    assert!(multi > 100, "{multi}");
    assert!(untopped > 5, "{untopped}");
}

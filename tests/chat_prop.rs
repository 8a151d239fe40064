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
    /// Content sent after the choice finished (out of protocol; ignored),
    /// optionally with a second finish_reason.
    late: Option<(Vec<u8>, bool)>,
}

#[derive(Clone, Debug)]
struct StreamSpec {
    choices: Vec<ChoiceSpec>,
    schedule: Vec<(usize, bool)>,
    fingerprint: bool,
    usage: bool,
    done: bool,
    cut: usize,
    /// Per chunk entry (cycled): how the JSON is written (see `entry`).
    styles: Vec<u16>,
    /// Per event (cycled): how it is framed (see `frame`).
    framing: Vec<u8>,
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
        .prop_flat_map(|(deltas, finish)| {
            prop::option::weighted(0.15, (delta_strategy(), any::<bool>())).prop_map(move |late| {
                ChoiceSpec {
                    deltas: deltas.clone(),
                    finish: finish.clone(),
                    late,
                }
            })
        })
}

fn stream_strategy() -> impl Strategy<Value = StreamSpec> {
    (
        (
            prop::collection::vec(choice_strategy(), 1..4),
            prop::collection::vec((0..8usize, any::<bool>()), 0..40),
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.8),
            prop_oneof![4 => Just(0usize), 1 => 1..40usize],
        ),
        prop_oneof![
            1 => Just(vec![0u16]),
            2 => prop::collection::vec(any::<u16>(), 1..8),
        ],
        prop_oneof![
            1 => Just(vec![0u8]),
            2 => prop::collection::vec(any::<u8>(), 1..8),
        ],
    )
        .prop_map(
            |((choices, schedule, fingerprint, usage, done, cut), styles, framing)| StreamSpec {
                choices,
                schedule,
                fingerprint,
                usage,
                done,
                cut,
                styles,
                framing,
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

/// A key, escaped (`\u00xx` for its first letter) when `esc`.
fn key(name: &str, esc: bool) -> String {
    if esc {
        format!("\"\\u{:04x}{}\"", name.as_bytes()[0], &name[1..])
    } else {
        format!("\"{name}\"")
    }
}

/// One choice entry of a chunk. `style` bits: 0 escaped keys, 1 spaces
/// around `:`/`,`, 2 newlines (multi-line data), 3-4 member order, 5 decoy
/// members holding markers the rewriter must not read, 6 an extra
/// entry with an invalid index, 7 `"content":null` before the content,
/// 8 role member.
fn entry(i: usize, content: Option<&[u8]>, finish: bool, style: u16) -> Vec<u8> {
    let esc = style & 1 != 0;
    let sep: &[u8] = match (style >> 1) & 3 {
        0 => b"",
        1 => b" ",
        2 => b"\n",
        _ => b" \n ",
    };
    let colon = [b":".as_slice(), sep].concat();
    let comma = [b",".as_slice(), sep].concat();
    let mut delta = Vec::new();
    let mut dm: Vec<Vec<u8>> = Vec::new();
    if style & (1 << 8) != 0 {
        dm.push(b"\"role\":\"assistant\"".to_vec());
    }
    if style & (1 << 7) != 0 && content.is_some() {
        dm.push([key("content", esc).as_bytes(), &colon, b"null"].concat());
    }
    if style & (1 << 5) != 0 {
        dm.push(b"\"reasoning_content\":\"r [1] [2]\"".to_vec());
        dm.push(b"\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"[1]\",\"content\":\"[2]\"}}]".to_vec());
    }
    if let Some(c) = content {
        dm.push([key("content", esc).as_bytes(), &colon, b"\"", c, b"\""].concat());
    }
    if style & (1 << 5) != 0 {
        dm.push(b"\"refusal\":\"[3]\"".to_vec());
    }
    delta.push(b'{');
    delta.extend_from_slice(&dm.join(&comma[..]));
    delta.push(b'}');
    let fin: &[u8] = if finish { b"\"stop\"" } else { b"null" };
    let mut members: Vec<Vec<u8>> = vec![
        [
            key("index", esc).as_bytes(),
            &colon,
            i.to_string().as_bytes(),
        ]
        .concat(),
        [key("delta", esc).as_bytes(), &colon, &delta].concat(),
        if style & (1 << 5) != 0 {
            b"\"logprobs\":{\"content\":[{\"token\":\"[1]\",\"finish_reason\":\"stop\"}]}".to_vec()
        } else {
            b"\"logprobs\":null".to_vec()
        },
        [key("finish_reason", esc).as_bytes(), &colon, fin].concat(),
    ];
    match (style >> 3) & 3 {
        0 => {}
        1 => members.rotate_left(1),
        2 => members.reverse(),
        _ => members.swap(0, 3),
    }
    let mut v = Vec::from(&b"{"[..]);
    v.extend_from_slice(&members.join(&comma[..]));
    v.push(b'}');
    if style & (1 << 6) != 0 {
        // Not a choice of ours: an index that is no u32.
        let bad =
            ["\"0\"", "1.0", "-1", "1e0", "2.5", "null", "4294967296"][(style as usize >> 9) % 7];
        v.extend_from_slice(&comma);
        v.extend_from_slice(
            format!("{{\"index\":{bad},\"delta\":{{\"content\":\"[1] [2]\"}},\"finish_reason\":\"stop\"}}")
                .as_bytes(),
        );
    }
    v
}

/// Appends one event with `data` (which may hold LFs: one `data` line
/// each). `f` bits: 0 CRLF line ends, 1 CR only, 2 `data:` without the
/// space, 3 an `id` line, 4 `event: message`, 5 a comment line first,
/// 6 a BOM-less comment block before the event.
fn frame(out: &mut Vec<u8>, data: &[u8], f: u8, id: usize) {
    let eol: &[u8] = if f & 1 != 0 {
        b"\r\n"
    } else if f & 2 != 0 {
        b"\r"
    } else {
        b"\n"
    };
    let line = |out: &mut Vec<u8>, l: &[u8]| {
        out.extend_from_slice(l);
        out.extend_from_slice(eol);
    };
    if f & 64 != 0 {
        line(out, b": keep-alive");
        line(out, b"");
    }
    if f & 32 != 0 {
        line(out, b": note");
    }
    if f & 16 != 0 {
        line(out, b"event: message");
    }
    if f & 8 != 0 {
        line(out, format!("id: {id}").as_bytes());
    }
    let prefix: &[u8] = if f & 4 != 0 { b"data:" } else { b"data: " };
    for l in data.split(|&b| b == b'\n') {
        line(out, &[prefix, l].concat());
    }
    line(out, b"");
}

/// Builds the stream bytes and, per choice, the content it sent up to and
/// including its finish chunk (`None`: never finished).
fn build(spec: &StreamSpec) -> (Vec<u8>, Vec<Option<Vec<u8>>>) {
    // Per choice, its list of chunk entries in order.
    let mut queues: Vec<std::collections::VecDeque<(Vec<u8>, bool)>> = Vec::new();
    let mut contents = Vec::new();
    let mut styles = spec.styles.iter().cycle();
    let mut st = || *styles.next().unwrap();
    for (i, c) in spec.choices.iter().enumerate() {
        let mut q = std::collections::VecDeque::new();
        let k = c.deltas.len();
        for (j, d) in c.deltas.iter().enumerate() {
            let fin = matches!(c.finish, Finish::WithLast) && j + 1 == k;
            q.push_back((entry(i, Some(d), fin, st()), fin));
        }
        match c.finish {
            Finish::Separate => q.push_back((entry(i, None, true, st()), true)),
            Finish::EmptyContent => q.push_back((entry(i, Some(b""), true, st()), true)),
            Finish::WithLast if k == 0 => q.push_back((entry(i, Some(b""), true, st()), true)),
            _ => {}
        }
        if let Some((late, fin)) = &c.late {
            q.push_back((entry(i, Some(late), *fin, st()), *fin));
        }
        queues.push(q);
        contents.push(match (&c.finish, &c.late) {
            (Finish::Never, Some((late, true))) => Some([c.deltas.concat(), late.clone()].concat()),
            (Finish::Never, _) => None,
            _ => Some(c.deltas.concat()),
        });
    }
    let env = envelope(spec.fingerprint);
    let mut out = Vec::new();
    let mut sched = spec.schedule.iter().cycle();
    let mut framing = spec.framing.iter().cycle();
    let mut ids = 0;
    let mut push_chunk = |out: &mut Vec<u8>, entries: &[Vec<u8>], extra: &[u8]| {
        let mut data = b"{".to_vec();
        data.extend_from_slice(&env);
        data.extend_from_slice(b",\"choices\":[");
        data.extend_from_slice(&entries.join(&b","[..]));
        data.extend_from_slice(b"]");
        data.extend_from_slice(extra);
        // Varying top-level strings (`obfuscation`-like), some of which
        // look like JSON structure, and a varying number.
        if spec.fingerprint {
            let obf: &[u8] = [
                &br#""aB3""#[..],
                br#""x\"},\"choices\":[{\"index\":1,\"delta\":{\"content\":\"[2]\"},\"finish_reason\":\"stop\"}],\"y\":\"""#,
                b"\"\"",
                br#""\u00e9\\""#,
                br#""[1]""#,
                br#""zz""#,
            ][ids % 6];
            data.extend_from_slice(b",\"obfuscation\":");
            data.extend_from_slice(obf);
            data.extend_from_slice(format!(",\"seq\":{}", ids % 3).as_bytes());
        }
        data.extend_from_slice(b"}");
        ids += 1;
        frame(out, &data, *framing.next().unwrap(), ids);
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
        frame(&mut out, b"[DONE]", *framing.next().unwrap() & !8, 0);
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
    #![proptest_config(ProptestConfig { cases: 160, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn streamed_equals_reference_and_whole_body(
        spec in stream_strategy(),
        unit in unit_strategy(),
        dialect in dialect_strategy(),
        extra_n in 0..2u32,
        only_cited in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        drain in prop::collection::vec(any::<bool>(), 0..4),
    ) {
        let (input, contents) = build(&spec);
        let sources = chat_ref::make_sources(3);
        let o = RefOpts {
            dialect,
            unit,
            n: (spec.choices.len() as u32 + extra_n).saturating_sub(u32::from(only_cited && extra_n == 0)).max(1),
            only_cited,
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
        // Same chunking, output taken only now and then.
        let mut rw = citestream::ChatStream::new(arc.clone(), o.rewrite_options());
        let out = chat_ref::drive_mixed(&mut rw, &chat_ref::split_at(&input, &cs), &drain);
        prop_assert!(out == whole, "draining {:?} differs", drain);
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

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_split_point(
        spec in stream_strategy(),
        unit in unit_strategy(),
    ) {
        let (input, _) = build(&spec);
        let sources = chat_ref::make_sources(3);
        let o = RefOpts { unit, n: spec.choices.len() as u32, ..RefOpts::default() };
        let (whole, _, _) = chat_ref::check_chat("split", &input, &sources, &o, &[1]);
        let arc = Arc::new(Sources::new(sources));
        // Every split point of short streams; an even sample of long ones.
        let stride = input.len() / 700 + 1;
        for cut in (1..input.len()).step_by(stride) {
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

/// A `chat.completion` body holding `contents`, written in `style` (bits:
/// 0 escaped keys, 1-2 whitespace, 3-4 upstream `annotations` (absent,
/// `[]`, one entry, `null`), 5 decoy members with markers, 6 upstream
/// top-level `sources`/`citations`, 7 `message` first in the choice,
/// 8 `content` after the other message members).
fn body(contents: &[Vec<u8>], style: u16) -> Vec<u8> {
    let esc = style & 1 != 0;
    let ws: &[u8] = [&b""[..], b" ", b"\n  ", b"\t"][usize::from((style >> 1) & 3)];
    let join = |parts: Vec<Vec<u8>>| parts.join(&[b",".as_slice(), ws].concat()[..]);
    let kv = |k: &str, v: &[u8]| [key(k, esc).as_bytes(), b":", ws, v].concat();
    let mut choices = Vec::new();
    for (i, c) in contents.iter().enumerate() {
        let content = kv("content", &[b"\"", c.as_slice(), b"\""].concat());
        let mut mm = vec![kv("role", b"\"assistant\"")];
        if style & (1 << 8) == 0 {
            mm.push(content.clone());
        }
        match (style >> 3) & 3 {
            0 => {}
            1 => mm.push(kv("annotations", b"[ ]")),
            2 => mm.push(kv(
                "annotations",
                br#"[{"type":"url_citation","url_citation":{"start_index":0,"end_index":0,"url":"u","title":"t"}}]"#,
            )),
            _ => mm.push(kv("annotations", b"null")),
        }
        if style & (1 << 5) != 0 {
            mm.push(b"\"reasoning_content\":\"[1]\"".to_vec());
            mm.push(b"\"refusal\":\"[2]\"".to_vec());
            mm.push(br#""tool_calls":[{"function":{"arguments":"[1]","content":"[3]"}}]"#.to_vec());
        }
        if style & (1 << 8) != 0 {
            mm.push(content);
        }
        let msg = [b"{".as_slice(), ws, &join(mm), ws, b"}"].concat();
        let mut cm = vec![
            kv("index", i.to_string().as_bytes()),
            kv("message", &msg),
            kv("finish_reason", b"\"stop\""),
        ];
        if style & (1 << 7) != 0 {
            cm.swap(0, 1);
        }
        choices.push([b"{".as_slice(), &join(cm), b"}"].concat());
    }
    let mut top = vec![
        kv("id", b"\"chatcmpl-b\""),
        kv("object", b"\"chat.completion\""),
        kv(
            "choices",
            &[b"[".as_slice(), ws, &join(choices), ws, b"]"].concat(),
        ),
    ];
    if style & (1 << 6) != 0 {
        top.insert(1, kv("citations", br#"["https://up"]"#));
        top.push(kv("sources", b"[]"));
    }
    top.push(kv("usage", br#"{"total_tokens":1}"#));
    [ws, b"{", ws, &join(top), ws, b"}", ws].concat()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn whole_body_equals_reference(
        spec in stream_strategy(),
        style in any::<u16>(),
        unit in unit_strategy(),
        dialect in dialect_strategy(),
        only_cited in any::<bool>(),
    ) {
        let contents: Vec<Vec<u8>> = spec.choices.iter().map(|c| c.deltas.concat()).collect();
        let b = body(&contents, style);
        let sources = chat_ref::make_sources(3);
        let o = RefOpts { dialect, unit, only_cited, ..RefOpts::default() };
        let out = chat::rewrite_body(&b, &Sources::new(sources.clone()), &o.rewrite_options());
        chat_ref::check_body("body", &b, &out, &sources, &o);
    }
}

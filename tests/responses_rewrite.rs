//! `/v1/responses`: every recorded Responses stream and body through the
//! rewriter, whole and split at every byte (or at random for the long
//! ones), checked block by block against the reference
//! (`common::responses_ref`): lossless except for the additions; then
//! property tests on generated streams (markers split anywhere, several
//! parts and items, upstream annotations, `obfuscation`, no sequence
//! numbers, no `event:` lines).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use citestream::cite::OffsetUnit;
use citestream::sources::{Source, Sources};
use citestream::{Dialect, Endpoint, ResponsesStream, Rewriter, responses};
use common::chat_ref::{RefOpts, drive, make_sources, split_at};
use common::responses_ref::{self, Block};
use proptest::prelude::*;

fn fixtures(ext: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/responses");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// The fixture with ` [k]` markers put into its text deltas (a byte edit
/// of the `delta` of `response.output_text.delta` events only), so the
/// recorded streams exercise insertion and renumbering.
fn with_markers(input: &[u8]) -> Vec<u8> {
    let s = std::str::from_utf8(input).unwrap();
    let mut out = String::new();
    for (k, line) in s.split_inclusive('\n').enumerate() {
        if line.starts_with("data: ") && line.contains("\"response.output_text.delta\"") {
            let n = k % 4 + 1;
            out.push_str(&line.replacen("\"delta\":\"", &format!("\"delta\":\"[{n}] "), 1));
        } else {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

fn rewriter(sources: &Arc<Sources>, o: &RefOpts) -> ResponsesStream {
    ResponsesStream::new(sources.clone(), o.rewrite_options())
}

fn opts(dialect: Dialect, unit: OffsetUnit, only_cited: bool) -> RefOpts {
    RefOpts {
        dialect,
        unit,
        only_cited,
        ..RefOpts::default()
    }
}

/// Runs `input` whole and in the given pieces, and checks each output
/// against the reference; returns the expected blocks.
fn run_checked(
    input: &[u8],
    list: &[Source],
    o: &RefOpts,
    cuts: &[Vec<usize>],
    what: &str,
) -> Vec<Block> {
    let sources = Arc::new(Sources::new(list.to_vec()));
    let expected = responses_ref::expect(std::str::from_utf8(input).unwrap(), list, o);
    let whole = drive(&mut rewriter(&sources, o), &[input]);
    responses_ref::check(&whole, &expected, what);
    for c in cuts {
        let got = drive(&mut rewriter(&sources, o), &split_at(input, c));
        assert!(got == whole, "{what}: split at {c:?} differs from whole");
    }
    expected
}

/// Cuts: every single byte for short inputs, else 40 random sets.
fn cut_sets(len: usize, seed: u64) -> Vec<Vec<usize>> {
    if len <= 6000 {
        return (1..len).map(|i| vec![i]).collect();
    }
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..40)
        .map(|_| {
            let mut c: Vec<usize> = (0..(next() % 300 + 1))
                .map(|_| (next() % len as u64) as usize)
                .collect();
            c.sort_unstable();
            c.dedup();
            c
        })
        .collect()
}

#[test]
fn fixture_count() {
    assert_eq!(fixtures("sse").len(), 15);
    assert_eq!(fixtures("json").len(), 5);
}

#[test]
fn fixtures_streamed_every_split_against_the_reference() {
    let mut inserted = 0;
    for (name, raw) in fixtures("sse") {
        for marked in [false, true] {
            let input = if marked {
                with_markers(&raw)
            } else {
                raw.clone()
            };
            let cuts = cut_sets(input.len(), input.len() as u64);
            for (nsrc, o) in [
                (0, RefOpts::default()),
                (3, RefOpts::default()),
                (3, opts(Dialect::BOTH, OffsetUnit::Utf16, true)),
                (1, opts(Dialect::CITATIONS, OffsetUnit::Bytes, false)),
            ] {
                let list = make_sources(nsrc);
                let what = format!("{name} marked={marked} sources={nsrc} {o:?}");
                let exp = run_checked(&input, &list, &o, &cuts, &what);
                inserted += exp
                    .iter()
                    .filter(|b| matches!(b, Block::Inserted { .. }))
                    .count();
            }
        }
    }
    // The marked streams with text insert events.
    assert!(inserted > 100, "{inserted}");
}

#[test]
fn fixtures_pass_through_without_markers() {
    // No markers, sources given: only the final response changes (and no
    // sequence number moves).
    for (name, input) in fixtures("sse") {
        let list = make_sources(2);
        let _ = &name;
        let exp = responses_ref::expect(
            std::str::from_utf8(&input).unwrap(),
            &list,
            &RefOpts::default(),
        );
        let changed = exp.iter().filter(|b| !matches!(b, Block::Same(_))).count();
        assert!(changed <= 1, "{name}: {changed}");
    }
}

#[test]
fn failed_and_error_streams_get_no_sources() {
    for name in [
        "openai_gpt5nano_error_event_then_failed.sse",
        "openai_gpt4omini_error_event_instead_of_completed.sse",
    ] {
        let input = with_markers(
            &std::fs::read(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/upstream/responses")
                    .join(name),
            )
            .unwrap(),
        );
        let sources = Arc::new(Sources::new(make_sources(3)));
        let mut rw = rewriter(&sources, &RefOpts::default());
        let out = drive(&mut rw, &[&input]);
        assert!(!rw.sources_emitted(), "{name}");
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("\"sources\":"), "{name}");
    }
}

#[test]
fn cut_stream_gets_no_sources_and_keeps_its_bytes() {
    let (_, input) = fixtures("sse")
        .into_iter()
        .find(|(n, _)| n == "openai_gpt4omini_text_obfuscation.sse")
        .unwrap();
    let input = with_markers(&input);
    let sources = Arc::new(Sources::new(make_sources(3)));
    for cut in (0..input.len()).step_by(97) {
        let part = &input[..cut];
        let out = drive(&mut rewriter(&sources, &RefOpts::default()), &[part]);
        let exp = responses_ref::expect(
            std::str::from_utf8(part).unwrap_or(""),
            &make_sources(3),
            &RefOpts::default(),
        );
        if std::str::from_utf8(part).is_ok() {
            responses_ref::check(&out, &exp, &format!("cut at {cut}"));
        }
        assert!(!String::from_utf8_lossy(&out).contains("\"sources\":"));
    }
}

#[test]
fn whole_bodies_against_the_reference() {
    for (name, body) in fixtures("json") {
        for marked in [false, true] {
            let body = if marked {
                // Markers into every `"text": "` of an output_text part.
                String::from_utf8(body.clone())
                    .unwrap()
                    .replace("\"text\": \"", "\"text\": \"[2] x [1]. ")
                    .into_bytes()
            } else {
                body.clone()
            };
            for (nsrc, o) in [
                (0, RefOpts::default()),
                (3, RefOpts::default()),
                (3, opts(Dialect::BOTH, OffsetUnit::Utf16, true)),
                (2, opts(Dialect::CITATIONS, OffsetUnit::Bytes, false)),
            ] {
                let list = make_sources(nsrc);
                let sources = Sources::new(list.clone());
                let out = responses::rewrite_body(&body, &sources, &o.rewrite_options());
                let what = format!("{name} marked={marked} {nsrc} {o:?}");
                let via = citestream::rewrite::rewrite_body(
                    Endpoint::Responses,
                    &body,
                    &sources,
                    &o.rewrite_options(),
                );
                assert_eq!(out, via, "{what}");
                match responses_ref::expect_body(&body, &list, &o) {
                    None => assert_eq!(&out[..], &body[..], "{what}"),
                    Some(want) => {
                        let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
                        assert_eq!(got, want, "{what}");
                        // Every upstream byte kept, in order: the output
                        // minus our insertions is the input.
                        assert!(is_subsequence(&body, &out), "{what}");
                    }
                }
            }
        }
    }
}

fn is_subsequence(small: &[u8], big: &[u8]) -> bool {
    let mut it = big.iter();
    small.iter().all(|c| it.any(|x| x == c))
}

#[test]
fn non_response_bodies_are_left_alone() {
    let s = Sources::new(make_sources(2));
    let o = RefOpts::default().rewrite_options();
    for body in [
        &br#"{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}"#
            [..],
        b"not json",
        br#"{"object":"chat.completion","output":[]}"#,
        br#"{"object":"response","output":[]} trailing"#,
        b"",
    ] {
        assert_eq!(&responses::rewrite_body(body, &s, &o)[..], body);
    }
}

#[test]
fn rewriter_new_dispatches_responses() {
    let sources = Arc::new(Sources::new(make_sources(1)));
    let input = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"content_index\":0,\"item_id\":\"m\",\"delta\":\"A [1]\",\"sequence_number\":1}\n\nevent: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"output_index\":0,\"content_index\":0,\"item_id\":\"m\",\"text\":\"A [1]\",\"sequence_number\":2}\n\n";
    let mut rw = Rewriter::new(
        Endpoint::Responses,
        sources.clone(),
        RefOpts::default().rewrite_options(),
    );
    let got = drive(&mut rw, &[input]);
    let want = drive(&mut rewriter(&sources, &RefOpts::default()), &[input]);
    assert_eq!(got, want);
    assert!(String::from_utf8(got).unwrap().contains("annotation.added"));
}

// ---------------------------------------------------------------------------
// Generated streams.

/// Pieces of text that exercise the tracker: markers, escapes, non-ASCII,
/// code spans and fences, brackets that are not markers.
const TOKENS: &[&str] = &[
    "[1]",
    "[2]",
    "[3]",
    "[12]",
    "[0]",
    "[01]",
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
    "``",
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
];

#[derive(Clone, Debug)]
struct Gen {
    items: Vec<Vec<Vec<String>>>,
    seq: bool,
    event_lines: bool,
    obfuscation: bool,
    upstream_ann: Vec<u8>,
    completed: bool,
    crlf: bool,
}

fn gen_strategy() -> impl Strategy<Value = Gen> {
    let delta = prop::collection::vec(prop::sample::select(TOKENS), 0..5).prop_map(|v| v.concat());
    let part = prop::collection::vec(delta, 0..6);
    let item = prop::collection::vec(part, 1..3);
    (
        prop::collection::vec(item, 1..3),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(0u8..3, 4),
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(items, seq, event_lines, obfuscation, upstream_ann, completed, crlf)| Gen {
                items,
                seq,
                event_lines,
                obfuscation,
                upstream_ann,
                completed,
                crlf,
            },
        )
}

/// Writes the generated stream in the real event sequence; item 0 is
/// preceded by a reasoning item (output_index 0), so messages start at 1.
fn build(g: &Gen) -> String {
    let mut out = String::new();
    let mut seq = 0u64;
    let mut ev = |out: &mut String, ty: &str, body: String| {
        if g.event_lines {
            out.push_str(&format!("event: {ty}\n"));
        }
        let sn = if g.seq {
            let s = format!(",\"sequence_number\":{seq}");
            seq += 1;
            s
        } else {
            String::new()
        };
        out.push_str(&format!("data: {{\"type\":\"{ty}\"{sn},{body}}}\n\n"));
    };
    ev(
        &mut out,
        "response.created",
        r#""response":{"id":"r","object":"response","output":[]}"#.into(),
    );
    ev(
        &mut out,
        "response.reasoning_text.delta",
        r#""output_index":0,"content_index":0,"item_id":"rs","delta":"think [1]""#.into(),
    );
    out.push_str(": keep-alive\n\n");
    let mut final_items = Vec::new();
    for (j, parts) in g.items.iter().enumerate() {
        let o = j + 1;
        let id = format!("\"msg_{j}\"");
        ev(
            &mut out,
            "response.output_item.added",
            format!(r#""output_index":{o},"item":{{"id":{id},"type":"message","content":[]}}"#),
        );
        let mut content = Vec::new();
        for (i, deltas) in parts.iter().enumerate() {
            ev(
                &mut out,
                "response.content_part.added",
                format!(
                    r#""output_index":{o},"content_index":{i},"item_id":{id},"part":{{"type":"output_text","text":"","annotations":[]}}"#
                ),
            );
            let nup = g.upstream_ann[(j + i) % 4] as usize;
            let mut text = String::new();
            for (k, d) in deltas.iter().enumerate() {
                let ob = if g.obfuscation {
                    r#","obfuscation":"x[1]y""#
                } else {
                    ""
                };
                ev(
                    &mut out,
                    "response.output_text.delta",
                    format!(
                        r#""output_index":{o},"content_index":{i},"item_id":{id},"delta":"{d}","logprobs":[]{ob}"#
                    ),
                );
                text.push_str(d);
                if k == 0 {
                    for a in 0..nup {
                        ev(
                            &mut out,
                            "response.output_text.annotation.added",
                            format!(
                                r#""output_index":{o},"content_index":{i},"item_id":{id},"annotation_index":{a},"annotation":{{"type":"url_citation","start_index":0,"end_index":0,"url":"u","title":"t"}}"#
                            ),
                        );
                    }
                }
            }
            let ups: Vec<String> = (0..if deltas.is_empty() { 0 } else { nup })
                .map(|_| {
                    r#"{"type":"url_citation","start_index":0,"end_index":0,"url":"u","title":"t"}"#
                        .to_owned()
                })
                .collect();
            let part = format!(
                r#"{{"type":"output_text","text":"{text}","annotations":[{}]}}"#,
                ups.join(",")
            );
            ev(
                &mut out,
                "response.output_text.done",
                format!(r#""output_index":{o},"content_index":{i},"item_id":{id},"text":"{text}""#),
            );
            ev(
                &mut out,
                "response.content_part.done",
                format!(r#""output_index":{o},"content_index":{i},"item_id":{id},"part":{part}"#),
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
            format!(r#""output_index":{o},"item":{item}"#),
        );
        final_items.push(item);
    }
    if g.completed {
        let output = format!(
            r#"[{{"type":"reasoning","id":"rs","content":[]}},{}]"#,
            final_items.join(",")
        );
        ev(
            &mut out,
            "response.completed",
            format!(
                r#""response":{{"id":"r","object":"response","output":{output},"sources":"upstream's"}}"#
            ),
        );
    } else {
        ev(
            &mut out,
            "response.failed",
            r#""response":{"id":"r","object":"response","status":"failed"}"#.into(),
        );
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Generated streams at random splits, in every dialect and unit: the
    /// reference's blocks, and the same bytes whatever the split.
    #[test]
    fn generated_streams_match_the_reference(
        g in gen_strategy(),
        cuts in prop::collection::vec(0usize..100_000, 0..40),
        nsrc in 0usize..4,
        d in 0usize..3,
        unit in 0usize..3,
        only_cited in any::<bool>(),
    ) {
        let input = build(&g);
        let dialect = [Dialect::SOURCES, Dialect::CITATIONS, Dialect::BOTH][d];
        let unit = [OffsetUnit::Chars, OffsetUnit::Utf16, OffsetUnit::Bytes][unit];
        let o = opts(dialect, unit, only_cited);
        let list = make_sources(nsrc);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let input = if g.crlf { input.replace('\n', "\r\n") } else { input };
        if g.crlf {
            // The reference reads LF framing: compare with the LF stream's
            // output, CRLF back to LF (the rewriter keeps each event's
            // framing; inserted events are LF).
            let sources = Arc::new(Sources::new(list.clone()));
            let whole = drive(&mut rewriter(&sources, &o), &[input.as_bytes()]);
            let split = drive(&mut rewriter(&sources, &o), &split_at(input.as_bytes(), &cuts));
            prop_assert!(whole == split);
            let lf = String::from_utf8(whole).unwrap().replace("\r\n", "\n");
            let exp = responses_ref::expect(&input.replace("\r\n", "\n"), &list, &o);
            responses_ref::check(lf.as_bytes(), &exp, "crlf");
        } else {
            run_checked(input.as_bytes(), &list, &o, &[cuts], "generated");
        }
    }
}

#[test]
fn sequence_numbers_stay_consecutive() {
    let g = Gen {
        items: vec![
            vec![vec!["A [1]".into(), " b [2].".into()], vec!["[3]".into()]],
            vec![vec!["c [1][2]".into()]],
        ],
        seq: true,
        event_lines: true,
        obfuscation: true,
        upstream_ann: vec![1, 0, 2, 0],
        completed: true,
        crlf: false,
    };
    let input = build(&g);
    let sources = Arc::new(Sources::new(make_sources(3)));
    let out = drive(
        &mut rewriter(&sources, &RefOpts::default()),
        &[input.as_bytes()],
    );
    let out = String::from_utf8(out).unwrap();
    let nums: Vec<u64> = responses_ref::blocks(&out)
        .iter()
        .filter_map(|b| {
            let d = b.lines().find_map(|l| l.strip_prefix("data: "))?;
            serde_json::from_str::<serde_json::Value>(d).ok()?["sequence_number"].as_u64()
        })
        .collect();
    assert_eq!(nums, (0..nums.len() as u64).collect::<Vec<_>>());
    let inserted = out
        .matches("event: response.output_text.annotation.added\n")
        .count();
    let upstream = input
        .matches("event: response.output_text.annotation.added\n")
        .count();
    assert_eq!(inserted - upstream, 5);
    // annotation_index goes on after the upstream's: part (1,0) had one.
    assert!(out.contains(r#""output_index":1,"content_index":0,"annotation_index":1,"annotation":{"type":"url_citation","start_index":2"#));
}

//! Edge cases of the response rules (docs/reference/responses.md, "Chat
//! completions", "Messages", "Errors and bad input"), one named test each. Every
//! streamed case also goes through the reference checker (`chat_ref`) at
//! several read sizes; the named assertions pin the behaviour the test is
//! about.

mod common;

use std::sync::Arc;

use citestream::{Dialect, RewriteOptions, Source, Sources, chat, messages};
use common::chat_ref::{self, RefOpts};
use serde_json::{Value, json};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/upstream/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn src(n: usize) -> Vec<Source> {
    chat_ref::make_sources(n)
}

fn events(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .split_inclusive("\n\n")
        .map(String::from)
        .collect()
}

fn data(ev: &str) -> Value {
    let d: String = ev
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .collect::<Vec<_>>()
        .join("\n");
    serde_json::from_str(&d).unwrap_or(Value::Null)
}

const READS: &[usize] = &[1, 2, 3, 5, 64];

fn chunk(id: &str, choices: &str, extra: &str) -> String {
    format!(
        "data: {{\"id\":\"{id}\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\"{extra},\"choices\":[{choices}]}}\n\n"
    )
}

fn delta(i: u32, content: &str, finish: Option<&str>) -> String {
    let f = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
    format!("{{\"index\":{i},\"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":{f}}}")
}

#[test]
fn finish_chunk_with_content_is_split() {
    // Gemini: the last content delta and finish_reason in one chunk.
    let input = String::from_utf8(fixture("gemini_openai_compat_finish_with_content.sse"))
        .unwrap()
        .replace("17 × 23.", "17 × 23 [1].");
    let (out, ex, found) = chat_ref::check_chat(
        "gemini",
        input.as_bytes(),
        &src(1),
        &RefOpts::default(),
        READS,
    );
    assert!(ex.top);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].1[0]["url_citation"]["start_index"], 18);
    let ev = events(&out);
    assert_eq!(
        ev.len(),
        5,
        "first chunk, content part, annotations, finish part, [DONE]"
    );
    let content = data(&ev[1]);
    assert_eq!(
        content["choices"][0]["delta"]["content"],
        ", 391 = 17 × 23 [1]."
    );
    assert_eq!(content["choices"][0]["finish_reason"], Value::Null);
    assert!(content.get("usage").is_none() && content.get("sources").is_none());
    assert!(data(&ev[2])["choices"][0]["delta"]["annotations"].is_array());
    let fin = data(&ev[3]);
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    assert_eq!(fin["choices"][0]["finish_reason"], "stop");
    assert_eq!(fin["usage"]["total_tokens"], 561);
    assert!(fin["sources"].is_array());
    assert_eq!(ev[4], "data: [DONE]\n\n");

    // Without a marker nothing is split: only sources are spliced in.
    let plain = fixture("gemini_openai_compat_finish_with_content.sse");
    let (out, _, found) =
        chat_ref::check_chat("gemini plain", &plain, &src(1), &RefOpts::default(), READS);
    assert!(found.is_empty());
    assert_eq!(events(&out).len(), 3);
}

#[test]
fn finish_chunk_with_content_marker_in_earlier_chunk() {
    // The marker is in an earlier delta; the finish chunk's own content
    // (no marker) still forces the split.
    let input = [
        chunk("c", &delta(0, "A [1]", None), ""),
        chunk(
            "c",
            &delta(0, " end.", Some("stop")),
            ",\"system_fingerprint\":\"fp\"",
        ),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let (out, _, _) = chat_ref::check_chat(
        "split2",
        input.as_bytes(),
        &src(2),
        &RefOpts::default(),
        READS,
    );
    let ev = events(&out);
    assert_eq!(ev.len(), 5);
    let ann = data(&ev[2]);
    assert_eq!(ann["system_fingerprint"], "fp");
    assert_eq!(
        ann["choices"][0]["delta"]["annotations"][0]["url_citation"]["end_index"],
        5
    );
}

#[test]
fn two_finish_chunks_for_one_choice() {
    // OpenRouter: finish_reason on two consecutive chunks, then an error
    // chunk. Only the first finish is the choice's finish chunk.
    let input = String::from_utf8(fixture("openrouter_error_chunk_after_finish.sse"))
        .unwrap()
        .replacen("\"content\":\"\"", "\"content\":\"Hello [1] \"", 1);
    for dialect in [Dialect::SOURCES, Dialect::BOTH] {
        let o = RefOpts {
            dialect,
            ..RefOpts::default()
        };
        let (out, _, found) =
            chat_ref::check_chat("openrouter", input.as_bytes(), &src(1), &o, READS);
        assert_eq!(found.len(), 1, "annotations once");
        let s = String::from_utf8(out).unwrap();
        assert_eq!(s.matches("\"sources\"").count(), 1);
        // The second finish chunk is forwarded as is.
        let lines: Vec<&str> = input.split_inclusive("\n\n").collect();
        let finishes: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains("\"finish_reason\":\"length\""))
            .collect();
        assert_eq!(finishes.len(), 2);
        assert!(s.contains(*finishes[1]));
        assert!(!s.contains(*finishes[0]));
    }
}

#[test]
fn perplexity_upstream_citations_replaced_only_in_modified_chunk() {
    let input = fixture("perplexity_sonar_citations.sse");
    let upstream_chunks = events(&input)
        .iter()
        .filter(|e| e.contains("\"citations\":[\"https://"))
        .count();
    assert!(upstream_chunks >= 8);
    for dialect in [Dialect::CITATIONS, Dialect::BOTH, Dialect::SOURCES] {
        let o = RefOpts {
            dialect,
            ..RefOpts::default()
        };
        let (out, _, found) = chat_ref::check_chat("perplexity", &input, &src(3), &o, READS);
        let ev = events(&out);
        let fin = ev
            .iter()
            .position(|e| e.contains("\"finish_reason\":\"stop\""))
            .unwrap();
        let v = data(&ev[fin]);
        let raw = &ev[fin];
        assert_eq!(
            raw.matches("\"citations\"").count(),
            1,
            "{dialect:?}: no key twice"
        );
        if dialect.citations {
            assert_eq!(v["citations"], chat_ref::expected_citations(&src(3), None));
            assert_eq!(
                ev.iter()
                    .filter(|e| e.contains("\"citations\":[\"https://"))
                    .count(),
                upstream_chunks - 1,
                "the other chunks keep theirs"
            );
        } else {
            assert!(
                v["citations"][0].is_string(),
                "sources dialect leaves upstream citations"
            );
        }
        // "[2]" and "[3]" arrive as separate deltas; with 3 sources they
        // annotate (sources dialect only).
        assert_eq!(found.len(), usize::from(dialect.sources));
    }
    // With one source, "[2]" is plain text: no annotations, no split.
    let (_, ex, found) =
        chat_ref::check_chat("perplexity 1", &input, &src(1), &RefOpts::default(), READS);
    assert!(found.is_empty() && ex.top);
}

#[test]
fn error_event_midstream_gets_no_additions() {
    for name in [
        "groq_gptoss_event_error_midstream.sse",
        "openai_gpt41_error_object_midstream.sse",
    ] {
        let input = fixture(name);
        for dialect in [Dialect::SOURCES, Dialect::CITATIONS, Dialect::BOTH] {
            let o = RefOpts {
                dialect,
                ..RefOpts::default()
            };
            let (out, ex, _) = chat_ref::check_chat(name, &input, &src(3), &o, READS);
            assert!(!ex.top);
            assert_eq!(out, input, "{name}");
        }
    }
}

#[test]
fn truncated_stream_gets_no_additions() {
    let full = std::fs::read(format!(
        "{}/examples/lisbon/upstream.sse",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let fin = String::from_utf8_lossy(&full)
        .find("\"finish_reason\":\"stop\"")
        .unwrap();
    // Cut anywhere before the finish chunk's blank line: no additions.
    for cut in (0..fin).step_by(97).chain([fin, fin + 10]) {
        let input = &full[..cut];
        let (out, ex, _) =
            chat_ref::check_chat("truncated", input, &src(3), &RefOpts::default(), &[1, 7]);
        assert!(!ex.top);
        assert_eq!(out, input, "cut at {cut}");
    }
}

#[test]
fn fewer_choices_than_n() {
    let input = fixture("openai_gpt4o_n3_interleaved_choices.sse");
    let s = String::from_utf8(input.clone()).unwrap();
    let no_done = s.replace("data: [DONE]\n\n", "");
    let partial_tail = format!("{no_done}data: {{\"cut");
    for (what, inp) in [
        ("[DONE]", s.clone()),
        ("end of input", no_done),
        ("unterminated tail", partial_tail),
    ] {
        for n in [4, 5] {
            let o = RefOpts {
                n,
                dialect: Dialect::BOTH,
                ..RefOpts::default()
            };
            let (out, ex, _) = chat_ref::check_chat(what, inp.as_bytes(), &src(3), &o, READS);
            assert!(ex.top);
            let ev = events(&out);
            let k = ev.iter().position(|e| e.contains("\"sources\"")).unwrap();
            let t = data(&ev[k]);
            assert_eq!(t["choices"], json!([]), "{what}");
            assert!(t["citations"].is_array());
            assert_eq!(t["id"], data(&ev[0])["id"]);
            match what {
                "[DONE]" => assert_eq!(ev[k + 1], "data: [DONE]\n\n"),
                "end of input" => assert_eq!(k, ev.len() - 1),
                _ => assert_eq!(ev[k + 1], "data: {\"cut"),
            }
        }
    }
    // With the real n = 3 the third finish chunk carries them.
    let o = RefOpts {
        n: 3,
        ..RefOpts::default()
    };
    let (out, _, found) = chat_ref::check_chat("n3", &input, &src(3), &o, READS);
    assert!(found.is_empty());
    let ev = events(&out);
    let k = ev.iter().position(|e| e.contains("\"sources\"")).unwrap();
    assert_eq!(
        ev[..k]
            .iter()
            .filter(|e| e.contains("\"finish_reason\":\""))
            .count(),
        2
    );
    assert!(ev[k].contains("\"finish_reason\":\""));
}

#[test]
fn interleaved_choices_annotate_each() {
    // n = 2: both choices cite; each gets its annotations right before its
    // own finish chunk; sources go on the second finish.
    let input = [
        chunk(
            "c",
            &[delta(0, "A [1]", None), delta(1, "B", None)].join(","),
            "",
        ),
        chunk("c", &delta(1, " [2] b", None), ""),
        chunk("c", &delta(1, "", Some("stop")), ""),
        chunk("c", &delta(0, " [2]", None), ""),
        chunk("c", &delta(0, "", Some("length")), ""),
        chunk("c", "", ",\"usage\":{\"total_tokens\":3}"),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let o = RefOpts {
        n: 2,
        ..RefOpts::default()
    };
    let (out, _, found) = chat_ref::check_chat("n2", input.as_bytes(), &src(2), &o, READS);
    assert_eq!(found.iter().map(|f| f.0).collect::<Vec<_>>(), [1, 0]);
    assert_eq!(found[1].1.as_array().unwrap().len(), 2);
    let ev = events(&out);
    assert_eq!(ev.len(), 9);
    assert!(ev[2].contains("\"index\":1,\"delta\":{\"annotations\""));
    assert!(ev[5].contains("\"index\":0,\"delta\":{\"annotations\""));
    assert!(ev[6].contains("\"sources\""));
    assert!(!ev[3].contains("\"sources\""));
}

#[test]
fn multi_line_data_finish_chunk_is_reframed() {
    let input = "id: 7\ndata: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x [1]\"},\"finish_reason\":null}]}\n\n\
event: message\nid: 8\ndata: {\"id\":\"c\",\ndata: \"choices\":[{\"index\":0,\"delta\":{},\ndata: \"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";
    let (out, _, found) = chat_ref::check_chat(
        "multiline",
        input.as_bytes(),
        &src(1),
        &RefOpts::default(),
        READS,
    );
    assert_eq!(found.len(), 1);
    let ev = events(&out);
    assert_eq!(ev.len(), 4);
    assert!(
        ev[2].starts_with("event: message\nid: 8\ndata: "),
        "{}",
        ev[2]
    );
    assert_eq!(data(&ev[2])["sources"], chat_ref::expected_sources(&src(1)));
}

fn crlf(s: &str) -> String {
    s.replace('\n', "\r\n")
}

#[test]
fn crlf_split_between_cr_and_lf() {
    // Every chunking of short CRLF streams whose finish chunk is re-framed
    // (split) or spliced: same output at every split point.
    let plain = [
        chunk("c", &delta(0, "A [1]", None), ""),
        chunk("c", &delta(0, " b [2].", Some("stop")), ""),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let spliced = [
        chunk("c", &delta(0, "A [1]", None), ""),
        chunk("c", &delta(0, "", Some("stop")), ""),
    ]
    .concat();
    for input in [crlf(&plain), crlf(&spliced), plain.replace('\n', "\r")] {
        let input = input.as_bytes();
        let o = RefOpts::default();
        let (whole, _, found) = chat_ref::check_chat("crlf", input, &src(2), &o, &[1, 2, 3]);
        assert_eq!(found.len(), 1);
        let arc = Arc::new(Sources::new(src(2)));
        for cut in 0..=input.len() {
            let out = chat_ref::run_chat(&arc, &o, &chat_ref::split_at(input, &[cut]));
            assert_eq!(out, whole, "cut at {cut}");
        }
        // Cuts right after every CR, together.
        let crs: Vec<usize> = input
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\r')
            .map(|(i, _)| i + 1)
            .collect();
        let out = chat_ref::run_chat(&arc, &o, &chat_ref::split_at(input, &crs));
        assert_eq!(out, whole);
        // No stray LF: re-framed events use LF only and the CRLF's LF is not
        // left dangling.
        assert!(!String::from_utf8_lossy(&whole).contains("\n\n\n"));
    }
}

#[test]
fn oversized_events_are_forwarded_untouched() {
    let big = "x".repeat(600);
    let input = [
        chunk("c", &delta(0, "A [1] ", None), ""),
        chunk("c", &delta(0, &format!("{big} [2]"), None), ""),
        chunk(
            "c",
            &delta(0, " C", Some("stop")),
            &format!(",\"pad\":\"{big}\""),
        ),
        chunk("c", &delta(0, "", Some("stop")), ""),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let o = RefOpts {
        max_event_size: Some(400),
        ..RefOpts::default()
    };
    let (out, ex, found) = chat_ref::check_chat("oversized", input.as_bytes(), &src(2), &o, READS);
    // The oversized content and finish chunks are not read: the marker in
    // the big delta does not count and the first finish is the fourth chunk.
    assert!(ex.top);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].1.as_array().unwrap().len(), 1);
    let s = String::from_utf8(out).unwrap();
    for e in input.split_inclusive("\n\n").skip(1).take(2) {
        assert!(s.contains(e));
    }
}

#[test]
fn non_message_event_types_untouched() {
    let fin = chunk("c", &delta(0, "", Some("stop")), "");
    let input = [
        chunk("c", &delta(0, "A [1]", None), ""),
        format!("event: foo\n{fin}"),
        ": comment\n\n".to_string(),
        "event: ping\ndata: {}\n\n".to_string(),
        "retry: 10\n\n".to_string(),
    ]
    .concat();
    let (out, ex, _) = chat_ref::check_chat(
        "types",
        input.as_bytes(),
        &src(1),
        &RefOpts::default(),
        READS,
    );
    assert!(!ex.top, "an `event: foo` finish chunk is not ours");
    assert_eq!(out, input.as_bytes());
}

#[test]
fn invalid_json_and_non_chunks_untouched() {
    let input = [
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"[1]\"},\"finish_reason\":\"stop\"}]\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"[1]\"},\"finish_reason\":\"stop\"}]} x\n\n",
        "data: not json\n\n",
        "data: [1,2]\n\n",
        "data: \"str\"\n\n",
        "data: {\"error\":{\"message\":\"boom\"}}\n\n",
        "data: [DONE]\n\n",
    ]
    .concat();
    let (out, ex, _) = chat_ref::check_chat(
        "invalid",
        input.as_bytes(),
        &src(1),
        &RefOpts::default(),
        READS,
    );
    assert!(!ex.top);
    assert_eq!(out, input.as_bytes());
}

#[test]
fn no_sources_no_change() {
    let input = fixture("openai_gpt4o_text_usage_chunk.sse");
    let (out, ex, _) = chat_ref::check_chat("none", &input, &[], &RefOpts::default(), READS);
    assert!(!ex.top);
    assert_eq!(out, input);
}

fn opts(d: Dialect) -> RewriteOptions {
    let mut o = RewriteOptions::new();
    o.dialect(d);
    o
}

#[test]
fn whole_body_with_upstream_annotations_appends_ours() {
    let s = Sources::new(src(2));
    let up = r#"{"type":"url_citation","url_citation":{"start_index":0,"end_index":0,"url":"https://up/","title":"up"}}"#;
    for (ann, want_up) in [
        (format!("[{up}]"), 1),
        ("[]".to_string(), 0),
        (" [ ] ".to_string(), 0),
        ("null".to_string(), 0),
    ] {
        let body = format!(
            r#"{{"object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"A [2] b [1]","annotations":{ann}}},"finish_reason":"stop"}}]}}"#
        );
        let out = chat::rewrite_body(body.as_bytes(), &s, &opts(Dialect::SOURCES));
        let v: Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{ann}: {e}: {}", String::from_utf8_lossy(&out)));
        let a = v["choices"][0]["message"]["annotations"]
            .as_array()
            .unwrap();
        assert_eq!(a.len(), want_up + 2, "{ann}");
        if want_up == 1 {
            assert_eq!(a[0]["url_citation"]["url"], "https://up/");
        }
        assert_eq!(a[want_up]["url_citation"]["start_index"], 2);
        assert_eq!(
            a[want_up]["url_citation"]["url"],
            src(2)[1].url.clone().unwrap()
        );
        assert_eq!(a[want_up + 1]["url_citation"]["start_index"], 8);
        assert_eq!(
            String::from_utf8_lossy(&out)
                .matches("\"annotations\"")
                .count(),
            1
        );
    }
    // No markers: an empty array (and upstream ones kept as they are).
    let body = r#"{"choices":[{"index":0,"message":{"content":"none"}},{"index":1,"message":{"content":"x","annotations":[1]}}]}"#;
    let out = chat::rewrite_body(body.as_bytes(), &s, &opts(Dialect::SOURCES));
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["choices"][0]["message"]["annotations"], json!([]));
    assert_eq!(v["choices"][1]["message"]["annotations"], json!([1]));
}

#[test]
fn whole_body_error_and_invalid_untouched() {
    let s = Sources::new(src(2));
    for body in [
        &br#"{"error":{"message":"Rate limit","type":"rate_limit_error","param":null,"code":null}}"#[..],
        br#"{"choices":[{"message":{"content":"[1]"}}]"#,
        br#"{"choices":[{"message":{"content":"[1]"}}]} trailing"#,
        b"not json",
        b"",
        b"[]",
        br#"{"choices":"nope"}"#,
    ] {
        for d in [Dialect::SOURCES, Dialect::CITATIONS, Dialect::BOTH] {
            assert_eq!(&chat::rewrite_body(body, &s, &opts(d))[..], body);
            assert_eq!(&messages::rewrite_body(body, &s, &opts(d))[..], body);
        }
    }
}

#[test]
fn whole_body_replaces_upstream_top_level_members() {
    let s = Sources::new(src(2));
    let body = br#"{"citations":["https://a"],"choices":[{"index":0,"message":{"content":"[1]"}}],"sources":1,"citations":["dup"]}"#;
    let out = chat::rewrite_body(body, &s, &opts(Dialect::BOTH));
    let txt = String::from_utf8_lossy(&out);
    assert_eq!(txt.matches("\"citations\"").count(), 1, "{txt}");
    assert_eq!(txt.matches("\"sources\"").count(), 1, "{txt}");
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["sources"], chat_ref::expected_sources(&src(2)));
    assert_eq!(v["citations"], chat_ref::expected_citations(&src(2), None));
}

#[test]
fn messages_without_message_delta_or_with_error() {
    let name = "anthropic_event_error_overloaded.sse";
    let input = fixture(name);
    let (out, ex) = chat_ref::check_messages(name, &input, &src(3), &RefOpts::default(), READS);
    assert!(!ex.top);
    assert_eq!(out, input);
    // Only the first message_delta; an unrelated `event: message_delta`
    // with other data passes.
    let input = "event: message_delta\ndata: {\"type\":\"ping\"}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"sources\":7}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{}}\n\n";
    let (out, ex) = chat_ref::check_messages(
        "md",
        input.as_bytes(),
        &src(2),
        &RefOpts {
            dialect: Dialect::BOTH,
            ..RefOpts::default()
        },
        READS,
    );
    assert!(ex.top);
    let ev = events(&out);
    assert_eq!(ev[0], input.split_inclusive("\n\n").next().unwrap());
    assert_eq!(data(&ev[1])["sources"], chat_ref::expected_sources(&src(2)));
    assert_eq!(ev[1].matches("\"sources\"").count(), 1);
    assert_eq!(ev[2], input.split_inclusive("\n\n").nth(2).unwrap());
}

#[test]
fn messages_only_cited_streamed_equals_whole_body() {
    let ev = |t: &str, d: &str| format!("event: {t}\ndata: {d}\n\n");
    let input = [
        ev("message_start", r#"{"type":"message_start","message":{"id":"m","type":"message","content":[]}}"#),
        ev("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#),
        ev("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"[3]"}}"#),
        ev("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        ev("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#),
        ev("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"A [2] and `[1]`, "}}"#),
        ev("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"[4"}}"#),
        ev("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"]."}}"#),
        ev("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
        ev("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#),
        ev("message_stop", r#"{"type":"message_stop"}"#),
    ]
    .concat();
    let o = RefOpts {
        dialect: Dialect::CITATIONS,
        only_cited: true,
        ..RefOpts::default()
    };
    let (out, ex) = chat_ref::check_messages("only_cited", input.as_bytes(), &src(4), &o, READS);
    assert!(ex.top);
    let ev = events(&out);
    let streamed = data(&ev[9])["citations"].clone();
    let idx: Vec<u64> = streamed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["document_index"].as_u64().unwrap())
        .collect();
    assert_eq!(
        idx,
        [1, 3],
        "[2] and [4] cited; `[1]` is code, [3] is thinking"
    );
    let body = r#"{"type":"message","content":[{"type":"thinking","thinking":"[3]"},{"type":"text","text":"A [2] and `[1]`, [4]."}]}"#;
    let whole =
        messages::rewrite_body(body.as_bytes(), &Sources::new(src(4)), &o.rewrite_options());
    let v: Value = serde_json::from_slice(&whole).unwrap();
    assert_eq!(v["citations"], streamed);
}

#[test]
fn whole_body_ignores_reasoning_refusal_and_tool_arguments() {
    let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"x [2]","reasoning_content":"[1]","refusal":"[1]","tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"[1]"}}]},"finish_reason":"stop"},{"index":1,"message":{"content":null,"tool_calls":[]}}]}"#;
    let out = chat::rewrite_body(
        body.as_bytes(),
        &Sources::new(src(2)),
        &opts(Dialect::SOURCES),
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    let a = v["choices"][0]["message"]["annotations"]
        .as_array()
        .unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["url_citation"]["start_index"], 2);
    assert_eq!(v["choices"][1]["message"]["annotations"], json!([]));
}

#[test]
fn choice_indices_beyond_the_limit_pass_through() {
    let input = [
        chunk("c", &delta(200, "A [1]", None), ""),
        chunk("c", &delta(200, "", Some("stop")), ""),
        chunk("c", &delta(0, "B [1]", None), ""),
        chunk("c", &delta(0, "", Some("stop")), ""),
    ]
    .concat();
    let (out, _, found) = chat_ref::check_chat(
        "limit",
        input.as_bytes(),
        &src(1),
        &RefOpts::default(),
        READS,
    );
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, 0);
    let ev = events(&out);
    assert_eq!(
        ev[..2].concat(),
        input.split_inclusive("\n\n").take(2).collect::<String>()
    );
}

#[test]
fn messages_multi_line_message_delta_crlf_every_split() {
    let input = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{}}\r\n\r\n\
event: message_delta\r\nid: 5\r\ndata: {\"type\":\"message_delta\",\r\ndata: \"delta\":{\"stop_reason\":\"end_turn\"}}\r\n\r\n\
event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n";
    for input in [input.to_string(), input.replace("\r\n", "\r")] {
        let input = input.as_bytes();
        let o = RefOpts {
            dialect: Dialect::BOTH,
            ..RefOpts::default()
        };
        let (whole, ex) = chat_ref::check_messages("md multi", input, &src(2), &o, &[1, 2, 3]);
        assert!(ex.top);
        let s = String::from_utf8_lossy(&whole).into_owned();
        assert!(s.contains("event: message_delta\nid: 5\ndata: "), "{s}");
        let arc = Arc::new(Sources::new(src(2)));
        for cut in 0..=input.len() {
            let mut rw = citestream::MessagesStream::new(arc.clone(), o.rewrite_options());
            let out = chat_ref::drive(&mut rw, &chat_ref::split_at(input, &[cut]));
            assert_eq!(out, whole, "cut at {cut}");
        }
    }
}

#[test]
fn chunk_like_the_previous_one_but_invalid_is_not_read() {
    // The rewriter learns the shape of plain content chunks; a chunk that
    // has the same bytes around a "string" that really ends early is invalid
    // JSON and must not be read (nor annotated), only forwarded.
    let good = |c: &str| chunk("c", &delta(0, c, None), ",\"obfuscation\":\"ab\"");
    let input = [
        good("A "),
        good("B "),
        // `"content":"[1]\"},"finish_reason"...`: the same bytes as a
        // plain chunk if the string ended at the escaped quote; it really
        // ends after `\"},`, and what follows is not JSON.
        chunk(
            "c",
            r#"{"index":0,"delta":{"content":"[1]\"},"finish_reason":null}"#,
            ",\"obfuscation\":\"ab\"",
        ),
        good("[2]"),
        chunk("c", &delta(0, "", Some("stop")), ""),
    ]
    .concat();
    let (out, _, found) = chat_ref::check_chat(
        "template",
        input.as_bytes(),
        &src(2),
        &RefOpts::default(),
        READS,
    );
    assert_eq!(found.len(), 1);
    let anns = found[0].1.as_array().unwrap();
    assert_eq!(
        anns.len(),
        1,
        "only [2] counts: {}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(anns[0]["url_citation"]["start_index"], 4);
}

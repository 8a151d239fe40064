//! Golden tests: the Lisbon example (streamed and whole), a Magisterium
//! `citations` body and stream (docs/reference/responses.md, "The citations array"), and an
//! Anthropic whole body. Expected outputs live in `tests/golden/`; each test
//! also checks the output structurally (reference checker) and asserts the
//! key facts in code, so a golden file cannot silently drift.
//!
//! `UPDATE_GOLDEN=1 cargo test --test chat_golden` rewrites the files (then
//! review the diff).

mod common;

use std::path::PathBuf;

use citestream::{Dialect, RewriteOptions, Source, Sources, chat, messages};
use common::chat_ref::{self, RefOpts};
use serde_json::{Value, json};

fn golden(name: &str, actual: &[u8]) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        want == actual,
        "{name}: output differs from golden\n--- golden ---\n{}\n--- actual ---\n{}",
        String::from_utf8_lossy(&want),
        String::from_utf8_lossy(actual)
    );
}

fn lisbon_sources() -> Sources {
    Sources::from_json(include_bytes!("../examples/lisbon/sources.json")).unwrap()
}

/// The seed's expected Lisbon response (Basque seed, "Erantzuna ..."), as
/// published: the whole-body rewrite must equal it as a JSON value.
fn seed_lisbon_response() -> Value {
    json!({
      "id": "chatcmpl-3e5a7c9b1d2f4a6c8e0b2d4f6a8c1e3b",
      "object": "chat.completion",
      "created": 1791590400,
      "model": "shannon-3",
      "choices": [{
        "index": 0,
        "message": {
          "role": "assistant",
          "content": "Saturday in Lisbon is forecast to be sunny with a high near 24 °C [1]. Sunday turns cloudy, with a chance of light rain in the afternoon [2].",
          "reasoning_content": null,
          "annotations": [
            {"type": "url_citation", "url_citation": {"start_index": 66, "end_index": 69,
              "url": "https://weather.example/lisbon/weekend", "title": "Lisbon weather: weekend outlook"}},
            {"type": "url_citation", "url_citation": {"start_index": 137, "end_index": 140,
              "url": "https://forecast.example/pt/lisbon/sunday", "title": "Sunday forecast for Lisbon"}}
          ]
        },
        "finish_reason": "stop"
      }],
      "usage": {"prompt_tokens": 2874, "completion_tokens": 41, "total_tokens": 2915},
      "sources": [
        {"index": 1, "title": "Lisbon weather: weekend outlook", "url": "https://weather.example/lisbon/weekend"},
        {"index": 2, "title": "Sunday forecast for Lisbon", "url": "https://forecast.example/pt/lisbon/sunday"},
        {"index": 3, "title": "Portugal: the week ahead", "url": "https://news.example/portugal/weather-week"}
      ]
    })
}

fn data_lines(out: &[u8]) -> Vec<String> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .expect("canonical framing")
                .to_string()
        })
        .collect()
}

#[test]
fn lisbon_streamed() {
    let input = include_bytes!("../examples/lisbon/upstream.sse");
    let sources = lisbon_sources();
    let (out, ex, found) = chat_ref::check_chat(
        "lisbon",
        input,
        sources.list(),
        &RefOpts::default(),
        &[1, 5, 4096],
    );
    golden("lisbon.sse", &out);
    let seed = seed_lisbon_response();
    // Key facts: the seed's annotations, once, for choice 0.
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, 0);
    assert_eq!(found[0].1, seed["choices"][0]["message"]["annotations"]);
    assert!(ex.top);
    // Chunk order exactly per spec: ...content, annotations, finish+sources,
    // usage-only, [DONE].
    let ev = data_lines(&out);
    let n = ev.len();
    assert_eq!(ev[n - 1], "[DONE]");
    let usage: Value = serde_json::from_str(&ev[n - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage.get("sources").is_none());
    let fin: Value = serde_json::from_str(&ev[n - 3]).unwrap();
    assert_eq!(fin["choices"][0]["finish_reason"], "stop");
    assert_eq!(fin["sources"], seed["sources"]);
    assert_eq!(
        fin["sources"].as_array().unwrap().len(),
        3,
        "uncited third source listed"
    );
    let ann: Value = serde_json::from_str(&ev[n - 4]).unwrap();
    assert_eq!(
        ann["choices"][0]["delta"]["annotations"],
        seed["choices"][0]["message"]["annotations"]
    );
    assert_eq!(ann["choices"][0]["finish_reason"], Value::Null);
    for k in ["id", "object", "created", "model", "system_fingerprint"] {
        assert_eq!(ann[k], fin[k], "envelope {k}");
    }
    assert_eq!(
        out.windows(9).filter(|w| w == b"\"sources\"").count(),
        1,
        "sources exactly once"
    );
    // Every upstream event before the annotations is untouched.
    let input_events: Vec<&str> = std::str::from_utf8(input)
        .unwrap()
        .split_inclusive("\n\n")
        .collect();
    let out_s = String::from_utf8(out.clone()).unwrap();
    let out_events: Vec<&str> = out_s.split_inclusive("\n\n").collect();
    assert_eq!(out_events.len(), input_events.len() + 1);
    assert_eq!(out_events[..n - 4], input_events[..n - 4]);
    assert_eq!(out_events[n - 2..], input_events[n - 3..]);
    // The streamed content concatenated is the seed's content.
    let content: String = input_events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e.trim().strip_prefix("data: ")?).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(content, seed["choices"][0]["message"]["content"]);
}

#[test]
fn lisbon_whole_body() {
    let body = include_bytes!("../examples/lisbon/upstream.json");
    let out = chat::rewrite_body(body, &lisbon_sources(), &RewriteOptions::new());
    golden("lisbon.json", &out);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, seed_lisbon_response());
    // Every other byte kept: removing our additions gives the input back.
    let s = String::from_utf8(out.to_vec()).unwrap();
    let a = s.find(",\"annotations\":").unwrap();
    let a_end = s[a..].find("}}]").unwrap() + a + 3;
    let src = s.find(",\"sources\":").unwrap();
    let src_end = s.rfind("}]").unwrap() + 2;
    let back = format!("{}{}{}", &s[..a], &s[a_end..src], &s[src_end..]);
    assert_eq!(back.as_bytes(), &body[..]);
}

/// The Portuguese seed's source, completed with the other fields of the
/// table (heading and year absent, to show the nulls).
fn magisterium_sources() -> Sources {
    Sources::new(vec![
        Source {
            title: Some("Cherishing Life".into()),
            text: Some("34. O ensinamento da Igreja em matéria moral funda-se não só na razão e no argumento, mas também na Escritura e na tradição cristã [...]".into()),
            author: Some("Catholic Bishops’ Conference of England and Wales".into()),
            reference: Some("34".into()),
            ..Source::default()
        },
        Source {
            title: Some("Catechism of the Catholic Church".into()),
            url: Some("https://www.vatican.va/archive/ENG0015/_INDEX.HTM".into()),
            text: Some("2032 The Church, the \"pillar and bulwark of the truth\"".into()),
            heading: Some("The Magisterium of the Church".into()),
            year: Some("1992".into()),
            reference: Some("2032".into()),
            ..Source::default()
        },
    ])
}

fn magisterium_citations() -> Value {
    json!([
      {"cited_text": "34. O ensinamento da Igreja em matéria moral funda-se não só na razão e no argumento, mas também na Escritura e na tradição cristã [...]",
       "cited_text_heading": null, "document_title": "Cherishing Life", "document_index": 0,
       "document_author": "Catholic Bishops’ Conference of England and Wales",
       "document_year": null, "document_reference": "34", "source_url": ""},
      {"cited_text": "2032 The Church, the \"pillar and bulwark of the truth\"",
       "cited_text_heading": "The Magisterium of the Church", "document_title": "Catechism of the Catholic Church",
       "document_index": 1, "document_author": null, "document_year": "1992",
       "document_reference": "2032", "source_url": "https://www.vatican.va/archive/ENG0015/_INDEX.HTM"}
    ])
}

const MAGISTERIUM_BODY: &str = r#"{"object":"chat.completion","created":1630000000,"model":"magisterium-1","choices":[{"index":0,"message":{"role":"assistant","content":"O ensinamento da Igreja Católica sobre fé e moral está profundamente enraizado nas Escrituras [1]."},"finish_reason":"stop"}]}"#;

#[test]
fn magisterium_citations_body() {
    let mut o = RewriteOptions::new();
    o.dialect(Dialect::CITATIONS);
    let out = chat::rewrite_body(MAGISTERIUM_BODY.as_bytes(), &magisterium_sources(), &o);
    golden("magisterium.json", &out);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["citations"], magisterium_citations());
    // Every key always present, in the table's order.
    let first = &v["citations"][0];
    assert_eq!(first.as_object().unwrap().len(), 8);
    // citations dialect only: no sources, no annotations.
    assert!(v.get("sources").is_none());
    assert!(v["choices"][0]["message"].get("annotations").is_none());
    // The rest is the input, byte for byte.
    let s = std::str::from_utf8(&out).unwrap();
    assert_eq!(
        &s[..MAGISTERIUM_BODY.len() - 1],
        &MAGISTERIUM_BODY[..MAGISTERIUM_BODY.len() - 1]
    );

    // Only the cited ones: document_index stays footnote number - 1.
    o.only_cited(true);
    let body = MAGISTERIUM_BODY.replace("[1]", "[2]");
    let out = chat::rewrite_body(body.as_bytes(), &magisterium_sources(), &o);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["citations"], json!([magisterium_citations()[1]]));
}

#[test]
fn magisterium_citations_streamed() {
    // The seed's streaming example: citations only on the last chunk with
    // finish_reason.
    let input = "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"O ensinamento \"},\"finish_reason\":null}]}\n\n\
data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"[1].\"},\"finish_reason\":null}]}\n\n\
data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";
    let o = RefOpts {
        dialect: Dialect::CITATIONS,
        ..RefOpts::default()
    };
    let sources = magisterium_sources();
    let (out, ex, found) =
        chat_ref::check_chat("magisterium", input.as_bytes(), sources.list(), &o, &[1, 3]);
    golden("magisterium.sse", &out);
    assert!(ex.top);
    assert!(found.is_empty(), "no annotations in the citations dialect");
    let ev = data_lines(&out);
    assert_eq!(ev.len(), 4);
    let fin: Value = serde_json::from_str(&ev[2]).unwrap();
    assert_eq!(fin["choices"][0]["finish_reason"], "stop");
    assert_eq!(fin["citations"], magisterium_citations());
    assert!(ev[..2].iter().all(|e| !e.contains("citations")));
}

const ANTHROPIC_BODY: &str = r#"{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"Weather [3]?","signature":"sig"},{"type":"text","text":"Saturday is sunny [1]."},{"type":"text","text":"Sunday: rain [2].","citations":null}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2874,"output_tokens":41}}"#;

#[test]
fn anthropic_whole_body() {
    let sources = lisbon_sources();
    let mut o = RewriteOptions::new();
    o.dialect(Dialect::BOTH);
    let out = messages::rewrite_body(ANTHROPIC_BODY.as_bytes(), &sources, &o);
    golden("anthropic_message.json", &out);
    let v: Value = serde_json::from_slice(&out).unwrap();
    let input: Value = serde_json::from_str(ANTHROPIC_BODY).unwrap();
    assert_eq!(v["sources"], chat_ref::expected_sources(sources.list()));
    assert_eq!(
        v["citations"],
        chat_ref::expected_citations(sources.list(), None)
    );
    let mut stripped = v.clone();
    stripped.as_object_mut().unwrap().remove("sources");
    stripped.as_object_mut().unwrap().remove("citations");
    assert_eq!(stripped, input, "nothing else changes; no annotations here");
    let s = std::str::from_utf8(&out).unwrap();
    assert!(s.starts_with(&ANTHROPIC_BODY[..ANTHROPIC_BODY.len() - 1]));
    assert!(!s.contains("annotations"));

    // An error body is untouched.
    let err = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert_eq!(&messages::rewrite_body(err, &sources, &o)[..], &err[..]);
}

#[test]
fn anthropic_stream_ordering() {
    // message_delta gets ours, and only it.
    let input = include_bytes!("fixtures/upstream/anthropic_basic_ping.sse");
    let sources = lisbon_sources();
    let (out, ex) = chat_ref::check_messages(
        "anthropic_basic_ping",
        input,
        sources.list(),
        &RefOpts::default(),
        &[1, 5],
    );
    assert!(ex.top);
    let s = String::from_utf8(out).unwrap();
    let ev: Vec<&str> = s.split_inclusive("\n\n").collect();
    let k = ev.iter().position(|e| e.contains("\"sources\"")).unwrap();
    assert!(ev[k].starts_with("event: message_delta\n"));
    assert_eq!(s.matches("\"sources\"").count(), 1);
}

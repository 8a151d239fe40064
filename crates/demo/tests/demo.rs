//! The demo upstream driven the way the gateway drives it: a client body
//! goes through the core's request flow (`web_search` stripped, real
//! sources injected by `citestream::request::inject`), the demo answers,
//! and the answer goes through the response plan's rewriters. Everything
//! is checked by parsing (SSE parser, serde_json), never by comparing
//! against the demo's own formatting code.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use citestream::flow::{Flow, Outcome, ResponsePlan};
use citestream::quota::MemoryStore;
use citestream::request::{InjectOptions, Placement};
use citestream::sources::{Source, Sources};
use citestream::sse::{Frame, Parser};
use citestream::{Endpoint, RewriteOptions, StreamRewriter};
use citestream_demo::{self as demo, DemoBody, DemoResponse};
use serde_json::{Value, json};

const LISBON_Q: &str = "What's the weather in Lisbon this weekend?";
const LISBON_ANSWER: &str = "Saturday: sunny, high 24 °C, low 16 °C [1]. \
                             Sunday: cloudy, 60% chance of light rain after 14:00 [2].";

/// Polls a future that never waits (the in-memory quota store answers at
/// once); panics if it would.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-memory flow waited"),
    }
}

fn lisbon() -> Vec<Source> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/lisbon/sources.json"
    );
    let bytes = std::fs::read(path).expect("examples/lisbon/sources.json");
    Sources::from_json(&bytes).expect("sources").list().to_vec()
}

/// The client body through the core's flow with `found` as the search
/// result: (body the gateway sends upstream, response plan).
fn prepare(
    endpoint: Endpoint,
    client: &Value,
    found: Vec<Source>,
    placement: Placement,
) -> (Bytes, Option<ResponsePlan>) {
    let store = MemoryStore::new();
    let body = serde_json::to_vec(client).unwrap();
    let flow = now(Flow::start(&store, "acct", 100, endpoint, body)).unwrap();
    let opts = InjectOptions {
        placement,
        ..InjectOptions::default()
    };
    let prepared = now(flow.finish(found, &opts));
    assert_eq!(
        prepared.plan.is_some(),
        prepared.outcome == Outcome::Injected
    );
    (prepared.body, prepared.plan)
}

fn chat_request(question: &str, extra: Value) -> Value {
    let mut v = json!({
        "model": "gpt-4o",
        "web_search": true,
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": question}
        ]
    });
    merge(&mut v, extra);
    v
}

fn messages_request(question: &str, extra: Value) -> Value {
    let mut v = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "web_search": true,
        "messages": [{"role": "user", "content": [{"type": "text", "text": question}]}]
    });
    merge(&mut v, extra);
    v
}

fn merge(v: &mut Value, extra: Value) {
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
}

fn whole(r: &DemoResponse) -> Value {
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type, "application/json");
    let DemoBody::Whole(b) = &r.body else {
        panic!("expected a whole body")
    };
    serde_json::from_slice(b).unwrap()
}

fn events(r: &DemoResponse) -> &[Bytes] {
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type, "text/event-stream");
    let DemoBody::Events(e) = &r.body else {
        panic!("expected events")
    };
    e
}

/// Parses SSE bytes fed as the given reads: (event type, data) per event;
/// asserts every read holds exactly one whole event.
fn parse(reads: &[Bytes]) -> Vec<(String, String)> {
    let mut p = Parser::new();
    let mut out = Vec::new();
    for read in reads {
        p.feed(read.clone());
        let mut n = 0;
        while let Some(f) = p.next_frame() {
            if let Frame::Event(e) = f {
                out.push((
                    String::from_utf8(e.event_type().to_vec()).unwrap(),
                    e.data_str().into_owned(),
                ));
                n += 1;
            }
        }
        assert_eq!(n, 1, "one event per read: {read:?}");
    }
    assert_eq!(p.finish(), None);
    out
}

/// The content of each chat choice from a chat stream's events.
fn chat_contents(evs: &[(String, String)], n: usize) -> Vec<String> {
    let mut out = vec![String::new(); n];
    for (_, data) in evs {
        if data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap();
        for c in v["choices"].as_array().unwrap() {
            let i = c["index"].as_u64().unwrap() as usize;
            if let Some(s) = c["delta"]["content"].as_str() {
                out[i].push_str(s);
            }
        }
    }
    out
}

fn rewrite_stream(plan: &ResponsePlan, reads: &[Bytes]) -> Vec<Bytes> {
    let mut rw = plan.stream_rewriter(&RewriteOptions::new());
    let mut out = Vec::new();
    for r in reads {
        rw.feed(r.clone());
        while let Some(b) = rw.next_output() {
            out.push(b);
        }
    }
    rw.finish();
    while let Some(b) = rw.next_output() {
        out.push(b);
    }
    out
}

/// Checks that each annotation's offsets (characters) cover exactly a
/// `[n]` of `content` and carry source n's URL and title; returns the
/// numbers in order.
fn check_annotations(content: &str, annotations: &Value, sources: &Sources) -> Vec<usize> {
    let chars: Vec<char> = content.chars().collect();
    let mut numbers = Vec::new();
    for a in annotations.as_array().unwrap() {
        assert_eq!(a["type"], "url_citation");
        let u = &a["url_citation"];
        let (s, e) = (
            u["start_index"].as_u64().unwrap() as usize,
            u["end_index"].as_u64().unwrap() as usize,
        );
        let marker: String = chars[s..e].iter().collect();
        let n: usize = marker
            .strip_prefix('[')
            .and_then(|m| m.strip_suffix(']'))
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("annotation {s}..{e} covers {marker:?}"));
        let src = &sources.list()[n - 1];
        assert_eq!(u["url"].as_str(), src.url.as_deref());
        assert_eq!(u["title"].as_str(), src.title.as_deref());
        numbers.push(n);
    }
    // Every `[` of the answer is one of the annotated markers.
    assert_eq!(content.matches('[').count(), numbers.len(), "{content}");
    numbers
}

#[test]
fn lisbon_chat_whole_is_answered_and_annotated() {
    let (body, plan) = prepare(
        Endpoint::ChatCompletions,
        &chat_request(LISBON_Q, json!({})),
        lisbon(),
        Placement::UserMessage,
    );
    let plan = plan.expect("sources were injected");
    let r = demo::respond(Endpoint::ChatCompletions, &body);
    let v = whole(&r);
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "citestream-demo");
    assert_eq!(v["choices"][0]["message"]["content"], LISBON_ANSWER);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let usage = &v["usage"];
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 50, "{usage}");
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );

    let DemoBody::Whole(raw) = &r.body else {
        unreachable!()
    };
    let out: Value =
        serde_json::from_slice(&plan.rewrite_body(raw, &RewriteOptions::new())).unwrap();
    let msg = &out["choices"][0]["message"];
    let numbers = check_annotations(
        msg["content"].as_str().unwrap(),
        &msg["annotations"],
        &plan.sources,
    );
    assert_eq!(numbers, [1, 2]);
    assert_eq!(out["sources"].as_array().unwrap().len(), 3);
}

#[test]
fn lisbon_chat_stream_matches_whole_and_is_annotated() {
    let extra = json!({"stream": true, "stream_options": {"include_usage": true}});
    let (body, plan) = prepare(
        Endpoint::ChatCompletions,
        &chat_request(LISBON_Q, extra),
        lisbon(),
        Placement::UserMessage,
    );
    let plan = plan.unwrap();
    let r = demo::respond(Endpoint::ChatCompletions, &body);
    let reads = events(&r);
    let evs = parse(reads);

    // Shape: role chunk, token-sized content chunks, finish, usage, [DONE].
    let chunks: Vec<Value> = evs[..evs.len() - 1]
        .iter()
        .map(|(t, d)| {
            assert_eq!(t, "message");
            serde_json::from_str(d).unwrap()
        })
        .collect();
    assert_eq!(evs.last().unwrap().1, "[DONE]");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content_chunks = &chunks[1..chunks.len() - 2];
    assert!(content_chunks.len() > 20);
    for c in content_chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        let piece = c["choices"][0]["delta"]["content"].as_str().unwrap();
        assert!(!piece.is_empty() && piece.chars().count() <= 8, "{piece:?}");
        assert!(c["choices"][0]["finish_reason"].is_null());
    }
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"]["completion_tokens"].as_u64(),
        Some(content_chunks.len() as u64)
    );
    let ids: Vec<&Value> = chunks.iter().map(|c| &c["id"]).collect();
    assert!(ids.iter().all(|id| *id == ids[0]));

    // Streamed content == the whole body's content for the same request.
    let content = chat_contents(&evs, 1).remove(0);
    let (whole_body, _) = prepare(
        Endpoint::ChatCompletions,
        &chat_request(LISBON_Q, json!({})),
        lisbon(),
        Placement::UserMessage,
    );
    let w = whole(&demo::respond(Endpoint::ChatCompletions, &whole_body));
    assert_eq!(
        w["choices"][0]["message"]["content"].as_str(),
        Some(&*content)
    );
    assert_eq!(content, LISBON_ANSWER);

    // Through the gateway's stream rewriter: annotations at the markers.
    let out = rewrite_stream(&plan, reads);
    let out_evs = parse_concat(&out);
    let ann: Vec<Value> = out_evs
        .iter()
        .filter(|d| d.contains("\"annotations\""))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(ann.len(), 1);
    let numbers = check_annotations(
        &content,
        &ann[0]["choices"][0]["delta"]["annotations"],
        &plan.sources,
    );
    assert_eq!(numbers, [1, 2]);
    let with_sources: Vec<&String> = out_evs
        .iter()
        .filter(|d| d.contains("\"sources\""))
        .collect();
    assert_eq!(with_sources.len(), 1);
    assert!(with_sources[0].contains("\"finish_reason\":\"stop\""));
}

/// The data of every event in a rewritten output (whatever the reads).
fn parse_concat(out: &[Bytes]) -> Vec<String> {
    let mut p = Parser::new();
    p.feed(Bytes::from(out.concat()));
    let mut v = Vec::new();
    while let Some(f) = p.next_frame() {
        if let Frame::Event(e) = f {
            v.push(e.data_str().into_owned());
        }
    }
    v
}

#[test]
fn chat_n_choices_each_annotated() {
    let extra = json!({"stream": true, "n": 2});
    let (body, plan) = prepare(
        Endpoint::ChatCompletions,
        &chat_request(LISBON_Q, extra),
        lisbon(),
        Placement::UserMessage,
    );
    let plan = plan.unwrap();
    assert_eq!(plan.n, 2);
    let reads = events(&demo::respond(Endpoint::ChatCompletions, &body)).to_vec();
    let evs = parse(&reads);
    assert_eq!(chat_contents(&evs, 2), [LISBON_ANSWER, LISBON_ANSWER]);
    assert!(!evs.iter().any(|(_, d)| d.contains("\"usage\"")));

    let out = parse_concat(&rewrite_stream(&plan, &reads));
    let mut annotated = Vec::new();
    for d in out.iter().filter(|d| d.contains("\"annotations\"")) {
        let v: Value = serde_json::from_str(d).unwrap();
        let c = &v["choices"][0];
        check_annotations(LISBON_ANSWER, &c["delta"]["annotations"], &plan.sources);
        annotated.push(c["index"].as_u64().unwrap());
    }
    annotated.sort_unstable();
    assert_eq!(annotated, [0, 1]);
    assert_eq!(out.iter().filter(|d| d.contains("\"sources\"")).count(), 1);

    let (body, _) = prepare(
        Endpoint::ChatCompletions,
        &chat_request(LISBON_Q, json!({"n": 3})),
        lisbon(),
        Placement::UserMessage,
    );
    let v = whole(&demo::respond(Endpoint::ChatCompletions, &body));
    assert_eq!(v["choices"].as_array().unwrap().len(), 3);
    assert_eq!(v["choices"][2]["index"], 2);
}

#[test]
fn lisbon_messages_stream_and_whole() {
    let (body, plan) = prepare(
        Endpoint::Messages,
        &messages_request(LISBON_Q, json!({"stream": true})),
        lisbon(),
        Placement::UserMessage,
    );
    let plan = plan.unwrap();
    let reads = events(&demo::respond(Endpoint::Messages, &body)).to_vec();
    let evs = parse(&reads);
    let types: Vec<&str> = evs.iter().map(|(t, _)| t.as_str()).collect();
    let deltas = evs.len() - 6;
    let mut expected = vec!["message_start", "content_block_start", "ping"];
    expected.extend(std::iter::repeat_n("content_block_delta", deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(types, expected);
    let mut text = String::new();
    for (t, d) in &evs {
        let v: Value = serde_json::from_str(d).unwrap();
        assert_eq!(v["type"].as_str(), Some(t.as_str()));
        if t == "content_block_delta" {
            assert_eq!(v["delta"]["type"], "text_delta");
            text.push_str(v["delta"]["text"].as_str().unwrap());
        }
    }
    assert_eq!(text, LISBON_ANSWER);
    let start: Value = serde_json::from_str(&evs[0].1).unwrap();
    assert_eq!(start["message"]["model"], "citestream-demo");
    let md: Value = serde_json::from_str(&evs[evs.len() - 2].1).unwrap();
    assert_eq!(md["delta"]["stop_reason"], "end_turn");
    assert_eq!(md["usage"]["output_tokens"].as_u64(), Some(deltas as u64));

    // Rewritten: `sources` on message_delta only; the text keeps its markers.
    let out = parse_concat(&rewrite_stream(&plan, &reads));
    let with_sources: Vec<&String> = out.iter().filter(|d| d.contains("\"sources\"")).collect();
    assert_eq!(with_sources.len(), 1);
    assert!(with_sources[0].starts_with("{\"type\":\"message_delta\""));

    let (body, plan) = prepare(
        Endpoint::Messages,
        &messages_request(LISBON_Q, json!({})),
        lisbon(),
        Placement::UserMessage,
    );
    let r = demo::respond(Endpoint::Messages, &body);
    let v = whole(&r);
    assert_eq!(v["type"], "message");
    assert_eq!(v["content"][0]["text"].as_str(), Some(LISBON_ANSWER));
    assert_eq!(v["stop_reason"], "end_turn");
    let DemoBody::Whole(raw) = &r.body else {
        unreachable!()
    };
    let out: Value =
        serde_json::from_slice(&plan.unwrap().rewrite_body(raw, &RewriteOptions::new())).unwrap();
    assert_eq!(
        out["sources"][1]["url"],
        "https://forecast.example/pt/lisbon/sunday"
    );
}

#[test]
fn system_placement_gives_the_same_answer() {
    for endpoint in [
        Endpoint::ChatCompletions,
        Endpoint::Messages,
        Endpoint::Responses,
    ] {
        let req = match endpoint {
            Endpoint::ChatCompletions => chat_request(LISBON_Q, json!({})),
            Endpoint::Messages => messages_request(LISBON_Q, json!({"system": "Be brief."})),
            Endpoint::Responses => responses_request(json!(LISBON_Q), json!({})),
        };
        let (body, _) = prepare(endpoint, &req, lisbon(), Placement::System);
        let v = whole(&demo::respond(endpoint, &body));
        let text = match endpoint {
            Endpoint::ChatCompletions => &v["choices"][0]["message"]["content"],
            Endpoint::Messages => &v["content"][0]["text"],
            Endpoint::Responses => &v["output"][0]["content"][0]["text"],
        };
        assert_eq!(text.as_str(), Some(LISBON_ANSWER), "{endpoint:?}");
    }
}

#[test]
fn no_sources_says_so_without_markers() {
    for endpoint in [
        Endpoint::ChatCompletions,
        Endpoint::Messages,
        Endpoint::Responses,
    ] {
        let mut req = match endpoint {
            Endpoint::ChatCompletions => chat_request(LISBON_Q, json!({"stream": true})),
            Endpoint::Messages => messages_request(LISBON_Q, json!({"stream": true})),
            Endpoint::Responses => responses_request(json!(LISBON_Q), json!({"stream": true})),
        };
        // Nothing found: the body goes upstream without sources.
        let (body, plan) = prepare(endpoint, &req, Vec::new(), Placement::UserMessage);
        assert!(plan.is_none());
        let evs = parse(events(&demo::respond(endpoint, &body)));
        let text: String = match endpoint {
            Endpoint::ChatCompletions => chat_contents(&evs, 1).remove(0),
            Endpoint::Messages => evs
                .iter()
                .filter(|(t, _)| t == "content_block_delta")
                .map(|(_, d)| {
                    let v: Value = serde_json::from_str(d).unwrap();
                    v["delta"]["text"].as_str().unwrap().to_owned()
                })
                .collect(),
            Endpoint::Responses => evs
                .iter()
                .filter(|(t, _)| t == "response.output_text.delta")
                .map(|(_, d)| {
                    let v: Value = serde_json::from_str(d).unwrap();
                    v["delta"].as_str().unwrap().to_owned()
                })
                .collect(),
        };
        assert!(text.contains("no sources"), "{text}");
        assert!(!text.contains('['), "{text}");

        // The same without `web_search` at all, whole.
        merge(&mut req, json!({"web_search": false, "stream": false}));
        let (body, plan) = prepare(endpoint, &req, lisbon(), Placement::UserMessage);
        assert!(plan.is_none());
        let v = whole(&demo::respond(endpoint, &body));
        assert!(!v.to_string().contains("[1]"));
    }
}

#[test]
fn source_text_cannot_forge_markers_or_code() {
    let found = vec![
        Source {
            title: Some("Rust notes".into()),
            url: Some("https://r.example/".into()),
            text: Some("The `borrow checker` rejects [3] dangling references.[12] Other.".into()),
            ..Default::default()
        },
        Source {
            title: Some("Borrowing".into()),
            url: Some("https://b.example/".into()),
            text: Some("```\ncode [1]\n```\nReferences must not outlive the borrow.".into()),
            ..Default::default()
        },
    ];
    let q = "What does the borrow checker reject about references?";
    let (body, plan) = prepare(
        Endpoint::ChatCompletions,
        &chat_request(q, json!({})),
        found,
        Placement::UserMessage,
    );
    let plan = plan.unwrap();
    let r = demo::respond(Endpoint::ChatCompletions, &body);
    let DemoBody::Whole(raw) = &r.body else {
        unreachable!()
    };
    let out: Value =
        serde_json::from_slice(&plan.rewrite_body(raw, &RewriteOptions::new())).unwrap();
    let msg = &out["choices"][0]["message"];
    let content = msg["content"].as_str().unwrap();
    assert_eq!(
        content,
        "The borrow checker rejects dangling references [1]. \
         References must not outlive the borrow [2]."
    );
    let mut numbers = check_annotations(content, &msg["annotations"], &plan.sources);
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers, [1, 2], "{content}");
}

#[test]
fn max_tokens_cuts_the_answer() {
    let (body, _) = prepare(
        Endpoint::ChatCompletions,
        &chat_request(
            LISBON_Q,
            json!({"stream": true, "max_completion_tokens": 3}),
        ),
        lisbon(),
        Placement::UserMessage,
    );
    let evs = parse(events(&demo::respond(Endpoint::ChatCompletions, &body)));
    assert_eq!(evs.len(), 1 + 3 + 1 + 1);
    assert_eq!(chat_contents(&evs, 1)[0], "Saturday:");
    assert!(evs[4].1.contains("\"finish_reason\":\"length\""));

    let (body, _) = prepare(
        Endpoint::Messages,
        &messages_request(LISBON_Q, json!({"max_tokens": 2})),
        lisbon(),
        Placement::UserMessage,
    );
    let v = whole(&demo::respond(Endpoint::Messages, &body));
    assert_eq!(v["stop_reason"], "max_tokens");
    assert_eq!(v["usage"]["output_tokens"], 2);
}

#[test]
fn bad_json_gets_the_endpoint_error_shape() {
    for body in [&b"{not json"[..], b"[1,2]", b"", b"\xff{}"] {
        let r = demo::respond(Endpoint::ChatCompletions, body);
        assert_eq!((r.status, r.content_type), (400, "application/json"));
        let v: Value = serde_json::from_slice(&r.body.to_bytes()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"].as_str().unwrap().len() > 5);

        let r = demo::respond(Endpoint::Messages, body);
        assert_eq!(r.status, 400);
        let v: Value = serde_json::from_slice(&r.body.to_bytes()).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    // Odd but valid JSON objects are answered.
    for body in [&b"{}"[..], br#"{"messages":"x","stream":"yes","n":-1}"#] {
        let v = whole(&demo::respond(Endpoint::ChatCompletions, body));
        assert_eq!(v["choices"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn same_request_same_bytes() {
    let (body, _) = prepare(
        Endpoint::ChatCompletions,
        &chat_request(LISBON_Q, json!({"stream": true})),
        lisbon(),
        Placement::UserMessage,
    );
    let a = demo::respond(Endpoint::ChatCompletions, &body);
    assert_eq!(a, demo::respond(Endpoint::ChatCompletions, &body));
    let (other, _) = prepare(
        Endpoint::ChatCompletions,
        &chat_request("Lisbon weather?", json!({"stream": true})),
        lisbon(),
        Placement::UserMessage,
    );
    let b = demo::respond(Endpoint::ChatCompletions, &other);
    let id = |r: &DemoResponse| {
        let evs = parse(events(r));
        let v: Value = serde_json::from_str(&evs[0].1).unwrap();
        v["id"].as_str().unwrap().to_owned()
    };
    assert!(id(&a).starts_with("chatcmpl-demo-"));
    assert_ne!(id(&a), id(&b));
}

fn responses_request(input: Value, extra: Value) -> Value {
    let mut v = json!({
        "model": "gpt-4.1",
        "web_search": true,
        "instructions": "Be brief.",
        "input": input
    });
    merge(&mut v, extra);
    v
}

/// `/v1/responses`, whole: a `response` object whose one `output_text`
/// part is the cited answer; through the plan's rewriter it gets flat
/// `url_citation` annotations at the markers and top-level `sources`.
#[test]
fn responses_whole_answer_is_cited() {
    for input in [
        json!(LISBON_Q),
        json!([{"role": "user", "content": LISBON_Q}]),
        json!([{"role": "user", "content": [{"type": "input_text", "text": LISBON_Q}]}]),
    ] {
        let req = responses_request(input.clone(), json!({}));
        let (body, plan) = prepare(Endpoint::Responses, &req, lisbon(), Placement::UserMessage);
        let plan = plan.expect("sources were injected");
        let r = demo::respond(Endpoint::Responses, &body);
        let v = whole(&r);
        assert_eq!(v["object"], "response");
        assert_eq!(v["model"], "citestream-demo");
        assert_eq!(v["status"], "completed");
        let part = &v["output"][0]["content"][0];
        assert_eq!(part["type"], "output_text");
        assert_eq!(part["text"].as_str(), Some(LISBON_ANSWER), "{input}");
        let DemoBody::Whole(raw) = &r.body else {
            unreachable!()
        };
        let out: Value =
            serde_json::from_slice(&plan.rewrite_body(raw, &RewriteOptions::new())).unwrap();
        let ann = out["output"][0]["content"][0]["annotations"]
            .as_array()
            .unwrap();
        assert_eq!(ann.len(), 2);
        let chars: Vec<char> = LISBON_ANSWER.chars().collect();
        for a in ann {
            assert_eq!(a["type"], "url_citation");
            let (s, e) = (
                a["start_index"].as_u64().unwrap(),
                a["end_index"].as_u64().unwrap(),
            );
            let marker: String = chars[s as usize..e as usize].iter().collect();
            assert!(marker == "[1]" || marker == "[2]", "{marker}");
        }
        assert_eq!(out["sources"].as_array().unwrap().len(), lisbon().len());
        check_responses_usage(&v["usage"]);
    }
}

/// A Responses `usage` object has every member the openai SDK's
/// `ResponseUsage` requires (`input_tokens_details.cache_write_tokens`
/// too, as api.openai.com sends it), integers that add up.
fn check_responses_usage(u: &Value) {
    let int = |v: &Value| {
        v.as_u64()
            .unwrap_or_else(|| panic!("not an integer: {v} in {u}"))
    };
    let (input, output) = (int(&u["input_tokens"]), int(&u["output_tokens"]));
    assert!(input > 0 && output > 0, "{u}");
    assert_eq!(int(&u["total_tokens"]), input + output, "{u}");
    int(&u["input_tokens_details"]["cached_tokens"]);
    int(&u["input_tokens_details"]["cache_write_tokens"]);
    int(&u["output_tokens_details"]["reasoning_tokens"]);
}

/// `/v1/responses`, streamed: the real event sequence with consecutive
/// sequence numbers; the deltas concatenate to the answer; through the
/// plan's rewriter the annotation events come before `output_text.done`.
#[test]
fn responses_stream_has_the_real_event_sequence() {
    let req = responses_request(json!(LISBON_Q), json!({"stream": true}));
    let (body, plan) = prepare(Endpoint::Responses, &req, lisbon(), Placement::UserMessage);
    let plan = plan.expect("sources were injected");
    let reads = events(&demo::respond(Endpoint::Responses, &body)).to_vec();
    let evs = parse(&reads);
    let types: Vec<&str> = evs.iter().map(|(t, _)| t.as_str()).collect();
    let deltas = types
        .iter()
        .filter(|t| **t == "response.output_text.delta")
        .count();
    assert!(deltas > 5);
    let mut want = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    want.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    want.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(types, want);
    let mut text = String::new();
    for (k, (t, d)) in evs.iter().enumerate() {
        let v: Value = serde_json::from_str(d).unwrap();
        assert_eq!(v["type"].as_str(), Some(t.as_str()));
        assert_eq!(v["sequence_number"].as_u64(), Some(k as u64));
        if t == "response.output_text.delta" {
            text.push_str(v["delta"].as_str().unwrap());
        }
    }
    assert_eq!(text, LISBON_ANSWER);

    let joined = Bytes::from(rewrite_stream(&plan, &reads).concat());
    let evs = parse_joined(&joined);
    let types: Vec<&str> = evs.iter().map(|(t, _)| t.as_str()).collect();
    let done = types
        .iter()
        .position(|t| *t == "response.output_text.done")
        .unwrap();
    assert_eq!(
        &types[done - 2..done],
        ["response.output_text.annotation.added"; 2]
    );
    for (k, (_, d)) in evs.iter().enumerate() {
        let v: Value = serde_json::from_str(d).unwrap();
        assert_eq!(v["sequence_number"].as_u64(), Some(k as u64));
    }
    let last: Value = serde_json::from_str(&evs.last().unwrap().1).unwrap();
    assert_eq!(
        last["response"]["sources"].as_array().unwrap().len(),
        lisbon().len()
    );
    let ann = &last["response"]["output"][0]["content"][0]["annotations"];
    assert_eq!(ann.as_array().unwrap().len(), 2);
    check_responses_usage(&last["response"]["usage"]);
}

/// (event type, data) of every event in one buffer.
fn parse_joined(b: &Bytes) -> Vec<(String, String)> {
    let mut p = Parser::new();
    p.feed(b.clone());
    let mut out = Vec::new();
    while let Some(f) = p.next_frame() {
        if let Frame::Event(e) = f {
            out.push((
                String::from_utf8_lossy(e.event_type()).into_owned(),
                String::from_utf8_lossy(e.data()).into_owned(),
            ));
        }
    }
    out
}

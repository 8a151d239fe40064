//! Thin tests of the session: the host's exchange driven with the
//! messages Envoy sends (no Envoy, no sockets). The exchange's own cases
//! are in crates/host/tests/exchange.rs; the end-to-end tests with a real
//! Envoy are in tests/e2e/test_envoy_*.py.

use std::sync::Arc;

use bytes::Bytes;
use citestream::flow::ResponsePlan;
use citestream::request::Endpoint;
use citestream::{RewriteOptions, Sources, StreamRewriter};
use citestream_host::config::Config;
use citestream_host::grounding::Grounding;

use crate::exchange::Session;
use crate::pb::{
    BodyResponse, CommonResponse, HttpBody, ProcessingRequest, ProcessingResponse,
    ProtocolConfiguration, body_mutation::Mutation, processing_request::Request,
    processing_response::Response,
};
use crate::response::BodyMode;

const STREAM: &[u8] =
    include_bytes!("../../../tests/fixtures/upstream/openai_gpt4o_text_usage_chunk.sse");
const MESSAGES: &[u8] = include_bytes!("../../../tests/fixtures/upstream/anthropic_basic_ping.sse");
const SOURCES: &str = r#"[{"title":"Lisbon","url":"https://en.wikipedia.org/wiki/Lisbon","text":"Lisbon is the capital of Portugal."},{"title":"Two","url":"https://two.example/","text":"Second."}]"#;

fn sources() -> Arc<Sources> {
    Arc::new(Sources::from_json(SOURCES.as_bytes()).unwrap())
}

fn plan(endpoint: Endpoint) -> ResponsePlan {
    ResponsePlan {
        endpoint,
        sources: sources(),
        n: 1,
        stream: true,
        include_usage: false,
    }
}

/// What `citestream rewrite` prints: the whole stream in one piece.
fn expected(endpoint: Endpoint, input: &[u8]) -> Vec<u8> {
    let mut rw = plan(endpoint).stream_rewriter(&RewriteOptions::new());
    rw.feed(bytes::Bytes::copy_from_slice(input));
    rw.finish();
    let mut out = Vec::new();
    rw.drain_into(&mut out);
    out
}

fn common(r: &ProcessingResponse) -> Option<&CommonResponse> {
    match r.response.as_ref()? {
        Response::RequestHeaders(h) | Response::ResponseHeaders(h) => h.response.as_ref(),
        Response::RequestBody(BodyResponse { response })
        | Response::ResponseBody(BodyResponse { response }) => response.as_ref(),
        _ => None,
    }
}

/// The body bytes Envoy forwards for one piece, given the answer.
fn forwarded(piece: &[u8], r: &ProcessingResponse) -> (Vec<u8>, bool) {
    match common(r).and_then(|c| c.body_mutation.as_ref()?.mutation.as_ref()) {
        None => (piece.to_vec(), false),
        Some(Mutation::Body(b)) => (b.to_vec(), false),
        Some(Mutation::ClearBody(_)) => (Vec::new(), false),
        Some(Mutation::StreamedResponse(s)) => (s.body.to_vec(), s.end_of_stream),
    }
}

/// Feeds `input` in pieces of the given sizes (cycled) as response body
/// messages and returns the bytes Envoy would forward, and how many
/// answers were sent.
async fn run(ex: &mut Session, mode: BodyMode, input: &[u8], sizes: &[usize]) -> (Vec<u8>, usize) {
    let (mut out, mut answers, mut at, mut i) = (Vec::new(), 0, 0, 0);
    let mut ended = false;
    while at < input.len() {
        let n = sizes[i % sizes.len()].min(input.len() - at);
        let piece = &input[at..at + n];
        at += n;
        i += 1;
        let end = at == input.len();
        let b = HttpBody {
            body: Bytes::copy_from_slice(piece),
            end_of_stream: end,
        };
        let mut got = Vec::new();
        ex.handle(msg(Request::ResponseBody(b), None), &mut got)
            .await;
        if mode == BodyMode::Streamed {
            assert_eq!(got.len(), 1, "STREAMED: every piece is answered once");
        }
        for a in got {
            answers += 1;
            let (b, eos) = forwarded(piece, &a);
            assert!(!ended, "nothing after end_of_stream");
            ended = eos;
            out.extend_from_slice(&b);
        }
    }
    if mode == BodyMode::FullDuplex {
        assert!(ended, "FULL_DUPLEX: the last answer carries end_of_stream");
    }
    (out, answers)
}

const CHUNKINGS: [&[usize]; 5] = [&[1], &[7, 1, 300], &[64], &[1460], &[1 << 20]];

/// A session whose request was grounded (`web_search` on `endpoint`) and
/// whose upstream answered 200 with `content_type`.
async fn answered(
    g: &Arc<Grounding>,
    mode: BodyMode,
    endpoint: Endpoint,
    web_search: bool,
    content_type: &str,
) -> Session {
    let mut ex = Session::new(g.clone());
    let h = headers(&[(":method", "POST"), (":path", endpoint.path())], false);
    one(&mut ex, msg(Request::RequestHeaders(h), Some(mode))).await;
    let body = format!(
        r#"{{"model":"m","max_tokens":9,"stream":true,"web_search":{web_search},"messages":[{{"role":"user","content":"Capital?"}}]}}"#
    );
    let b = HttpBody {
        body: body.into(),
        end_of_stream: true,
    };
    one(&mut ex, msg(Request::RequestBody(b), None)).await;
    let h = headers(&[(":status", "200"), ("content-type", content_type)], false);
    one(&mut ex, msg(Request::ResponseHeaders(h), None)).await;
    ex
}

#[tokio::test]
async fn stream_equals_rewrite_output_in_both_modes_under_any_chunking() {
    let g = grounding("").await;
    for (endpoint, input) in [
        (Endpoint::ChatCompletions, STREAM),
        (Endpoint::Messages, MESSAGES),
    ] {
        let want = expected(endpoint, input);
        assert_ne!(want, input, "the fixture gets additions");
        for mode in [BodyMode::Streamed, BodyMode::FullDuplex] {
            for sizes in CHUNKINGS {
                let mut ex = answered(&g, mode, endpoint, true, "text/event-stream").await;
                let (got, _) = run(&mut ex, mode, input, sizes).await;
                assert_eq!(got, want, "{endpoint:?} {mode:?} {sizes:?}");
            }
        }
    }
}

#[tokio::test]
async fn whole_json_body_is_held_then_rewritten() {
    let g = grounding("").await;
    let input = br#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Lisbon [1]."},"finish_reason":"stop"}]}"#;
    let want = plan(Endpoint::ChatCompletions)
        .rewrite_body(input, &RewriteOptions::new())
        .into_owned();
    assert!(want.windows(9).any(|w| w == b"\"sources\""));
    for mode in [BodyMode::Streamed, BodyMode::FullDuplex] {
        for sizes in CHUNKINGS {
            let ct = "application/json";
            let mut ex = answered(&g, mode, Endpoint::ChatCompletions, true, ct).await;
            let (got, _) = run(&mut ex, mode, input, sizes).await;
            assert_eq!(got, want, "{mode:?} {sizes:?}");
        }
    }
}

#[tokio::test]
async fn whole_body_over_the_cap_passes_through() {
    let g = grounding("[rewrite]\nmax_whole_body = \"100B\"\n").await;
    for mode in [BodyMode::Streamed, BodyMode::FullDuplex] {
        let ct = "application/json";
        let mut ex = answered(&g, mode, Endpoint::ChatCompletions, true, ct).await;
        let (got, _) = run(&mut ex, mode, STREAM, &[64]).await;
        assert_eq!(got, STREAM, "{mode:?}");
    }
}

#[tokio::test]
async fn pass_keeps_every_piece() {
    let g = grounding("").await;
    for mode in [BodyMode::Streamed, BodyMode::FullDuplex] {
        let ct = "text/event-stream";
        let mut ex = answered(&g, mode, Endpoint::ChatCompletions, false, ct).await;
        let (got, answers) = run(&mut ex, mode, STREAM, &[100]).await;
        assert_eq!(got, STREAM);
        assert_eq!(answers, STREAM.len().div_ceil(100));
    }
}

use crate::http_headers as headers;

fn msg(r: Request, first: Option<BodyMode>) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(r),
        protocol_config: first.map(|m| ProtocolConfiguration {
            request_body_mode: 2,
            response_body_mode: if m == BodyMode::FullDuplex { 4 } else { 1 },
            send_body_without_waiting_for_header_response: false,
        }),
        ..Default::default()
    }
}

async fn grounding(extra: &str) -> Arc<Grounding> {
    let dir = std::env::temp_dir().join(format!("citestream-ext-proc-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sources.json");
    std::fs::write(&path, SOURCES).unwrap();
    let toml = format!(
        "[search]\nprovider = \"static\"\n[search.static]\npath = {:?}\n{extra}",
        path.display().to_string()
    );
    let cfg = Config::from_toml_with_env(&toml, &|_| None).unwrap();
    Arc::new(Grounding::new(&cfg).await.unwrap())
}

async fn one(ex: &mut Session, m: ProcessingRequest) -> ProcessingResponse {
    let mut out = Vec::new();
    ex.handle(m, &mut out).await;
    assert_eq!(out.len(), 1, "{out:?}");
    out.remove(0)
}

fn set_headers(r: &ProcessingResponse) -> Vec<(String, String)> {
    common(r)
        .and_then(|c| c.header_mutation.as_ref())
        .map(|m| {
            m.set_headers
                .iter()
                .filter_map(|h| h.header.as_ref())
                .map(|h| {
                    (
                        h.key.clone(),
                        String::from_utf8_lossy(&h.raw_value).into_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn grounded_stream_through_the_whole_exchange() {
    let g = grounding("").await;
    for mode in [BodyMode::Streamed, BodyMode::FullDuplex] {
        let mut ex = Session::new(g.clone());
        let h = headers(
            &[(":method", "POST"), (":path", "/v1/chat/completions?x=1")],
            false,
        );
        let r = one(&mut ex, msg(Request::RequestHeaders(h), Some(mode))).await;
        assert!(matches!(r.response, Some(Response::RequestHeaders(_))));
        let body = br#"{"model":"m","stream":true,"web_search":true,"messages":[{"role":"user","content":"Capital?"}]}"#;
        let r = one(
            &mut ex,
            msg(
                Request::RequestBody(HttpBody {
                    body: Bytes::from_static(body),
                    end_of_stream: true,
                }),
                None,
            ),
        )
        .await;
        let (sent, _) = forwarded(body, &r);
        assert!(!sent.windows(12).any(|w| w == b"\"web_search\""));
        assert!(
            sent.windows(31)
                .any(|w| w == b"https://en.wikipedia.org/wiki/L")
        );
        let set = set_headers(&r);
        assert!(set.contains(&("content-length".into(), sent.len().to_string())));
        assert!(set.contains(&("accept-encoding".into(), "identity".into())));
        let h = headers(
            &[
                (":status", "200"),
                ("content-type", "text/event-stream"),
                ("content-length", "9"),
            ],
            false,
        );
        let r = one(&mut ex, msg(Request::ResponseHeaders(h), None)).await;
        let set = set_headers(&r);
        assert!(set.contains(&("x-citestream-search".into(), "injected".into())));
        assert!(
            set.iter()
                .any(|(k, _)| k == "x-citestream-searches-remaining")
        );
        let removed = &common(&r)
            .unwrap()
            .header_mutation
            .as_ref()
            .unwrap()
            .remove_headers;
        assert!(removed.contains(&"content-length".to_owned()));
        let mut got = Vec::new();
        for (i, piece) in STREAM.chunks(97).enumerate() {
            let end = (i + 1) * 97 >= STREAM.len();
            let b = HttpBody {
                body: Bytes::copy_from_slice(piece),
                end_of_stream: end,
            };
            let mut out = Vec::new();
            ex.handle(msg(Request::ResponseBody(b), None), &mut out)
                .await;
            for a in &out {
                got.extend(forwarded(piece, a).0);
            }
        }
        assert_eq!(got, expected(Endpoint::ChatCompletions, STREAM), "{mode:?}");
    }
}

#[tokio::test]
async fn bad_body_is_an_immediate_400_and_other_paths_pass() {
    let g = grounding("").await;
    let mut ex = Session::new(g.clone());
    let h = headers(&[(":method", "POST"), (":path", "/v1/messages")], false);
    one(
        &mut ex,
        msg(Request::RequestHeaders(h), Some(BodyMode::Streamed)),
    )
    .await;
    let body = Bytes::from_static(br#"{"model":"m","web_search":"yes","messages":[]}"#);
    let r = one(
        &mut ex,
        msg(
            Request::RequestBody(HttpBody {
                body,
                end_of_stream: true,
            }),
            None,
        ),
    )
    .await;
    let Some(Response::ImmediateResponse(ir)) = r.response else {
        panic!("{r:?}")
    };
    assert_eq!(ir.status.unwrap().code, 400);
    let err: serde_json::Value = serde_json::from_slice(&ir.body).unwrap();
    assert_eq!(err["type"], "error");

    let mut ex = Session::new(g);
    let h = headers(&[(":method", "GET"), (":path", "/v1/models")], true);
    let r = one(
        &mut ex,
        msg(Request::RequestHeaders(h), Some(BodyMode::Streamed)),
    )
    .await;
    assert!(r.mode_override.is_some());
    let r = one(
        &mut ex,
        msg(
            Request::ResponseHeaders(headers(&[(":status", "200")], false)),
            None,
        ),
    )
    .await;
    let set = set_headers(&r);
    assert!(
        set.iter().all(|(k, _)| !k.starts_with("x-citestream")),
        "{set:?}"
    );
    assert!(set.iter().any(|(k, _)| k == "x-request-id"), "{set:?}");
}

#[tokio::test]
async fn keys_mode_refuses_a_missing_key_at_the_headers() {
    let g = grounding(
        "[auth]\nmode = \"keys\"\n[[accounts]]\nid = \"a\"\nplan = \"default\"\nkeys = [\"sha256:0000000000000000000000000000000000000000000000000000000000000000\"]\n",
    )
    .await;
    let mut ex = Session::new(g);
    let h = headers(
        &[(":method", "POST"), (":path", "/v1/chat/completions")],
        false,
    );
    let r = one(
        &mut ex,
        msg(Request::RequestHeaders(h), Some(BodyMode::FullDuplex)),
    )
    .await;
    let Some(Response::ImmediateResponse(ir)) = r.response else {
        panic!("{r:?}")
    };
    assert_eq!(ir.status.unwrap().code, 401);
    let err: serde_json::Value = serde_json::from_slice(&ir.body).unwrap();
    assert_eq!(err["error"]["code"], "invalid_api_key");
}

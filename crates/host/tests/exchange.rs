//! The exchange driven sans-IO through every case a host meets: grounded,
//! proxied and not-ours requests; 2xx, 4xx and 5xx answers; SSE, JSON and
//! other bodies; gzip, deflate and unknown codings; the hold cap; upstream
//! failures; a client leaving before the headers; the key rules in every
//! mode (the headers the upstream would see); and the quota, checked on
//! the store after each case. The hosts' own tests only check their
//! plumbing around it.

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use citestream::quota::{ManualClock, QuotaStore, Usage, utc_day};
use citestream::request::Endpoint;
use citestream::{RewriteOptions, Rewriter, Sources, StreamRewriter};
use citestream_host::config::Config;
use citestream_host::exchange::{
    BodyPlan, Exchange, FailureClass, Handling, RequestHead, key_warning,
};
use citestream_host::grounding::Grounding;
use http::{HeaderMap, HeaderValue, Method};

const NOW: u64 = 1_796_083_200 + 3600; // 2026-12-01T01:00:00Z
const CHAT_SSE: &[u8] =
    include_bytes!("../../../tests/fixtures/upstream/openai_gpt4o_text_usage_chunk.sse");
const MESSAGES_SSE: &[u8] =
    include_bytes!("../../../tests/fixtures/upstream/anthropic_basic_ping.sse");
const CHAT_JSON: &[u8] = include_bytes!("../../../examples/lisbon/upstream.json");
const SOURCES: &[u8] = include_bytes!("../../../examples/lisbon/sources.json");
const KEY: &str = "sk-gateway-key";

fn sources_path() -> String {
    let dir = std::env::temp_dir().join(format!("citestream-exchange-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("sources.json");
    std::fs::write(&p, SOURCES).unwrap();
    p.display().to_string()
}

async fn grounding(extra: &str) -> Arc<Grounding> {
    let toml = format!(
        "[search]\nprovider = \"static\"\n[search.static]\npath = {:?}\n[plans.default]\nsearches_per_day = 1000\n{extra}",
        sources_path()
    );
    let cfg = Config::from_toml_with_env(&toml, &|_| None).unwrap();
    Arc::new(
        Grounding::with_clock(&cfg, Arc::new(ManualClock::new(NOW)))
            .await
            .unwrap(),
    )
}

async fn usage(g: &Grounding, account: &str) -> Usage {
    g.store().usage(account, utc_day(NOW)).await.unwrap()
}

fn used(committed: u32, reserved: u32) -> Usage {
    Usage {
        committed,
        reserved,
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn exchange(g: &Arc<Grounding>, method: Method, path: &str, h: &[(&str, &str)]) -> Exchange {
    Exchange::new(g.clone(), RequestHead::new(method, path, headers(h)))
}

fn body(endpoint: Endpoint, web_search: bool, stream: bool) -> Bytes {
    let extra = if endpoint == Endpoint::Messages {
        r#""max_tokens":50,"#
    } else {
        ""
    };
    Bytes::from(format!(
        r#"{{"model":"m",{extra}"stream":{stream},"web_search":{web_search},"messages":[{{"role":"user","content":"Weather in Lisbon?"}}]}}"#
    ))
}

/// A grounded exchange after its request went upstream.
async fn forwarded(g: &Arc<Grounding>, endpoint: Endpoint, search: bool, stream: bool) -> Exchange {
    let mut ex = exchange(g, Method::POST, endpoint.path(), &[]);
    assert_eq!(ex.handling(), Handling::Grounded(endpoint));
    let f = ex
        .on_request(Some(body(endpoint, search, stream)))
        .await
        .unwrap();
    let b = f.body.unwrap();
    assert!(!b.windows(12).any(|w| w == b"\"web_search\""));
    assert_eq!(f.edits.get("content-length").unwrap(), &b.len().to_string());
    assert_eq!(
        f.edits.get("accept-encoding").map(|v| v.to_str().unwrap()),
        search.then_some("identity")
    );
    ex
}

/// Splits `input` into pieces: every size in `sizes` in turn.
fn pieces(input: &[u8], sizes: &[usize]) -> Vec<Bytes> {
    let (mut out, mut at, mut i) = (Vec::new(), 0, 0);
    while at < input.len() {
        let n = sizes[i % sizes.len()].clamp(1, input.len() - at);
        out.push(Bytes::copy_from_slice(&input[at..at + n]));
        at += n;
        i += 1;
    }
    out
}

/// Pseudo-random piece sizes (1..=max), from `seed`.
fn random_sizes(seed: u64, max: usize) -> Vec<usize> {
    let mut x = seed | 1;
    (0..64)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as usize % max) + 1
        })
        .collect()
}

/// Feeds the pieces (the last with `end`) and collects the output. Both
/// per-piece calls are used, in turn: `on_response_piece` (serve's) for
/// the even pieces, `on_response_body` (ext-proc's) for the odd ones and
/// the last.
fn drive(ex: &mut Exchange, pieces: &[Bytes]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        let end = i + 1 == pieces.len();
        if i % 2 == 0 && !end {
            if let Some(b) = ex.on_response_piece(p.clone()).unwrap() {
                out.extend_from_slice(&b);
            }
        } else {
            ex.on_response_body(p.clone(), end);
        }
        while let Some(b) = ex.next_output().unwrap() {
            out.extend_from_slice(&b);
        }
    }
    if pieces.is_empty() {
        ex.on_response_body(Bytes::new(), true);
        while let Some(b) = ex.next_output().unwrap() {
            out.extend_from_slice(&b);
        }
    }
    out
}

fn lisbon_sources() -> Arc<Sources> {
    Arc::new(Sources::from_json(SOURCES).unwrap())
}

fn stream_rewritten(endpoint: Endpoint, input: &[u8]) -> Vec<u8> {
    let mut rw = Rewriter::new(endpoint, lisbon_sources(), RewriteOptions::new());
    rw.feed(Bytes::copy_from_slice(input));
    rw.finish();
    let mut out = Vec::new();
    rw.drain_into(&mut out);
    out
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn deflate(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

const SSE: (&str, &str) = ("content-type", "text/event-stream");
const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn handling_by_method_and_path() {
    let g = grounding("").await;
    let cases = [
        (
            Method::POST,
            "/v1/chat/completions",
            Handling::Grounded(Endpoint::ChatCompletions),
        ),
        (
            Method::POST,
            "/v1/chat/completions?x=1",
            Handling::Grounded(Endpoint::ChatCompletions),
        ),
        (
            Method::POST,
            "/v1/messages",
            Handling::Grounded(Endpoint::Messages),
        ),
        (Method::GET, "/v1/chat/completions", Handling::Proxied),
        (Method::POST, "/v1/messages/count_tokens", Handling::Proxied),
        (Method::GET, "/v1/models", Handling::Proxied),
        (Method::POST, "/v2/chat/completions", Handling::NotOurs),
        (Method::GET, "/healthz", Handling::NotOurs),
    ];
    for (m, p, want) in cases {
        assert_eq!(exchange(&g, m, p, &[]).handling(), want, "{p}");
    }
    let mut ex = exchange(&g, Method::POST, "/v2/x", &[]);
    let r = ex.not_found();
    assert_eq!(r.status, 404);
    assert_eq!(r.headers.get("content-type").unwrap(), "application/json");
}

#[tokio::test]
async fn sse_is_rewritten_under_any_chunking_and_the_search_committed_on_2xx() {
    let g = grounding("").await;
    let mut committed = 0;
    for (endpoint, input) in [
        (Endpoint::ChatCompletions, CHAT_SSE),
        (Endpoint::Messages, MESSAGES_SSE),
    ] {
        let want = stream_rewritten(endpoint, input);
        assert_ne!(&want[..], input);
        let mut chunkings: Vec<Vec<usize>> = vec![vec![1], vec![7, 1, 300], vec![input.len()]];
        chunkings.extend((1..6).map(|s| random_sizes(s, 200)));
        for sizes in chunkings {
            let mut ex = forwarded(&g, endpoint, true, true).await;
            assert_eq!(
                usage(&g, "anonymous").await,
                used(committed, 1),
                "reserved meanwhile"
            );
            let head = ex
                .on_response_headers(200, &headers(&[SSE, ("content-length", "9")]))
                .await;
            committed += 1;
            assert_eq!(usage(&g, "anonymous").await, used(committed, 0));
            assert_eq!(head.body, BodyPlan::Stream);
            let e = &head.edits;
            assert_eq!(e.get("x-citestream-search").unwrap(), "injected");
            assert_eq!(
                e.get("x-citestream-searches-remaining").unwrap(),
                &(1000 - committed).to_string()
            );
            assert_eq!(e.get("cache-control").unwrap(), "no-cache");
            assert_eq!(e.get("x-accel-buffering").unwrap(), "no");
            assert!(e.removes("content-length"));
            let got = drive(&mut ex, &pieces(input, &sizes));
            assert!(got == want, "{endpoint:?} {sizes:?}");
        }
    }
    let m = g.metrics().render();
    assert!(
        m.contains(
            "citestream_requests_total{endpoint=\"chat\",search=\"injected\",status=\"200\"} 8\n"
        ),
        "{m}"
    );
    assert!(
        m.contains("citestream_upstream_responses_total{endpoint=\"messages\",class=\"2xx\"} 8\n")
    );
}

#[tokio::test]
async fn unchanged_stream_pieces_are_the_input_itself() {
    let g = grounding("").await;
    let mut ex = forwarded(&g, Endpoint::ChatCompletions, false, true).await;
    let head = ex.on_response_headers(200, &headers(&[SSE])).await;
    assert_eq!(head.body, BodyPlan::Pass);
    let piece = Bytes::copy_from_slice(CHAT_SSE);
    ex.on_response_body(piece.clone(), true);
    let out = ex.next_output().unwrap().unwrap();
    assert_eq!(out.as_ptr(), piece.as_ptr(), "no copy");
    assert!(ex.next_output().unwrap().is_none());
}

/// Every piece through `on_response_piece` (serve's path), the end as
/// an empty last piece.
fn drive_per_piece(ex: &mut Exchange, pieces: &[Bytes]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        if let Some(b) = ex.on_response_piece(p.clone()).unwrap() {
            out.extend_from_slice(&b);
        }
        while let Some(b) = ex.next_output().unwrap() {
            out.extend_from_slice(&b);
        }
    }
    ex.on_response_body(Bytes::new(), true);
    while let Some(b) = ex.next_output().unwrap() {
        out.extend_from_slice(&b);
    }
    out
}

#[tokio::test]
async fn the_per_piece_call_gives_the_same_bytes_and_passes_pieces_as_they_are() {
    let g = grounding("").await;
    let want = stream_rewritten(Endpoint::ChatCompletions, CHAT_SSE);
    for sizes in [vec![1], vec![7, 1, 300], random_sizes(11, 200)] {
        let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, true).await;
        let head = ex.on_response_headers(200, &headers(&[SSE])).await;
        assert_eq!(head.body, BodyPlan::Stream);
        let got = drive_per_piece(&mut ex, &pieces(CHAT_SSE, &sizes));
        assert!(got == want, "{sizes:?}");
    }
    // Passed: each piece handed back as it is (the same bytes, no copy),
    // nothing more to take between pieces, and the bytes counted.
    let mut ex = forwarded(&g, Endpoint::ChatCompletions, false, true).await;
    let head = ex.on_response_headers(200, &headers(&[SSE])).await;
    assert_eq!(head.body, BodyPlan::Pass);
    for p in pieces(CHAT_SSE, &[100]) {
        let out = ex.on_response_piece(p.clone()).unwrap().unwrap();
        assert_eq!(out.as_ptr(), p.as_ptr(), "no copy");
        assert_eq!(out.len(), p.len());
        assert!(ex.next_output().unwrap().is_none());
    }
    assert!(ex.on_response_piece(Bytes::new()).unwrap().is_none());
    ex.on_response_body(Bytes::new(), true);
    assert!(ex.next_output().unwrap().is_none());
}

#[tokio::test]
async fn whole_bodies_by_content_type() {
    let g = grounding("").await;
    let want = citestream::rewrite::rewrite_body(
        Endpoint::ChatCompletions,
        CHAT_JSON,
        &lisbon_sources(),
        &RewriteOptions::new(),
    )
    .into_owned();
    assert_ne!(&want[..], CHAT_JSON);
    // A JSON type, a `+json` one, or none: held and rewritten; another
    // type: passed.
    for (ct, rewritten) in [
        (Some("application/json; charset=utf-8"), true),
        (Some("application/vnd.x+json"), true),
        (None, true),
        (Some("text/plain"), false),
    ] {
        for sizes in [vec![1], vec![CHAT_JSON.len()], random_sizes(9, 100)] {
            let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, false).await;
            let mut h = headers(&[("content-length", &CHAT_JSON.len().to_string())]);
            if let Some(ct) = ct {
                h.insert("content-type", ct.parse().unwrap());
            }
            let head = ex.on_response_headers(200, &h).await;
            assert_eq!(head.body == BodyPlan::Whole, rewritten, "{ct:?}");
            assert_eq!(head.edits.removes("content-length"), rewritten);
            assert!(head.edits.get("cache-control").is_none());
            let got = drive(&mut ex, &pieces(CHAT_JSON, &sizes));
            if rewritten {
                assert!(got == want, "{ct:?} {sizes:?}");
            } else {
                assert!(got == CHAT_JSON);
            }
        }
    }
}

#[tokio::test]
async fn error_statuses_pass_and_give_the_search_back() {
    let g = grounding("").await;
    for (status, class) in [(400, "4xx"), (429, "4xx"), (500, "5xx"), (503, "5xx")] {
        let mut ex = forwarded(&g, Endpoint::Messages, true, true).await;
        assert_eq!(usage(&g, "anonymous").await, used(0, 1));
        let err = br#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#;
        let head = ex
            .on_response_headers(status, &headers(&[JSON, ("content-length", "66")]))
            .await;
        assert_eq!(
            usage(&g, "anonymous").await,
            used(0, 0),
            "{status}: released"
        );
        assert_eq!(head.body, BodyPlan::Pass);
        assert!(!head.edits.removes("content-length"));
        assert_eq!(head.edits.get("x-citestream-search").unwrap(), "injected");
        // The header counts the search given back.
        assert_eq!(
            head.edits.get("x-citestream-searches-remaining").unwrap(),
            "1000"
        );
        assert_eq!(drive(&mut ex, &pieces(err, &[10])), err);
        drop(ex);
        let m = g.metrics().render();
        let line = format!(
            "citestream_requests_total{{endpoint=\"messages\",search=\"injected\",status=\"{status}\"}} 1\n"
        );
        assert!(m.contains(&line), "{line} {m}");
        assert!(m.contains(&format!(
            "citestream_upstream_responses_total{{endpoint=\"messages\",class=\"{class}\"}}"
        )));
    }
}

#[tokio::test]
async fn gzip_and_deflate_are_inflated_other_codings_pass() {
    let g = grounding("").await;
    let want = stream_rewritten(Endpoint::ChatCompletions, CHAT_SSE);
    for (coding, z) in [("gzip", gzip(CHAT_SSE)), ("deflate", deflate(CHAT_SSE))] {
        for sizes in [vec![1], vec![z.len()], random_sizes(3, 64)] {
            let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, true).await;
            let h = headers(&[SSE, ("content-encoding", coding), ("content-length", "1")]);
            let head = ex.on_response_headers(200, &h).await;
            assert_eq!(head.body, BodyPlan::Stream);
            assert!(head.edits.removes("content-encoding"));
            assert!(head.edits.removes("content-length"));
            let got = drive(&mut ex, &pieces(&z, &sizes));
            assert!(got == want, "{coding} {sizes:?}");
        }
    }
    // A whole gzip body too.
    let want_whole = citestream::rewrite::rewrite_body(
        Endpoint::ChatCompletions,
        CHAT_JSON,
        &lisbon_sources(),
        &RewriteOptions::new(),
    )
    .into_owned();
    let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, false).await;
    let head = ex
        .on_response_headers(200, &headers(&[JSON, ("content-encoding", "gzip")]))
        .await;
    assert_eq!(head.body, BodyPlan::Whole);
    assert!(drive(&mut ex, &pieces(&gzip(CHAT_JSON), &[100])) == want_whole);
    // br, zstd, stacked codings: untouched, and a header says why.
    for coding in ["br", "zstd", "gzip, gzip"] {
        let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, true).await;
        let h = headers(&[SSE, ("content-encoding", coding)]);
        let head = ex.on_response_headers(200, &h).await;
        assert_eq!(head.body, BodyPlan::Pass);
        assert_eq!(
            head.edits.get("x-citestream-rewrite").unwrap(),
            "skipped-content-encoding"
        );
        assert!(!head.edits.removes("content-encoding"));
        let opaque = b"\x28\xb5\x2f\xfd opaque";
        assert_eq!(drive(&mut ex, &pieces(opaque, &[3])), opaque);
    }
    // Garbage that claims to be gzip: an error, never wrong bytes.
    let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, true).await;
    ex.on_response_headers(200, &headers(&[SSE, ("content-encoding", "gzip")]))
        .await;
    ex.on_response_body(Bytes::from_static(b"not gzip at all, not at all"), true);
    let mut r = ex.next_output();
    while let Ok(Some(_)) = r {
        r = ex.next_output();
    }
    assert!(r.is_err());
}

#[tokio::test]
async fn a_whole_body_over_the_cap_passes_unchanged() {
    let g = grounding("[rewrite]\nmax_whole_body = \"100B\"\n").await;
    // Declared too large: never held.
    let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, false).await;
    let cl = CHAT_JSON.len().to_string();
    let head = ex
        .on_response_headers(200, &headers(&[JSON, ("content-length", &cl)]))
        .await;
    assert_eq!(head.body, BodyPlan::Pass);
    assert!(!head.edits.removes("content-length"));
    assert!(drive(&mut ex, &pieces(CHAT_JSON, &[64])) == CHAT_JSON);
    // Undeclared: held up to the cap, then what was held and the rest pass.
    for sizes in [vec![1], vec![64], vec![CHAT_JSON.len()]] {
        let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, false).await;
        let head = ex.on_response_headers(200, &headers(&[JSON])).await;
        assert_eq!(head.body, BodyPlan::Whole);
        assert!(
            drive(&mut ex, &pieces(CHAT_JSON, &sizes)) == CHAT_JSON,
            "{sizes:?}"
        );
    }
    // The search still counted: the upstream answered 200.
    assert_eq!(usage(&g, "anonymous").await, used(4, 0));
}

#[tokio::test]
async fn upstream_failures_are_502_or_504_naming_the_class_only() {
    let g = grounding("").await;
    let detail = "error trying to connect: tcp connect error: Connection refused (os error 111) at /secret/path";
    for (class, status, endpoint) in [
        (FailureClass::Refused, 502, Endpoint::ChatCompletions),
        (FailureClass::Tls, 502, Endpoint::Messages),
        (FailureClass::Timeout, 504, Endpoint::Messages),
        (FailureClass::Broken, 502, Endpoint::ChatCompletions),
    ] {
        let mut ex = forwarded(&g, endpoint, true, true).await;
        assert_eq!(usage(&g, "anonymous").await, used(0, 1));
        let r = ex.on_error(class, detail).await;
        assert_eq!(
            usage(&g, "anonymous").await,
            used(0, 0),
            "{class:?}: released"
        );
        assert_eq!(r.status, status);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            !msg.contains("os error") && !msg.contains("/secret"),
            "{msg}"
        );
        if endpoint == Endpoint::Messages {
            assert_eq!(v["type"], "error");
        }
        assert_eq!(r.headers.get("x-citestream-search").unwrap(), "injected");
        assert!(r.headers.get("x-request-id").is_some());
    }
    let m = g.metrics().render();
    assert!(
        m.contains("citestream_upstream_errors_total{kind=\"refused\"} 2\n"),
        "{m}"
    );
    assert!(m.contains("citestream_upstream_errors_total{kind=\"timeout\"} 1\n"));
    assert!(m.contains(
        "citestream_requests_total{endpoint=\"messages\",search=\"injected\",status=\"504\"} 1\n"
    ));
}

#[tokio::test]
async fn a_stream_broken_mid_way_flushes_what_is_held() {
    let g = grounding("").await;
    let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, true).await;
    ex.on_response_headers(200, &headers(&[SSE])).await;
    let half = &CHAT_SSE[..CHAT_SSE.len() / 2];
    let mut out = drive_open(&mut ex, half);
    ex.on_broken("connection reset");
    while let Some(b) = ex.next_output().unwrap() {
        out.extend_from_slice(&b);
    }
    // Every byte that arrived went out (rewritten where whole events were).
    let tail = &half[half.iter().rposition(|&c| c == b'\n').unwrap() + 1..];
    assert!(out.ends_with(tail));
    assert_eq!(usage(&g, "anonymous").await, used(1, 0), "committed on 200");
}

fn drive_open(ex: &mut Exchange, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces(input, &[50]) {
        ex.on_response_body(p, false);
        while let Some(b) = ex.next_output().unwrap() {
            out.extend_from_slice(&b);
        }
    }
    out
}

#[tokio::test]
async fn a_client_leaving_before_the_headers_gives_the_search_back() {
    let g = grounding("").await;
    let ex = forwarded(&g, Endpoint::ChatCompletions, true, true).await;
    assert_eq!(usage(&g, "anonymous").await, used(0, 1));
    drop(ex);
    assert_eq!(usage(&g, "anonymous").await, used(0, 0));
    let m = g.metrics().render();
    assert!(
        m.contains(
            "citestream_requests_total{endpoint=\"chat\",search=\"injected\",status=\"none\"} 1\n"
        ),
        "{m}"
    );
    // After a 2xx the search stays counted whatever the client does.
    let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, true).await;
    ex.on_response_headers(200, &headers(&[SSE])).await;
    drop(ex);
    assert_eq!(usage(&g, "anonymous").await, used(1, 0));
}

#[tokio::test]
async fn rejected_requests_in_the_endpoint_shape() {
    let key = citestream_host::auth::hash_key(KEY);
    let g = grounding(&format!(
        "[server]\nmax_request_body = \"1KiB\"\n[auth]\nmode = \"keys\"\n[[accounts]]\nid = \"acme\"\nkeys = [\"{key}\"]\n"
    ))
    .await;
    for endpoint in Endpoint::ALL {
        let anthropic = endpoint == Endpoint::Messages;
        let mut ex = exchange(&g, Method::POST, endpoint.path(), &[]);
        let r = ex
            .on_request(Some(body(endpoint, true, true)))
            .await
            .unwrap_err();
        assert_eq!(r.status, 401);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["type"] == "error", anthropic, "{v}");
        let auth = [("authorization", "Bearer sk-gateway-key")];
        let mut ex = exchange(&g, Method::POST, endpoint.path(), &auth);
        let r = ex
            .on_request(Some(Bytes::from_static(br#"{"web_search":"yes"}"#)))
            .await
            .unwrap_err();
        assert_eq!(r.status, 400);
        let mut ex = exchange(&g, Method::POST, endpoint.path(), &auth);
        assert_eq!(ex.max_request_body(), 1024);
        assert_eq!(ex.request_too_large().status, 413);
    }
    let mut ex = exchange(&g, Method::GET, "/v1/models", &[]);
    assert_eq!(ex.authenticate().unwrap_err().status, 401);
    let m = g.metrics().render();
    assert!(m.contains("citestream_requests_total{endpoint=\"messages\",search=\"rejected\",status=\"413\"} 1\n"), "{m}");
    assert!(
        m.contains(
            "citestream_requests_total{endpoint=\"other\",search=\"rejected\",status=\"401\"} 1\n"
        ),
        "{m}"
    );
    assert_eq!(usage(&g, "acme").await, used(0, 0));
}

/// The credentials the upstream sees for a client sending `client` on
/// `path`, under `extra` config.
async fn upstream_sees(
    extra: &str,
    method: Method,
    path: &str,
    client: &[(&str, &str)],
) -> HeaderMap {
    let g = grounding(extra).await;
    let mut ex = exchange(&g, method, path, client);
    let body = Endpoint::from_path(path).map(|e| body(e, false, false));
    let f = ex.on_request(body).await.unwrap();
    let mut h = headers(client);
    f.edits.apply(&mut h);
    assert_eq!(h.get("x-request-id").unwrap(), ex.request_id());
    h
}

#[tokio::test]
async fn keys_the_upstream_sees_in_every_mode() {
    let key = citestream_host::auth::hash_key(KEY);
    let keys =
        format!("[auth]\nmode = \"keys\"\n[[accounts]]\nid = \"acme\"\nkeys = [\"{key}\"]\n");
    let bearer = format!("Bearer {KEY}");
    let client = [("authorization", bearer.as_str()), ("x-api-key", KEY)];
    let auth = |h: &HeaderMap| {
        (
            h.get("authorization")
                .map(|v| v.to_str().unwrap().to_owned()),
            h.get("x-api-key").map(|v| v.to_str().unwrap().to_owned()),
        )
    };
    let paths = [
        (Method::POST, "/v1/chat/completions", false),
        (Method::POST, "/v1/messages", true),
        (Method::GET, "/v1/models", false),
        (Method::POST, "/v1/messages/count_tokens", true),
    ];
    for (method, path, anthropic) in paths {
        // open, no upstream key: the client's own headers go through.
        let h = upstream_sees("", method.clone(), path, &client).await;
        assert_eq!(auth(&h), (Some(bearer.clone()), Some(KEY.into())), "{path}");
        // open or keys with an upstream key: replaced, in the path's header.
        for mode in ["", keys.as_str()] {
            let cfg = format!("[upstream]\napi_key = \"sk-up\"\n{mode}");
            let h = upstream_sees(&cfg, method.clone(), path, &client).await;
            let want = if anthropic {
                (None, Some("sk-up".to_owned()))
            } else {
                (Some("Bearer sk-up".to_owned()), None)
            };
            assert_eq!(auth(&h), want, "{path} {mode}");
        }
        // keys, no upstream key: the gateway key never goes upstream...
        let h = upstream_sees(&keys, method.clone(), path, &client).await;
        assert_eq!(auth(&h), (None, None), "{path}");
        // ...unless forward_client_auth says so.
        let cfg = format!("[upstream]\nforward_client_auth = true\n{keys}");
        let h = upstream_sees(&cfg, method.clone(), path, &client).await;
        assert_eq!(auth(&h), (Some(bearer.clone()), Some(KEY.into())), "{path}");
    }
}

#[tokio::test]
async fn request_ids_and_the_open_mode_key_warning() {
    let g = grounding("").await;
    let ex = exchange(
        &g,
        Method::POST,
        "/v1/messages",
        &[("x-request-id", "abc-1")],
    );
    assert_eq!(ex.request_id(), "abc-1");
    let ex = exchange(
        &g,
        Method::POST,
        "/v1/messages",
        &[("x-request-id", "has space")],
    );
    assert!(ex.request_id().starts_with("req_"));
    let cfg = |t: &str| Config::from_toml_with_env(t, &|_| None).unwrap();
    let w = key_warning(&cfg(
        "[server]\nlisten = \"0.0.0.0:8080\"\n[upstream]\napi_key = \"k\"\n",
    ));
    assert!(w.unwrap().contains("0.0.0.0:8080"));
    assert!(
        key_warning(&cfg("[upstream]\napi_key = \"k\"\n")).is_none(),
        "loopback"
    );
    assert!(
        key_warning(&cfg("[server]\nlisten = \"0.0.0.0:8080\"\n")).is_none(),
        "no key"
    );
}

/// The event-latency histogram is a sample: the first piece of a rewritten
/// stream and every 16th after it, so 33 pieces are 3 observations; a
/// passed stream is not timed at all.
#[tokio::test]
async fn event_latency_is_sampled_one_piece_in_sixteen() {
    let count = |g: &Grounding| {
        let text = g.metrics().render();
        let line = text
            .lines()
            .find(|l| l.starts_with("citestream_event_added_latency_seconds_count"))
            .map(str::to_owned);
        line.and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let g = grounding("").await;
    let mut ex = forwarded(&g, Endpoint::ChatCompletions, true, true).await;
    let head = ex.on_response_headers(200, &headers(&[SSE])).await;
    assert_eq!(head.body, BodyPlan::Stream);
    let ps = pieces(CHAT_SSE, &[1]);
    assert!(ps.len() > 33);
    for p in &ps[..33] {
        ex.on_response_piece(p.clone()).unwrap();
        while ex.next_output().unwrap().is_some() {}
    }
    assert_eq!(count(&g), 3);
    let g = grounding("").await;
    let mut ex = forwarded(&g, Endpoint::ChatCompletions, false, true).await;
    ex.on_response_headers(200, &headers(&[SSE])).await;
    drive_per_piece(&mut ex, &pieces(CHAT_SSE, &[1]));
    assert_eq!(count(&g), 0);
}

//! `citestream serve` in process, in front of a loopback upstream that
//! replays recorded streams: proxying, streamed and whole rewrites, error
//! shapes, upstream failures, client disconnects, drain, h2c.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use citestream::{ChatStream, MessagesStream, RewriteOptions, Sources};
use common::*;
use http_body_util::BodyExt;
use serde_json::Value;

fn lisbon_sources() -> Arc<Sources> {
    Arc::new(Sources::from_json(&lisbon("sources.json")).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_stream_is_grounded_and_rewritten_under_any_chunking() {
    let up = Upstream::start().await;
    let (cfg, dir) = config(&up.url(), "");
    let gw = start_gateway(&cfg, dir).await;
    let input = lisbon("upstream.sse");
    let want = rewrite_all(
        ChatStream::new(lisbon_sources(), RewriteOptions::new()),
        &input,
    );
    for seed in 1..=4 {
        up.reply(Reply::Sse {
            body: input.clone(),
            seed,
        });
        let (status, h, body) = post(
            &gw.url("/v1/chat/completions"),
            &[
                ("authorization", "Bearer sk-client"),
                ("x-request-id", "rid-1"),
            ],
            &chat_body(true),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(body, want, "seed {seed}");
        assert_eq!(h["x-citestream-search"], "injected");
        assert_eq!(
            h["x-citestream-searches-remaining"],
            (100 - seed).to_string().as_str()
        );
        assert_eq!(h["x-request-id"], "rid-1");
        assert_eq!(h["cache-control"], "no-cache");
        assert_eq!(h["x-accel-buffering"], "no");
        assert!(h.get("content-length").is_none());
    }
    let seen = up.seen();
    assert_eq!(seen.len(), 4);
    let s = &seen[0];
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(s.headers["authorization"], "Bearer sk-client");
    assert_eq!(s.headers["accept-encoding"], "identity");
    assert_eq!(s.headers["x-request-id"], "rid-1");
    let v: Value = serde_json::from_slice(&s.body).unwrap();
    assert!(v.get("web_search").is_none());
    // A string content stays a string: the sources block, then the question.
    let last = v["messages"][0]["content"].as_str().unwrap();
    assert!(last.contains("[1] Lisbon weather"), "{last}");
    assert!(
        last.ends_with("\n\nWeather in Lisbon this weekend?"),
        "{last}"
    );
    assert!(
        s.body
            .starts_with(br#"{"model":"shannon-3","stream":true,"messages":"#)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_bodies_are_rewritten_and_not_requested_passes_untouched() {
    let up = Upstream::start().await;
    let (cfg, dir) = config(&up.url(), "");
    let gw = start_gateway(&cfg, dir).await;
    let whole = lisbon("upstream.json");
    up.reply(Reply::Json {
        status: 200,
        body: whole.clone(),
    });
    let (status, h, body) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
    assert_eq!(status, 200);
    let want = citestream::chat::rewrite_body(&whole, &lisbon_sources(), &RewriteOptions::new());
    assert_eq!(body, &want[..]);
    assert_eq!(h["content-length"], want.len().to_string().as_str());

    // Without web_search: the response passes through byte for byte.
    let plain = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let (status, h, body) = post(&gw.url("/v1/chat/completions"), &[], plain).await;
    assert_eq!((status, &body), (200, &whole));
    assert_eq!(h["x-citestream-search"], "not-requested");
    assert!(h.get("x-citestream-searches-remaining").is_none());
    assert_eq!(up.seen()[1].body, plain.as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_stream_with_the_configured_key() {
    let up = Upstream::start().await;
    let (cfg, dir) = config_with(&up.url(), "api_key = \"sk-up\"\n", "");
    let gw = start_gateway(&cfg, dir).await;
    let input = fixture("anthropic_basic_ping.sse");
    up.reply(Reply::Sse {
        body: input.clone(),
        seed: 9,
    });
    let body = r#"{"model":"claude","max_tokens":50,"stream":true,"web_search":true,"messages":[{"role":"user","content":"Weather in Lisbon?"}]}"#;
    let (status, h, got) = post(&gw.url("/v1/messages"), &[("x-api-key", "sk-client")], body).await;
    assert_eq!(status, 200);
    let want = rewrite_all(
        MessagesStream::new(lisbon_sources(), RewriteOptions::new()),
        &input,
    );
    assert_eq!(got, want);
    assert_eq!(h["x-citestream-search"], "injected");
    let s = &up.seen()[0];
    assert_eq!(s.headers["x-api-key"], "sk-up");
    assert!(s.headers.get("authorization").is_none());
}

fn assert_shape(path: &str, body: &Bytes) -> Value {
    let v: Value = serde_json::from_slice(body).unwrap();
    if path.starts_with("/v1/messages") {
        assert_eq!(v["type"], "error", "{v}");
        assert!(
            v["error"]["type"].is_string() && v["error"]["message"].is_string(),
            "{v}"
        );
    } else {
        assert!(
            v["error"]["type"].is_string() && v["error"]["message"].is_string(),
            "{v}"
        );
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_errors_are_in_the_endpoint_shape_and_never_reach_upstream() {
    let up = Upstream::start().await;
    let key = citestream_host::auth::hash_key("sk-good");
    let extra = format!(
        "[server]\nmax_request_body = \"1KiB\"\n[auth]\nmode = \"keys\"\n[[accounts]]\nid = \"a\"\nkeys = [\"{key}\"]\n"
    );
    let (cfg, dir) = config(&up.url(), &extra);
    let gw = start_gateway(&cfg, dir).await;
    let good = [("authorization", "Bearer sk-good")];
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let (s, _, b) = post(&gw.url(path), &[], &chat_body(false)).await;
        assert_eq!(s, 401);
        let v = assert_shape(path, &b);
        if path == "/v1/messages" {
            assert_eq!(v["error"]["type"], "authentication_error");
        } else {
            assert_eq!(v["error"]["code"], "invalid_api_key");
        }
        let (s, _, _) = post(&gw.url(path), &[("x-api-key", "sk-bad")], &chat_body(false)).await;
        assert_eq!(s, 401);
        let (s, _, b) = post(&gw.url(path), &good, r#"{"web_search":"yes"}"#).await;
        assert_eq!(s, 400);
        assert_shape(path, &b);
        let (s, _, b) = post(&gw.url(path), &good, "not json").await;
        assert_eq!(s, 400);
        assert_shape(path, &b);
        let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(2000));
        let (s, _, b) = post(&gw.url(path), &good, &big).await;
        assert_eq!(s, 413);
        assert_shape(path, &b);
    }
    let (s, _, _) = post(&gw.url("/v1/models"), &[], "").await;
    assert_eq!(s, 401);
    // A request head past the 64 KiB read buffer is refused with 431 (hyper
    // reads in growing steps and checks between them, so only heads over
    // twice that are refused for certain); one of 40 KiB is read (and
    // answered by the key check).
    let pad = "x".repeat(200 * 1024);
    let (s, _, _) = post(&gw.url("/v1/models"), &[("x-pad", &pad)], "").await;
    assert_eq!(s, 431);
    let (s, _, _) = post(&gw.url("/v1/models"), &[("x-pad", &pad[..40 * 1024])], "").await;
    assert_eq!(s, 401);
    let (s, _, b) = post(&gw.url("/v2/chat/completions"), &good, "{}").await;
    assert_eq!(s, 404);
    assert_shape("/v2", &b);
    let (s, h, _) = post(&gw.url("/healthz"), &[], "{}").await;
    assert_eq!(s, 405);
    assert_eq!(h["allow"], "GET, HEAD");
    assert!(up.seen().is_empty());
    let m = client()
        .get(gw.url("/metrics").parse().unwrap())
        .await
        .unwrap();
    let text = m.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&text);
    for (status, n) in [(401, 2), (400, 2), (413, 1)] {
        let line = format!(
            "citestream_requests_total{{endpoint=\"messages\",search=\"rejected\",status=\"{status}\"}} {n}\n"
        );
        assert!(text.contains(&line), "{line} in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_are_relayed_and_failures_are_502_or_504() {
    let up = Upstream::start().await;
    let (cfg, dir) = config_with(&up.url(), "headers_timeout = \"300ms\"\n", "");
    let gw = start_gateway(&cfg, dir).await;
    let err = Bytes::from_static(br#"{"error":{"message":"slow down","type":"rate_limit"}}"#);
    up.reply(Reply::Json {
        status: 429,
        body: err.clone(),
    });
    let (s, h, b) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(true)).await;
    assert_eq!((s, &b), (429, &err));
    assert_eq!(h["x-citestream-search"], "injected");

    // A response head past the 64 KiB read buffer is not relayed: 502.
    let pad: &'static str = Box::leak("x".repeat(200 * 1024).into_boxed_str());
    up.reply(Reply::Raw {
        headers: vec![("content-type", "application/json"), ("x-pad", pad)],
        body: err.clone(),
    });
    let (s, _, b) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
    assert_eq!(s, 502);
    assert_shape("/v1/chat/completions", &b);

    up.reply(Reply::Hang);
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let (s, _, b) = post(&gw.url(path), &[], &chat_body(true)).await;
        assert_eq!(s, 504);
        assert_shape(path, &b);
    }
    // Refused: nothing listens on the port any more.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (cfg, dir) = config(&format!("http://{dead}"), "");
    let gw = start_gateway(&cfg, dir).await;
    for path in ["/v1/chat/completions", "/v1/messages", "/v1/models"] {
        let (s, _, b) = post(&gw.url(path), &[], &chat_body(false)).await;
        assert_eq!(s, 502, "{path}");
        assert_shape(path, &b);
    }
}

/// Sends a streamed request on a raw connection, reads until `marker`
/// shows up (or the headers only, when `marker` is empty), then drops the
/// connection.
async fn read_then_drop(addr: std::net::SocketAddr, body: &str, marker: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    if marker.is_empty() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        return;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(marker.len()).any(|w| w == marker) {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_disconnect_cancels_the_upstream_while_waiting_and_mid_stream() {
    let up = Upstream::start().await;
    let (cfg, dir) = config(&up.url(), "");
    let gw = start_gateway(&cfg, dir).await;
    up.reply(Reply::Hang);
    read_then_drop(gw.addr, &chat_body(true), b"").await;
    assert!(
        up.wait_cancelled().await,
        "upstream request not cancelled while waiting for headers"
    );

    let up = Upstream::start().await;
    let (cfg, dir) = config(&up.url(), "");
    let gw = start_gateway(&cfg, dir).await;
    let input = lisbon("upstream.sse");
    up.reply(Reply::Stall {
        head: input.slice(..input.len() / 2),
    });
    read_then_drop(gw.addr, &chat_body(true), b"Saturday").await;
    assert!(
        up.wait_cancelled().await,
        "upstream stream not cancelled mid-stream"
    );
    assert_eq!(up.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_new_connections_and_lets_the_open_stream_finish() {
    let up = Upstream::start().await;
    let (cfg, dir) = config(&up.url(), "");
    let mut gw = start_gateway(&cfg, dir).await;
    let input = lisbon("upstream.sse");
    let cut = input.len() / 2;
    let release = Arc::new(tokio::sync::Notify::new());
    up.reply(Reply::Gate {
        head: input.slice(..cut),
        tail: input.slice(cut..),
        release: release.clone(),
    });
    let url = gw.url("/v1/chat/completions");
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(chat_body(true))))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    gw.stop.take().unwrap().send(()).unwrap();
    // The listener closes: new connections are refused.
    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(gw.addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused);
    release.notify_one();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let want = rewrite_all(
        ChatStream::new(lisbon_sources(), RewriteOptions::new()),
        &input,
    );
    assert_eq!(body, want);
    tokio::time::timeout(Duration::from_secs(20), &mut gw.done)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_streams_too() {
    let up = Upstream::start().await;
    let (cfg, dir) = config(&up.url(), "");
    let gw = start_gateway(&cfg, dir).await;
    let input = lisbon("upstream.sse");
    up.reply(Reply::Sse {
        body: input.clone(),
        seed: 3,
    });
    let c = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<Bytes>>();
    let req = http::Request::post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(chat_body(true))))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(resp.headers()["x-citestream-search"], "injected");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let want = rewrite_all(
        ChatStream::new(lisbon_sources(), RewriteOptions::new()),
        &input,
    );
    assert_eq!(body, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_others_still_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = Upstream::start().await;
    let (cfg, dir) = config(&up.url(), "[server]\nheader_read_timeout = \"300ms\"\n");
    let gw = start_gateway(&cfg, dir).await;
    // One that sends nothing, one that stops inside the HTTP/2 preface,
    // one that trickles its headers.
    let mut silent = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let mut preface = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    preface.write_all(b"PRI * HT").await.unwrap();
    let trickle = tokio::spawn({
        let addr = gw.addr;
        async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-slow: ";
            for i in 0..2000 {
                let b = head.get(i).copied().unwrap_or(b'a');
                if s.write_all(&[b]).await.is_err() {
                    return true;
                }
                let mut buf = [0u8; 512];
                match tokio::time::timeout(Duration::from_millis(20), s.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => return true,
                    Ok(Ok(n)) => assert!(buf[..n].starts_with(b"HTTP/1.1 4"), "{:?}", &buf[..n]),
                    Err(_) => {}
                }
            }
            false
        }
    });
    let input = lisbon("upstream.sse");
    up.reply(Reply::Sse {
        body: input.clone(),
        seed: 5,
    });
    let (s, _, _) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(true)).await;
    assert_eq!(s, 200);
    let mut buf = [0u8; 64];
    for s in [&mut silent, &mut preface] {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
        assert!(
            matches!(n, Ok(Ok(0) | Err(_))),
            "a silent connection was kept open"
        );
    }
    assert!(
        trickle.await.unwrap(),
        "a trickling client was kept connected"
    );
    let (s, _, _) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(true)).await;
    assert_eq!(s, 200);
}

fn gzip(b: &[u8]) -> Bytes {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap().into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_upstream_bodies_are_inflated_or_passed_through_never_corrupted() {
    let up = Upstream::start().await;
    let (cfg, dir) = config(&up.url(), "");
    let gw = start_gateway(&cfg, dir).await;
    let input = lisbon("upstream.sse");
    let sse = ("content-type", "text/event-stream");
    up.reply(Reply::Raw {
        headers: vec![sse, ("content-encoding", "gzip")],
        body: gzip(&input),
    });
    let (s, h, body) = post(
        &gw.url("/v1/chat/completions"),
        &[("accept-encoding", "gzip")],
        &chat_body(true),
    )
    .await;
    assert_eq!(s, 200);
    assert!(h.get("content-encoding").is_none());
    let want = rewrite_all(
        ChatStream::new(lisbon_sources(), RewriteOptions::new()),
        &input,
    );
    assert_eq!(body, want);
    assert_eq!(up.seen()[0].headers["accept-encoding"], "identity");

    let whole = lisbon("upstream.json");
    let json = ("content-type", "application/json");
    up.reply(Reply::Raw {
        headers: vec![json, ("content-encoding", "gzip")],
        body: gzip(&whole),
    });
    let (s, _, body) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
    assert_eq!(s, 200);
    let want = citestream::chat::rewrite_body(&whole, &lisbon_sources(), &RewriteOptions::new());
    assert_eq!(body, &want[..]);

    // A coding the gateway does not undo: untouched, and a header says why.
    let opaque = Bytes::from_static(b"\x28\xb5\x2f\xfd opaque zstd bytes");
    up.reply(Reply::Raw {
        headers: vec![sse, ("content-encoding", "zstd")],
        body: opaque.clone(),
    });
    let (s, h, body) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(true)).await;
    assert_eq!((s, &body), (200, &opaque));
    assert_eq!(h["content-encoding"], "zstd");
    assert_eq!(h["x-citestream-rewrite"], "skipped-content-encoding");
}

//! The gateway's upstream client against loopback upstreams that misbehave
//! the way real ones do: closing keep-alive connections (after each answer
//! without `connection: close`, after a random number of answers, after an
//! idle time), one endpoint of two down, 429/503 answers, silence mid-stream.
//! Each test checks what the client saw, what the upstream got, and the
//! counters in `/metrics`.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// When the raw upstream closes a connection (never with `connection: close`).
#[derive(Clone, Copy, Debug)]
enum Closing {
    /// Right after each answer.
    EachAnswer,
    /// After 1 to 4 answers (seeded), it reads the next request and closes
    /// without answering it: the server dropped the connection just as the
    /// request came (the keep-alive race at its worst).
    AfterRandom(u64),
    /// When no request came for this long after an answer.
    Idle(Duration),
    /// Never.
    KeepOpen,
}

/// One scripted answer: status, extra headers, body.
#[derive(Clone, Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Bytes,
}

fn ok_answer() -> Answer {
    Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: lisbon("upstream.json"),
    }
}

/// A raw HTTP/1.1 upstream: answers from a script (the last answer repeats),
/// records each request it read (head and body) and counts connections.
struct RawUp {
    addr: SocketAddr,
    script: Arc<Mutex<Vec<Answer>>>,
    seen: Arc<Mutex<Vec<(String, Bytes)>>>,
    answered: Arc<AtomicU64>,
    connections: Arc<AtomicU64>,
}

fn rng(x: &mut u64) -> u64 {
    *x = x
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *x >> 33
}

/// Reads one request (head and `content-length` body); `None` at EOF.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, Bytes)> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let mut chunk = [0u8; 16384];
                let n = s.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = Bytes::copy_from_slice(&buf[end + 4..end + 4 + len]);
            buf.drain(..end + 4 + len);
            return Some((head, body));
        }
        let mut chunk = [0u8; 16384];
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

impl RawUp {
    async fn start(closing: Closing, script: Vec<Answer>) -> RawUp {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = RawUp {
            addr: listener.local_addr().unwrap(),
            script: Arc::new(Mutex::new(script)),
            seen: Arc::default(),
            answered: Arc::default(),
            connections: Arc::default(),
        };
        let (script, seen, answered, conns) = (
            up.script.clone(),
            up.seen.clone(),
            up.answered.clone(),
            up.connections.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let n = conns.fetch_add(1, Ordering::Relaxed);
                let (script, seen, answered) = (script.clone(), seen.clone(), answered.clone());
                tokio::spawn(async move {
                    let mut seed = match closing {
                        Closing::AfterRandom(s) => s ^ n.wrapping_mul(0x9E37_79B9),
                        _ => 0,
                    };
                    let budget = 1 + rng(&mut seed) % 4;
                    let mut buf = Vec::new();
                    let mut served = 0;
                    loop {
                        let req = match closing {
                            Closing::Idle(d) if served > 0 => {
                                match tokio::time::timeout(d, read_request(&mut s, &mut buf)).await
                                {
                                    Ok(r) => r,
                                    Err(_) => return,
                                }
                            }
                            _ => read_request(&mut s, &mut buf).await,
                        };
                        let Some(req) = req else { return };
                        if matches!(closing, Closing::AfterRandom(_)) && served == budget {
                            return; // read, never answered
                        }
                        seen.lock().unwrap().push(req);
                        let a = {
                            let mut sc = script.lock().unwrap();
                            if sc.len() > 1 {
                                sc.remove(0)
                            } else {
                                sc[0].clone()
                            }
                        };
                        let mut out = format!(
                            "HTTP/1.1 {} X\r\ncontent-length: {}\r\n",
                            a.status,
                            a.body.len()
                        );
                        for (k, v) in &a.headers {
                            out.push_str(&format!("{k}: {v}\r\n"));
                        }
                        out.push_str("\r\n");
                        let mut w = out.into_bytes();
                        w.extend_from_slice(&a.body);
                        if s.write_all(&w).await.is_err() {
                            return;
                        }
                        answered.fetch_add(1, Ordering::Relaxed);
                        served += 1;
                        if matches!(closing, Closing::EachAnswer) {
                            return;
                        }
                    }
                });
            }
        });
        up
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// A metric's value in the gateway's `/metrics` (0 when absent).
async fn metric(gw: &Gw, series: &str) -> f64 {
    let resp = client()
        .request(
            http::Request::get(gw.url("/metrics"))
                .body(http_body_util::Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `n` requests from `conc` concurrent clients, with random pauses below
/// `max_gap`; returns the statuses that were not 200 and the 200 answers
/// without their sources.
async fn load(gw: &Gw, n: usize, conc: usize, max_gap: Duration, seed: u64) -> (Vec<u16>, usize) {
    let url = gw.url("/v1/chat/completions");
    let body = chat_body(false);
    let mut tasks = Vec::new();
    for c in 0..conc {
        let (url, body) = (url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut x = seed ^ (c as u64 + 1);
            let mut bad = Vec::new();
            let mut sourceless = 0;
            for _ in 0..n / conc {
                let gap = max_gap.as_micros() as u64;
                if gap > 0 {
                    tokio::time::sleep(Duration::from_micros(rng(&mut x) % gap)).await;
                }
                let (s, _, b) = post(&url, &[], &body).await;
                if s != 200 {
                    bad.push(s);
                } else if !String::from_utf8_lossy(&b).contains("\"sources\"") {
                    sourceless += 1;
                }
            }
            (bad, sourceless)
        }));
    }
    let mut bad = Vec::new();
    let mut sourceless = 0;
    for t in tasks {
        let (b, s) = t.await.unwrap();
        bad.extend(b);
        sourceless += s;
    }
    (bad, sourceless)
}

/// Enough searches for every test here.
const PLAN: &str = "[plans.default]\nsearches_per_day = 1000000\n";

const STALE: &str = "citestream_upstream_retries_total{reason=\"stale_connection\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_keep_alive_connections_never_reach_the_client() {
    for (closing, conc, gap) in [
        (Closing::EachAnswer, 1, Duration::ZERO),
        (Closing::EachAnswer, 8, Duration::ZERO),
        (Closing::AfterRandom(7), 1, Duration::ZERO),
        (Closing::AfterRandom(11), 8, Duration::from_millis(2)),
        (
            Closing::Idle(Duration::from_millis(20)),
            4,
            Duration::from_millis(40),
        ),
        (
            Closing::Idle(Duration::from_millis(4)),
            16,
            Duration::from_millis(8),
        ),
    ] {
        let up = RawUp::start(closing, vec![ok_answer()]).await;
        let (cfg, dir) = config(&up.url(), PLAN);
        let gw = start_gateway(&cfg, dir).await;
        let n = if gap.is_zero() { 400 } else { 160 };
        let (bad, sourceless) = load(&gw, n, conc, gap, 3).await;
        assert!(
            bad.is_empty(),
            "{closing:?} x{conc}: {} failed: {bad:?}",
            bad.len()
        );
        assert_eq!(sourceless, 0, "{closing:?}");
        // Every request was searched once and answered once.
        let searched = metric(&gw, "citestream_searches_total{result=\"found\"}").await;
        assert_eq!(searched as usize, n, "{closing:?}");
        assert_eq!(
            up.answered.load(Ordering::Relaxed) as usize,
            n,
            "{closing:?}"
        );
        let stale = metric(&gw, STALE).await;
        if matches!(closing, Closing::AfterRandom(_)) {
            // Every connection dies under a request: each is one retry.
            assert!(stale >= (n / 5) as f64, "{closing:?}: {stale} retries");
        }
        eprintln!(
            "{closing:?} x{conc}: {n} requests, {} connections, {stale} stale-connection retries",
            up.connections.load(Ordering::Relaxed)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_dropped_before_the_server_drops_them() {
    // The server closes after 300 ms idle; the pool keeps connections 100 ms.
    let up = RawUp::start(Closing::Idle(Duration::from_millis(300)), vec![ok_answer()]).await;
    let (cfg, dir) = config_with(
        &up.url(),
        "pool_idle_timeout = \"100ms\"\nretries = 0\n",
        "",
    );
    let gw = start_gateway(&cfg, dir).await;
    for _ in 0..6 {
        let (s, _, _) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
        assert_eq!(s, 200);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(metric(&gw, STALE).await, 0.0);
    assert_eq!(up.connections.load(Ordering::Relaxed), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_endpoint_of_two_down_costs_no_request() {
    let up = RawUp::start(Closing::KeepOpen, vec![ok_answer()]).await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let routes = format!(
        "[[routes]]\nmodel = \"shannon-*\"\nbase_urls = [\"http://{dead}\", \"{}\"]\napi_key = \"sk-route\"\nupstream_model = \"shannon-7b\"\n",
        up.url()
    );
    let (cfg, dir) = config("http://127.0.0.1:9", &format!("{routes}{PLAN}"));
    let gw = start_gateway(&cfg, dir).await;
    let (bad, sourceless) = load(&gw, 200, 4, Duration::ZERO, 5).await;
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(sourceless, 0);
    let connect = metric(&gw, "citestream_upstream_retries_total{reason=\"connect\"}").await;
    assert_eq!(
        connect, 100.0,
        "every other request starts at the dead endpoint"
    );
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 200);
    let (head, body) = &seen[0];
    let head = head.to_ascii_lowercase();
    assert!(head.contains("authorization: bearer sk-route"), "{head}");
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(v["model"], "shannon-7b");
    assert_eq!(
        metric(&gw, "citestream_searches_total{result=\"found\"}").await,
        200.0
    );
}

fn status(status: u16, headers: &[(&str, &str)]) -> Answer {
    Answer {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        body: Bytes::from_static(br#"{"error":{"message":"busy","type":"server_error"}}"#),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_answers_are_retried_once_and_retry_after_is_honoured() {
    // 503, then the answer: the client gets the answer, one search.
    let up = RawUp::start(Closing::KeepOpen, vec![status(503, &[]), ok_answer()]).await;
    let (cfg, dir) = config(&up.url(), PLAN);
    let gw = start_gateway(&cfg, dir).await;
    let (s, _, b) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
    assert_eq!(s, 200);
    assert!(String::from_utf8_lossy(&b).contains("\"sources\""));
    assert_eq!(
        metric(&gw, "citestream_upstream_retries_total{reason=\"status\"}").await,
        1.0
    );
    assert_eq!(
        metric(&gw, "citestream_searches_total{result=\"found\"}").await,
        1.0
    );

    // 429 with retry-after: 1: waited for, then the answer.
    let up = RawUp::start(
        Closing::KeepOpen,
        vec![status(429, &[("retry-after", "1")]), ok_answer()],
    )
    .await;
    let (cfg, dir) = config(&up.url(), PLAN);
    let gw = start_gateway(&cfg, dir).await;
    let t0 = Instant::now();
    let (s, _, _) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
    assert_eq!(s, 200);
    assert!(t0.elapsed() >= Duration::from_secs(1));

    // retry-after above the cap: the 429 goes to the client at once.
    let up = RawUp::start(
        Closing::KeepOpen,
        vec![status(429, &[("retry-after", "3600")]), ok_answer()],
    )
    .await;
    let (cfg, dir) = config(&up.url(), PLAN);
    let gw = start_gateway(&cfg, dir).await;
    let (s, h, _) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
    assert_eq!(s, 429);
    assert_eq!(h["retry-after"], "3600");

    // Always 502, retries = 2: three attempts, then the 502 as sent.
    let up = RawUp::start(Closing::KeepOpen, vec![status(502, &[])]).await;
    let (cfg, dir) = config_with(&up.url(), "retries = 2\n", "");
    let gw = start_gateway(&cfg, dir).await;
    let (s, _, b) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
    assert_eq!(s, 502);
    assert!(String::from_utf8_lossy(&b).contains("busy"));
    assert_eq!(up.seen.lock().unwrap().len(), 3);

    // retries = 0: the 503 as sent.
    let up = RawUp::start(Closing::KeepOpen, vec![status(503, &[]), ok_answer()]).await;
    let (cfg, dir) = config_with(&up.url(), "retries = 0\n", "");
    let gw = start_gateway(&cfg, dir).await;
    let (s, _, _) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
    assert_eq!(s, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_whole_body_is_a_502_after_the_idle_timeout() {
    // A JSON answer to rewrite is held whole: silent before its end, the
    // client gets the exchange's 502 (nothing was sent yet).
    let up = Upstream::start().await;
    up.reply(Reply::StallJson {
        head: Bytes::from_static(b"{\"id\":\"c\",\"object\":\"chat.completion\","),
    });
    let (cfg, dir) = config_with(&up.url(), "idle_timeout = \"300ms\"\n", "");
    let gw = start_gateway(&cfg, dir).await;
    let t0 = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)),
    )
    .await;
    let (s, h, b) = r.expect("answered within 10 s");
    assert_eq!(s, 502, "{}", String::from_utf8_lossy(&b));
    assert_eq!(h["x-citestream-search"], "injected");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert!(
        up.wait_cancelled().await,
        "the upstream connection was closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_stream_is_cut_after_the_idle_timeout() {
    let up = Upstream::start().await;
    let head = Bytes::from_static(
        b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Sunny\"},\"finish_reason\":null}]}\n\n",
    );
    up.reply(Reply::Stall { head });
    let (cfg, dir) = config_with(&up.url(), "idle_timeout = \"300ms\"\n", "");
    let gw = start_gateway(&cfg, dir).await;
    let req = http::Request::post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(chat_body(true))))
        .unwrap();
    let t0 = Instant::now();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let r = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect()).await;
    assert!(r.expect("cut within 10 s").is_err(), "a broken stream");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert!(
        up.wait_cancelled().await,
        "the upstream connection was closed"
    );
}

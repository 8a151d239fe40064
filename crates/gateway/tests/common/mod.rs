//! Test harness: a loopback upstream that replays recorded streams in
//! random piece sizes and records what it received, and an in-process
//! gateway in front of it.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use citestream_gateway::Gateway;
use citestream_host::config::Config;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, oneshot};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn fixture(name: &str) -> Bytes {
    Bytes::from(std::fs::read(repo().join("tests/fixtures/upstream").join(name)).unwrap())
}

pub fn lisbon(name: &str) -> Bytes {
    Bytes::from(std::fs::read(repo().join("examples/lisbon").join(name)).unwrap())
}

/// What a stream rewriter makes of `input` fed whole, then finished.
pub fn rewrite_all(mut r: impl citestream::StreamRewriter, input: &Bytes) -> Bytes {
    let mut out = Vec::new();
    r.feed(input.clone());
    r.drain_into(&mut out);
    r.finish();
    r.drain_into(&mut out);
    out.into()
}

/// What the upstream answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 `text/event-stream`, the body in pieces of random size (seeded).
    Sse { body: Bytes, seed: u64 },
    /// A status and a JSON body.
    Json { status: u16, body: Bytes },
    /// Never answers (records when the request is dropped).
    Hang,
    /// 200 with these headers and this body, in one piece.
    Raw {
        headers: Vec<(&'static str, &'static str)>,
        body: Bytes,
    },
    /// 200 SSE: `head`, then nothing more until the connection closes.
    Stall { head: Bytes },
    /// The same as a JSON body (`application/json`, no length).
    StallJson { head: Bytes },
    /// 200 SSE: `head`, then `tail` after `release` is notified.
    Gate {
        head: Bytes,
        tail: Bytes,
        release: Arc<Notify>,
    },
}

/// One request the upstream got.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Default)]
pub struct UpState {
    pub reply: Mutex<Option<Reply>>,
    pub seen: Mutex<Vec<Seen>>,
    pub cancelled: Notify,
    pub cancelled_count: Mutex<u32>,
}

pub struct Upstream {
    pub addr: SocketAddr,
    pub state: Arc<UpState>,
}

/// Sets a flag when dropped before it was disarmed.
struct DropFlag(Option<Arc<UpState>>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            *s.cancelled_count.lock().unwrap() += 1;
            s.cancelled.notify_waiters();
            s.cancelled.notify_one();
        }
    }
}

fn pieces(body: &Bytes, seed: u64) -> Vec<Bytes> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::new();
    let mut at = 0;
    while at < body.len() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // 1 B to 16 KiB, small pieces more often.
        let max = [16usize, 256, 16 * 1024][(x >> 60) as usize % 3];
        let n = 1 + (x >> 33) as usize % max;
        let end = (at + n).min(body.len());
        out.push(body.slice(at..end));
        at = end;
    }
    out
}

type UpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn answer(
    state: Arc<UpState>,
    req: Request<Incoming>,
) -> Result<Response<UpBody>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    state.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: parts.headers,
        body,
    });
    let reply = state.reply.lock().unwrap().clone().expect("a reply set");
    let sse = |b: UpBody| {
        Response::builder()
            .header("content-type", "text/event-stream")
            .header("content-length", "999999")
            .body(b)
            .unwrap()
    };
    let json = matches!(reply, Reply::StallJson { .. });
    Ok(match reply {
        Reply::Json { status, body } => Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(body).boxed())
            .unwrap(),
        Reply::Sse { body, seed } => {
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
            tokio::spawn(async move {
                for p in pieces(&body, seed) {
                    if tx.send(Ok(Frame::data(p))).await.is_err() {
                        return;
                    }
                }
            });
            let mut r = sse(StreamBody::new(tokio_stream(rx)).boxed());
            r.headers_mut().remove("content-length");
            r
        }
        Reply::Raw { headers, body } => {
            let mut r = Response::new(Full::new(body).boxed());
            for (k, v) in headers {
                r.headers_mut().insert(k, http::HeaderValue::from_static(v));
            }
            r
        }
        Reply::Hang => {
            let _flag = DropFlag(Some(state.clone()));
            std::future::pending::<()>().await;
            unreachable!()
        }
        Reply::Stall { head } | Reply::StallJson { head } => {
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
            let st = state.clone();
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(head))).await;
                tx.closed().await; // the gateway closed the connection
                drop(DropFlag(Some(st)));
            });
            let mut r = sse(StreamBody::new(tokio_stream(rx)).boxed());
            r.headers_mut().remove("content-length");
            if json {
                r.headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
            }
            r
        }
        Reply::Gate {
            head,
            tail,
            release,
        } => {
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(head))).await;
                release.notified().await;
                let _ = tx.send(Ok(Frame::data(tail))).await;
            });
            let mut r = sse(StreamBody::new(tokio_stream(rx)).boxed());
            r.headers_mut().remove("content-length");
            r
        }
    })
}

/// An mpsc receiver as a `Stream`.
fn tokio_stream<T>(mut rx: mpsc::Receiver<T>) -> impl futures_core::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

impl Upstream {
    pub async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(UpState::default());
        let st = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |r| answer(st.clone(), r));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                });
            }
        });
        Upstream { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn reply(&self, r: Reply) {
        *self.state.reply.lock().unwrap() = Some(r);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub fn cancelled(&self) -> u32 {
        *self.state.cancelled_count.lock().unwrap()
    }

    /// Waits until the upstream saw a cancelled request (bounded: 10 s).
    pub async fn wait_cancelled(&self) -> bool {
        for _ in 0..1000 {
            if self.cancelled() > 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }
}

/// A running gateway.
pub struct Gw {
    pub addr: SocketAddr,
    pub stop: Option<oneshot::Sender<()>>,
    pub done: tokio::task::JoinHandle<()>,
    pub dir: PathBuf,
}

impl Gw {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// A config with static search over the Lisbon sources, plus `extra` TOML.
pub fn config(upstream: &str, extra: &str) -> (Config, PathBuf) {
    config_with(upstream, "", extra)
}

/// [`config`] with more `[upstream]` keys.
pub fn config_with(upstream: &str, up_extra: &str, extra: &str) -> (Config, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "citestream-gw-test-{}-{}",
        std::process::id(),
        COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let sources = dir.join("sources.json");
    std::fs::write(&sources, lisbon("sources.json")).unwrap();
    let toml = format!(
        "[upstream]\nbase_url = \"{upstream}\"\n{up_extra}[search]\nprovider = \"static\"\n[search.static]\npath = \"{}\"\n{extra}",
        sources.display()
    );
    (Config::from_toml_with_env(&toml, &|_| None).unwrap(), dir)
}

static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub async fn start_gateway(cfg: &Config, dir: PathBuf) -> Gw {
    let gw = Gateway::new(cfg).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let done = tokio::spawn(gw.serve(listener, async move {
        let _ = rx.await;
    }));
    Gw {
        addr,
        stop: Some(tx),
        done,
        dir,
    }
}

/// A client for the gateway (HTTP/1.1).
pub fn client() -> hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
> {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http()
}

/// POSTs `body` and returns status, headers and the whole body.
pub async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> (u16, HeaderMap, Bytes) {
    let mut b = Request::post(url).header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = client()
        .request(b.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body)
}

pub fn chat_body(stream: bool) -> String {
    format!(
        r#"{{"model":"shannon-3","web_search":true,"stream":{stream},"messages":[{{"role":"user","content":"Weather in Lisbon this weekend?"}}]}}"#
    )
}

//! The model server the gateway forwards to, or the built-in demo model
//! when `upstream.base_url` is `""`. A plain-HTTP upstream reached directly
//! (the `http://` model servers beside a gateway: vLLM, Ollama, llama.cpp)
//! goes over HTTP/1 connections of our own pool, driven in the request's
//! task so that one read of the upstream is one write to the client
//! ([`h1`]); an HTTPS one (rustls with the ring provider and the trust of
//! [`citestream_host::tls`]; HTTP/2 by ALPN) and any through the
//! environment's proxy ([`tunnel`]) over hyper-util's pooled client
//! ([`conn`]).
//!
//! Contract:
//! * Where a request goes: [`route`] (`[[routes]]` by the body's `model`,
//!   round robin over a route's `base_urls`; else `[upstream]`, whose
//!   `messages_base_url` takes `/v1/messages`). The request's path and
//!   query are appended to the base URL's path; a base ending in `/v1` does
//!   not double it (`https://api.openai.com/v1` + `/v1/models` →
//!   `https://api.openai.com/v1/models`).
//! * Hop-by-hop headers are not forwarded (either way); `host` is the
//!   upstream's. Credentials are the request's exchange's decision
//!   (`citestream_host::exchange`: the client's key removed in `keys` mode,
//!   `upstream.api_key` set); a route with its own `api_key` then replaces
//!   the `authorization` and `x-api-key` headers with it ([`set_key`]: `Authorization: Bearer` on OpenAI-shaped
//!   paths, `x-api-key` on `/v1/messages`).
//! * Sent again, without anything reaching the client and without the
//!   search or quota being touched (they happened before), when the body
//!   is whole ([`OutBody::Whole`], or an empty streamed one):
//!   - once, on a connection of its own, when a reused pooled connection
//!     failed before any response byte ([`conn::is_stale`],
//!     [`h1::Failed::Request`]: the keep-alive race); this does not count
//!     against `upstream.retries`;
//!   - up to `upstream.retries` times, to the route's next endpoint, after a
//!     connect error or a 429/502/503/504 answer, waiting an exponential
//!     backoff with jitter (none before another endpoint after a connect
//!     error), or the answer's `retry-after` in seconds when it says so —
//!     one above [`RETRY_AFTER_CAP`] is not waited for: that answer goes to
//!     the client.
//!
//!   - on hyper-util's client only (HTTPS, proxied): once, on a
//!     connection of its own, when no connection took the
//!     request within `upstream.connect_timeout` + [`HANDOFF_GRACE`]
//!     ([`conn::Handed`]): nothing of it was written. hyper-util's pool can
//!     lose a request this way when it hands the request to a kept-alive
//!     connection at the moment the upstream closes it: the request lands
//!     in the connection's queue after its task drained it, and its answer
//!     never comes (the queue lives on as long as the waiting request holds
//!     the connection's sender). This bound is separate from the headers
//!     wait: a slow upstream answers late, but takes its request at once.
//!     A streamed body cannot be sent again: that request is a 502. (A
//!     connection of [`h1`] is polled by the request's own task, so a
//!     request cannot wait on it unseen: the bound does not apply there.)
//!
//!   Each is counted in `citestream_upstream_retries_total{reason}` (the
//!   two reused-connection cases as `stale_connection`).
//! * No response headers within `headers_timeout` (or no connection within
//!   `connect_timeout`): [`UpstreamFailure::Timeout`] (a 504); refused or
//!   broken before the headers: [`UpstreamFailure::Unreachable`] (a 502).
//! * A response body that sends nothing for `upstream.idle_timeout` is cut
//!   (by the body that reads it, [`crate::body`]).
//! * Dropping the future returned by [`Upstream::send`] or the response
//!   body cancels the upstream request (its connection is closed).

mod conn;
mod h1;
mod route;
mod tunnel;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use citestream::request::Endpoint;
use citestream_host::config::Config;
use citestream_host::errors::ErrorShape;
use citestream_host::metrics::{Metrics, UpstreamRetry};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::body::{AnyBody, Paced, full};
use crate::demo;
use conn::{Clients, PoolSettings};
#[cfg(test)]
use route::Base;
use route::Routes;
use tunnel::{ProxyEnv, Tunnel};

/// How long the demo model waits between two streamed events.
const DEMO_PACE: Duration = Duration::from_millis(20);

/// The longest `retry-after` the gateway waits before a retry; a longer one
/// goes to the client.
pub(crate) const RETRY_AFTER_CAP: Duration = Duration::from_secs(10);

/// The first backoff (doubled on each further retry, up to
/// [`BACKOFF_MAX`]; with jitter: between half of it and all of it).
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// How much longer than `upstream.connect_timeout` a sent request may wait
/// for a connection to take it (the TLS handshake, the HTTP handshake).
const HANDOFF_GRACE: Duration = Duration::from_secs(5);

/// Why there is no upstream response.
#[derive(Debug)]
pub(crate) enum UpstreamFailure {
    /// Refused, reset, TLS failure, … (502).
    Unreachable(String),
    /// Connect or headers timeout (504).
    Timeout(String),
}

/// A request body for the upstream.
#[derive(Debug)]
pub(crate) enum OutBody {
    /// All of it (a grounded request's body): can be sent again.
    Whole(Bytes),
    /// Streamed from the client (pass-through): sent once, unless empty.
    Streamed(AnyBody),
}

/// The upstream: an HTTP(S) model server, or the demo model.
#[derive(Debug)]
pub(crate) enum Upstream {
    /// `upstream.base_url = ""`.
    Demo,
    /// A model server.
    Http(Box<HttpUpstream>),
}

/// Model servers reached over HTTP(S).
#[derive(Debug)]
pub(crate) struct HttpUpstream {
    /// Plain-HTTP/1 upstreams reached directly.
    h1: h1::H1Pool,
    /// HTTPS ones, and any through a proxy.
    clients: Clients<HttpsConnector<Tunnel>>,
    proxies: ProxyEnv,
    routes: Routes,
    headers_timeout: Duration,
    /// How long a sent request may wait for a connection to take it.
    handoff_timeout: Duration,
    retries: u32,
    metrics: Arc<Metrics>,
}

impl Upstream {
    /// The upstream of `cfg` (the URLs were validated with the config).
    pub(crate) fn new(
        cfg: &Config,
        metrics: Arc<Metrics>,
        tls: &rustls::ClientConfig,
    ) -> Result<Upstream, String> {
        let up = &cfg.upstream;
        if up.base_url.is_empty() {
            return Ok(Upstream::Demo);
        }
        let routes = Routes::new(cfg)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(up.connect_timeout));
        let proxies = ProxyEnv::from_env()?;
        if !proxies.is_empty() {
            tracing::info!(
                "upstream connections go through the proxy of HTTPS_PROXY/HTTP_PROXY (NO_PROXY exempts)"
            );
        }
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(Tunnel::new(http, proxies.clone()));
        let pool = PoolSettings {
            idle_timeout: up.pool_idle_timeout,
            max_idle_per_host: up.pool_max_idle_per_host,
        };
        let clients = Clients::new(https, pool);
        Ok(Upstream::Http(Box::new(HttpUpstream {
            h1: h1::H1Pool::new(pool, up.connect_timeout),
            clients,
            proxies,
            routes,
            headers_timeout: up.headers_timeout,
            handoff_timeout: up.connect_timeout + HANDOFF_GRACE,
            retries: up.retries,
            metrics,
        })))
    }

    /// A name for the start-up banner.
    pub(crate) fn describe(&self) -> String {
        match self {
            Upstream::Demo => "demo (built-in model)".to_owned(),
            Upstream::Http(h) => {
                let b = h.routes.default_target().base(ErrorShape::OpenAi, 0);
                format!("{}://{}{}", b.scheme, b.authority, b.path)
            }
        }
    }

    /// Sends a request (its URI holds only the path and query) and waits
    /// for the response headers.
    pub(crate) async fn send(
        &self,
        endpoint: Option<Endpoint>,
        req: Request<OutBody>,
    ) -> Result<Response<AnyBody>, UpstreamFailure> {
        match self {
            Upstream::Demo => Ok(demo_send(endpoint, req).await),
            Upstream::Http(h) => h.send(req).await,
        }
    }
}

/// The body of each attempt.
enum Payload {
    Again(Bytes),
    Once(Option<AnyBody>),
}

impl Payload {
    fn take(&mut self) -> Option<AnyBody> {
        match self {
            Payload::Again(b) => Some(full(b.clone())),
            Payload::Once(b) => b.take(),
        }
    }

    fn again(&self) -> bool {
        matches!(self, Payload::Again(_))
    }
}

impl HttpUpstream {
    async fn send(&self, req: Request<OutBody>) -> Result<Response<AnyBody>, UpstreamFailure> {
        let (parts, body) = req.into_parts();
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let shape = ErrorShape::for_path(parts.uri.path());
        let (target, mut payload) = match body {
            OutBody::Whole(b) => {
                let (t, b) = self.routes.pick(&b);
                (t, Payload::Again(b))
            }
            OutBody::Streamed(b) if b.is_end_stream() => {
                (self.routes.default_target(), Payload::Again(Bytes::new()))
            }
            OutBody::Streamed(b) => (self.routes.default_target(), Payload::Once(Some(b))),
        };
        let mut headers = parts.headers;
        headers.remove(header::HOST);
        if let Payload::Again(b) = &payload {
            // A whole body's length is its own (a route's `upstream_model`
            // may have changed it).
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(b.len()));
        }
        if let Some(key) = &target.api_key {
            set_key(&mut headers, shape, key);
        }
        let mut at = target.first();
        let mut retries = self.retries;
        let mut stale_retry = true;
        let mut unsent_retry = true;
        let mut fresh = false;
        let mut attempt = 0u32;
        loop {
            let base = target.base(shape, at);
            let uri = base
                .join(&pq)
                .map_err(|e| UpstreamFailure::Unreachable(format!("bad upstream URL: {e}")))?;
            let Some(body) = payload.take() else {
                return Err(UpstreamFailure::Unreachable(
                    "request body already sent".into(),
                ));
            };
            let mut r = Request::new(());
            *r.method_mut() = parts.method.clone();
            *r.headers_mut() = headers.clone();
            let (r_parts, ()) = r.into_parts();
            let headers_by = tokio::time::Instant::now() + self.headers_timeout;
            let res = if self.direct(&uri) {
                self.send_h1(r_parts, body, uri, &base.authority, fresh, headers_by)
                    .await
            } else {
                self.send_pooled(r_parts, body, uri, fresh, headers_by)
                    .await
            };
            fresh = false;
            let can_retry = retries > 0 && payload.again();
            match res {
                Ok(resp) => {
                    let wait = (can_retry && retryable_status(resp.status()))
                        .then(|| wait_before_retry(attempt, resp.headers()))
                        .flatten();
                    let Some(wait) = wait else {
                        return Ok(resp);
                    };
                    drop(resp);
                    self.metrics.upstream_retry(UpstreamRetry::Status);
                    retries -= 1;
                    attempt += 1;
                    at += 1;
                    tokio::time::sleep(wait).await;
                }
                Err(Attempt::Stale(f)) if stale_retry && payload.again() => {
                    tracing::debug!(error = %f.message(), "reused upstream connection failed; sending again");
                    self.metrics.upstream_retry(UpstreamRetry::StaleConnection);
                    stale_retry = false;
                    fresh = true;
                }
                Err(Attempt::Unsent(f)) if unsent_retry && payload.again() => {
                    tracing::warn!("{}; sending again", f.message());
                    self.metrics.upstream_retry(UpstreamRetry::StaleConnection);
                    unsent_retry = false;
                    fresh = true;
                }
                Err(Attempt::Connect(f)) if can_retry => {
                    tracing::debug!(error = %f.message(), "upstream connect failed; trying again");
                    self.metrics.upstream_retry(UpstreamRetry::Connect);
                    retries -= 1;
                    attempt += 1;
                    at += 1;
                    if target.endpoints(shape) == 1 {
                        tokio::time::sleep(backoff(attempt - 1)).await;
                    }
                }
                Err(
                    Attempt::Stale(f)
                    | Attempt::Unsent(f)
                    | Attempt::Connect(f)
                    | Attempt::Failed(f),
                ) => return Err(f),
            }
        }
    }

    /// Whether a request to `uri` goes on [`h1`]'s connections: plain HTTP,
    /// not through a proxy.
    fn direct(&self, uri: &http::Uri) -> bool {
        uri.scheme() == Some(&http::uri::Scheme::HTTP)
            && (self.proxies.is_empty() || !self.proxies.proxies(uri))
    }

    /// One attempt on [`h1`]'s connections, driven in this task.
    async fn send_h1(
        &self,
        mut parts: http::request::Parts,
        body: AnyBody,
        uri: http::Uri,
        host: &http::uri::Authority,
        fresh: bool,
        headers_by: tokio::time::Instant,
    ) -> Result<Response<AnyBody>, Attempt> {
        // What hyper-util's client does for HTTP/1: origin form, `host`
        // with the port unless it is the scheme's default.
        parts.uri = uri
            .path_and_query()
            .cloned()
            .map_or_else(http::Uri::default, Into::into);
        let host_header = match host.port_u16() {
            Some(p) if p != 80 => format!("{}:{p}", host.host()),
            _ => host.host().to_owned(),
        };
        let host_header = HeaderValue::from_str(&host_header).map_err(|e| {
            Attempt::Failed(UpstreamFailure::Unreachable(format!(
                "bad upstream host: {e}"
            )))
        })?;
        parts.headers.insert(header::HOST, host_header);
        let r = Request::from_parts(parts, body);
        match tokio::time::timeout_at(headers_by, self.h1.send(host, r, fresh)).await {
            Err(_) => Err(Attempt::Failed(UpstreamFailure::Timeout(format!(
                "no response headers within {:?}",
                self.headers_timeout
            )))),
            Ok(Err(h1::Failed::Connect(f))) => Err(Attempt::Connect(f)),
            Ok(Err(h1::Failed::Request {
                failure,
                stale: true,
            })) => Err(Attempt::Stale(failure)),
            Ok(Err(h1::Failed::Request {
                failure,
                stale: false,
            })) => Err(Attempt::Failed(failure)),
            // `Driven`'s errors are boxed already: no `MapErr` layer.
            Ok(Ok(resp)) => Ok(resp.map(BodyExt::boxed)),
        }
    }

    /// One attempt on hyper-util's pooled client (HTTPS, or through a
    /// proxy).
    async fn send_pooled(
        &self,
        mut parts: http::request::Parts,
        body: AnyBody,
        uri: http::Uri,
        fresh: bool,
        headers_by: tokio::time::Instant,
    ) -> Result<Response<AnyBody>, Attempt> {
        parts.uri = uri;
        let sent = std::time::Instant::now();
        let client = if fresh {
            self.clients.fresh()
        } else {
            self.clients.pooled()
        };
        let (body, taken) = conn::Handed::wrap(body);
        let r = Request::from_parts(parts, body);
        let handoff_by = (tokio::time::Instant::now() + self.handoff_timeout).min(headers_by);
        let request = client.request(r);
        tokio::pin!(request);
        let early = tokio::select! {
            res = &mut request => Some(res),
            () = tokio::time::sleep_until(handoff_by) => None,
        };
        let res = match early {
            Some(res) => res,
            None if !taken.load(Ordering::Acquire) => {
                // No connection took the request: nothing of it was
                // written (the client's pool lost it, see the module
                // doc); the pinned future is dropped (cancelled) as this
                // attempt ends.
                return Err(Attempt::Unsent(UpstreamFailure::Unreachable(format!(
                    "no upstream connection took the request within {:?}",
                    self.handoff_timeout
                ))));
            }
            None => match tokio::time::timeout_at(headers_by, request).await {
                Err(_) => {
                    return Err(Attempt::Failed(UpstreamFailure::Timeout(format!(
                        "no response headers within {:?}",
                        self.headers_timeout
                    ))));
                }
                Ok(res) => res,
            },
        };
        match res {
            Ok(resp) => Ok(resp.map(|b| b.map_err(Into::into).boxed())),
            Err(e) if conn::is_stale(&e, sent) => Err(Attempt::Stale(classify(&e))),
            Err(e) if e.is_connect() => Err(Attempt::Connect(classify(&e))),
            Err(e) => Err(Attempt::Failed(classify(&e))),
        }
    }
}

/// Why an attempt got no response, and what it allows; each holds the
/// failure the client gets when no further attempt is made.
enum Attempt {
    /// A reused connection failed before any response byte (the
    /// keep-alive race): safe to send again.
    Stale(UpstreamFailure),
    /// No connection took the request in time (hyper-util's pool): nothing
    /// of it was written.
    Unsent(UpstreamFailure),
    /// No connection was made: another endpoint may take it.
    Connect(UpstreamFailure),
    /// Anything else.
    Failed(UpstreamFailure),
}

impl UpstreamFailure {
    /// What went wrong, for the log.
    fn message(&self) -> &str {
        match self {
            UpstreamFailure::Unreachable(m) | UpstreamFailure::Timeout(m) => m,
        }
    }
}

/// 429, 502, 503, 504: worth another try.
fn retryable_status(s: StatusCode) -> bool {
    matches!(s.as_u16(), 429 | 502 | 503 | 504)
}

/// How long to wait before retry number `attempt` (0-based) after an
/// answer with these headers; `None`: do not retry (its `retry-after` is
/// above [`RETRY_AFTER_CAP`]).
fn wait_before_retry(attempt: u32, h: &HeaderMap) -> Option<Duration> {
    let after = h
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    match after {
        Some(d) if d > RETRY_AFTER_CAP => None,
        Some(d) => Some(d),
        None => Some(backoff(attempt)),
    }
}

/// Exponential backoff with jitter: between half and all of
/// `BACKOFF_BASE * 2^attempt` (at most [`BACKOFF_MAX`]).
fn backoff(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let full = BACKOFF_BASE
        .saturating_mul(1u32 << attempt.min(16))
        .min(BACKOFF_MAX);
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u32(attempt);
    // A fraction in [0.5, 1).
    let f = 0.5 + (h.finish() >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
    full.mul_f64(f)
}

/// An error and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

/// Replaces the client's credentials with the route's key, through the
/// exchange's one rule for the upstream key header
/// ([`citestream_host::exchange::upstream_key`]).
pub(crate) fn set_key(h: &mut HeaderMap, shape: ErrorShape, key: &str) {
    let mut edits = citestream_host::exchange::HeaderEdits::default();
    citestream_host::exchange::upstream_key(&mut edits, shape, key);
    edits.apply(h);
}

/// Connect timeouts are 504s, every other failure before the headers a 502.
fn classify(e: &(dyn std::error::Error + 'static)) -> UpstreamFailure {
    let msg = chain(e);
    let mut timed_out = false;
    let mut src = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
        }
        src = s.source();
    }
    if timed_out || msg.contains("timed out") {
        UpstreamFailure::Timeout(msg)
    } else {
        UpstreamFailure::Unreachable(msg)
    }
}

/// The demo model's answer as an upstream response.
async fn demo_send(endpoint: Option<Endpoint>, req: Request<OutBody>) -> Response<AnyBody> {
    let path = req.uri().path().to_owned();
    let Some(endpoint) = endpoint else {
        let shape = ErrorShape::for_path(&path);
        let e = citestream_host::errors::ErrorReply::not_found(shape, req.method().as_str(), &path);
        return json_response(e.status(), e.into_body());
    };
    let body = match req.into_body() {
        OutBody::Whole(b) => b,
        OutBody::Streamed(b) => b.collect().await.map(|c| c.to_bytes()).unwrap_or_default(),
    };
    let r = demo::respond(endpoint, &body);
    let body = match r.body {
        demo::DemoBody::Whole(b) => full(b),
        demo::DemoBody::Events(ev) => http_body_util::BodyExt::boxed(Paced::new(ev, DEMO_PACE)),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = http::StatusCode::from_u16(r.status).unwrap_or(http::StatusCode::OK);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(r.content_type),
    );
    resp
}

/// A JSON response.
pub(crate) fn json_response(status: u16, body: Bytes) -> Response<AnyBody> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn http_upstream(base: &str) -> (Upstream, Arc<Metrics>) {
        let mut cfg = Config::default();
        cfg.upstream.base_url = base.to_owned();
        cfg.upstream.retries = 0;
        let metrics = Arc::new(Metrics::new());
        let tls = citestream_host::tls::client_config(&cfg.tls).unwrap();
        (Upstream::new(&cfg, metrics.clone(), &tls).unwrap(), metrics)
    }

    /// Reads a request's head and its `content-length` body.
    async fn read_request(s: &mut tokio::net::TcpStream) -> Option<String> {
        let mut buf = Vec::new();
        let mut b = [0u8; 1024];
        loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..at]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                while buf.len() < at + 4 + len {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return None,
                        Ok(n) => buf.extend_from_slice(&b[..n]),
                    }
                }
                return Some(String::from_utf8_lossy(&buf).into_owned());
            }
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        }
    }

    #[tokio::test]
    async fn a_stale_reused_connection_is_sent_again_once_on_a_fresh_one() {
        // Every connection answers its first request and then drops the
        // next one without a byte (the keep-alive race, every time).
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let Some(req) = read_request(&mut s).await else {
                        return;
                    };
                    log.lock().unwrap().push(req);
                    s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await
                        .unwrap();
                    let _ = read_request(&mut s).await;
                });
            }
        });
        let (up, metrics) = http_upstream(&format!("http://{addr}/v1"));
        for i in 0..3 {
            let mut req = Request::new(OutBody::Whole(Bytes::from(format!("{{\"n\":{i}}}"))));
            *req.method_mut() = http::Method::POST;
            *req.uri_mut() = "/v1/chat/completions?x=1".parse().unwrap();
            let resp = up.send(None, req).await.unwrap();
            assert_eq!(resp.status(), 200);
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        for (i, req) in seen.iter().enumerate() {
            assert!(
                req.starts_with("POST /v1/chat/completions?x=1 HTTP/1.1\r\n"),
                "{req}"
            );
            assert!(
                req.to_ascii_lowercase()
                    .contains(&format!("\r\nhost: {addr}\r\n")),
                "{req}"
            );
            assert!(req.ends_with(&format!("{{\"n\":{i}}}")), "{req}");
        }
        // Requests 2 and 3 each went to a pooled connection first.
        assert!(
            metrics
                .render()
                .contains("citestream_upstream_retries_total{reason=\"stale_connection\"} 2"),
            "{}",
            metrics.render()
        );
    }

    #[test]
    fn join_paths() {
        let b = Base::parse("https://api.openai.com").unwrap();
        assert_eq!(
            b.join("/v1/chat/completions").unwrap().to_string(),
            "https://api.openai.com/v1/chat/completions"
        );
        let b = Base::parse("https://api.openai.com/v1/").unwrap();
        assert_eq!(
            b.join("/v1/models?x=1").unwrap().to_string(),
            "https://api.openai.com/v1/models?x=1"
        );
        let b = Base::parse("http://127.0.0.1:9000/proxy").unwrap();
        assert_eq!(
            b.join("/v1/messages").unwrap().to_string(),
            "http://127.0.0.1:9000/proxy/v1/messages"
        );
        let b = Base::parse("http://h/v1").unwrap();
        assert_eq!(b.join("/v1x").unwrap().to_string(), "http://h/v1/v1x");
    }
}

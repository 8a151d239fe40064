//! One HTTP exchange (a request and its response) as every host runs it:
//! the per-request type that owns every decision that is not socket or
//! protocol plumbing. `citestream serve` drives it with hyper bodies,
//! `citestream ext-proc` with Envoy's messages; neither decides anything
//! about a request or a response on its own.
//!
//! ```text
//! Exchange::new(head) ── handling(): Grounded(endpoint) | Proxied (/v1/…) | NotOurs
//!   on_request(body)  ── Err(Reply) 401/400 (413: request_too_large)
//!                    └─ Forward { body, edits }      → the host sends it upstream
//!   on_response_headers(status, headers)             (or on_error(class) → the 502/504 Reply)
//!                    └─ ResponseHead { edits, body: Pass | Stream | Whole }
//!   on_response_body(piece, end) + next_output()*   → the pieces to send the client
//!   drop                                            → the log line, the metrics
//! ```
//!
//! Contract:
//! * **Handling**: `POST` to a grounded endpoint's path
//!   ([`Endpoint::from_path`]) is grounded (the request rules of
//!   [docs/reference/request.md](../../../docs/reference/request.md)); any
//!   other request under `/v1/` is proxied untouched (authenticated in
//!   `keys` mode); anything else is not ours (the host answers it, or lets
//!   it through unprocessed).
//! * **Request headers** ([`Forward::edits`]): `x-request-id` (the
//!   client's when it is 1–200 visible ASCII characters, else a new one;
//!   also returned to the client), `content-length` of the body to forward,
//!   `accept-encoding: identity` when the response may be rewritten. Keys:
//!   with `upstream.api_key` set the client's `authorization` and
//!   `x-api-key` are replaced by it (`Authorization: Bearer` on
//!   OpenAI-shaped paths, `x-api-key` under `/v1/messages`); without it,
//!   in `keys` mode the client's are removed unless
//!   `upstream.forward_client_auth = true`, and in `open` mode they go
//!   through. A client's gateway key never reaches the model server by
//!   default.
//! * **Quota**: a search the sources used stays reserved until the
//!   upstream's response headers: committed on a 2xx status, released on
//!   any other status, on [`Exchange::on_error`], or when the exchange is
//!   dropped before (the client left). `x-citestream-searches-remaining`
//!   counts a reserved search as used.
//! * **Response** ([`Exchange::on_response_headers`]), rewritten only when
//!   sources were injected and the status is 2xx:
//!   * content type: `text/event-stream` → [`BodyPlan::Stream`], event by
//!     event as it arrives; a JSON type (`application/json`, `…+json`) or
//!     none → [`BodyPlan::Whole`], held up to `rewrite.max_whole_body`
//!     (default 64 MiB; a larger body passes through unchanged, from where
//!     it crossed the cap); any other type passes;
//!   * compression: `gzip` and `deflate` are inflated (the client gets the
//!     body uncompressed: `content-encoding` removed); any other coding
//!     passes untouched with `x-citestream-rewrite: skipped-content-encoding`;
//!   * headers: `x-citestream-search` and `x-citestream-searches-remaining`
//!     on every grounded response; `cache-control: no-cache` and
//!     `x-accel-buffering: no` on every SSE response; `content-length`
//!     removed when the body is rewritten.
//! * **Body** ([`Exchange::on_response_body`] then [`Exchange::next_output`]
//!   until `None`): unchanged bytes are slices of the input (no copy);
//!   output is ready as soon as the rewriter has it. Memory: what the core
//!   rewriter holds, a whole body up to the cap, and at most
//!   [`inflate::INPUT_STEP`] compressed bytes inflated at a time.
//! * **Trace** (traces on, see `crate::telemetry`): the `upstream` span
//!   ([`UpstreamSpan`]) opens in [`Exchange::on_request`] as the request
//!   goes upstream, a child of the host's current span (its `request`),
//!   and `traceparent` (with the client's `tracestate`) naming it goes into
//!   [`Forward::edits`], so the model server sees it as the parent; the
//!   response head records its status and time, the first byte of the
//!   response body its time and ends it (an empty body ends it too); a
//!   failure, before the head or in the body, ends it as an error.
//! * **Failures** ([`Exchange::on_error`]): a 502 (refused, TLS, broken)
//!   or 504 (timeout) in the endpoint's error shape whose message names the
//!   class only; the detail goes to the log.
//! * **Record**: one JSON log line per request when it ends (or is
//!   dropped), at `WARN` for a 5xx status: `request_id`, `method`,
//!   `path`, `endpoint`, `model`, `account`, `status` (0: none sent),
//!   `search`, `cache` (`hit` or `miss`, absent without a search cache
//!   or a search), `sources`, `query_chars` (characters of the formed
//!   search query), `search_ms`, `upstream_ms`,
//!   `duration_ms`, `bytes` (body bytes sent), `client`, `stream`,
//!   `outcome` ([`Ending`]), `error`. Metrics: `citestream_requests_total`
//!   with the status sent, upstream latency and status class, open
//!   streams, time spent per rewritten piece. Requests that are not ours
//!   and were not answered here are neither logged nor counted.
//!
//! The exchange does no I/O besides the quota store and the search
//! provider (through [`Grounding`]); its async methods need a tokio
//! runtime only for a Redis store.
//!
//! # Example
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use citestream_host::config::Config;
//! use citestream_host::exchange::{BodyPlan, Exchange, Handling, RequestHead};
//! use citestream_host::grounding::Grounding;
//!
//! let cfg = Config::from_toml_with_env("", &|_| None).unwrap();
//! let g = Arc::new(Grounding::new(&cfg).await.unwrap());
//! let head = RequestHead::new(http::Method::POST, "/v1/chat/completions", http::HeaderMap::new());
//! let mut ex = Exchange::new(g, head);
//! assert!(matches!(ex.handling(), Handling::Grounded(_)));
//! let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
//! let fwd = ex.on_request(Some(Bytes::from_static(body))).await.unwrap();
//! assert!(fwd.edits.get("x-request-id").is_some());
//! let mut h = http::HeaderMap::new();
//! h.insert("content-type", "application/json".parse().unwrap());
//! let head = ex.on_response_headers(200, &h).await;
//! assert_eq!(head.body, BodyPlan::Pass); // nothing injected: passes
//! assert_eq!(head.edits.get("x-citestream-search").unwrap(), "not-requested");
//! ex.on_response_body(Bytes::from_static(b"{}"), true);
//! assert_eq!(&ex.next_output().unwrap().unwrap()[..], b"{}");
//! assert!(ex.next_output().unwrap().is_none());
//! # });
//! ```

mod edits;
pub mod inflate;
mod record;

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::telemetry::{self, Instrument};

use bytes::{Bytes, BytesMut};
use citestream::flow::{Outcome, ResponsePlan};
use citestream::quota::Reservation;
use citestream::request::Endpoint;
use citestream::{Rewriter, StreamRewriter};
use http::Method;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::errors::{ErrorReply, ErrorShape};
use crate::grounding::Grounding;
use crate::metrics::{Metrics, OpenStream, SearchLabel, UpstreamError};
use crate::store::Store;
use crate::telemetry::UpstreamSpan;

pub use crate::grounding::key_warning;
pub use edits::HeaderEdits;
pub use record::Ending;

use inflate::Inflater;

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const X_SEARCH: HeaderName = HeaderName::from_static("x-citestream-search");
const X_REMAINING: HeaderName = HeaderName::from_static("x-citestream-searches-remaining");
const X_REWRITE: HeaderName = HeaderName::from_static("x-citestream-rewrite");
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

/// What the host knows of a request when its headers have arrived.
#[derive(Clone, Debug)]
pub struct RequestHead {
    /// The method.
    pub method: Method,
    /// The path, with its query string if any.
    pub path: String,
    /// The client's headers (without HTTP/2 pseudo-headers).
    pub headers: HeaderMap,
    /// The client's address, when the host knows it (for the log).
    pub client: Option<SocketAddr>,
}

impl RequestHead {
    /// A head without a client address.
    #[must_use]
    pub fn new(method: Method, path: &str, headers: HeaderMap) -> RequestHead {
        RequestHead {
            method,
            path: path.to_owned(),
            headers,
            client: None,
        }
    }
}

/// How the exchange treats a request (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handling {
    /// A grounded endpoint.
    Grounded(Endpoint),
    /// Another request under `/v1/`: proxied untouched.
    Proxied,
    /// Not ours.
    NotOurs,
}

/// The request to send upstream.
#[derive(Debug)]
pub struct Forward {
    /// The body to send; `None`: the client's, unchanged (streamed).
    pub body: Option<Bytes>,
    /// The changes to the client's headers.
    pub edits: HeaderEdits,
}

/// An answer the exchange gives the client itself (an error in the
/// endpoint's shape).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: Bytes,
    /// Its headers (`content-type`, `x-request-id`, the search headers
    /// when a search was decided).
    pub headers: HeaderEdits,
}

/// What to do with the response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyPlan {
    /// Relay it as it comes (still through [`Exchange::on_response_body`],
    /// which hands each piece back unchanged, so the record counts it; a
    /// host that cannot see the body may skip it).
    Pass,
    /// An SSE stream rewritten event by event.
    Stream,
    /// A whole body rewritten at its end (output only then, or once it
    /// crosses the cap).
    Whole,
}

/// The response headers' fate.
#[derive(Debug)]
pub struct ResponseHead {
    /// The changes to the upstream's headers.
    pub edits: HeaderEdits,
    /// What happens to the body.
    pub body: BodyPlan,
}

/// Why there is no (complete) upstream response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// Connection refused, reset, no route, DNS (502).
    Refused,
    /// The TLS handshake failed (502).
    Tls,
    /// No connection or no response headers in time (504).
    Timeout,
    /// The response broke off (502 when nothing was sent yet).
    Broken,
}

impl FailureClass {
    /// The class's name in logs.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Refused => "refused",
            FailureClass::Tls => "tls",
            FailureClass::Timeout => "timeout",
            FailureClass::Broken => "broken",
        }
    }
}

/// The response body could not be decoded (invalid compressed data): the
/// client's response must end as broken.
#[derive(Debug)]
pub struct BodyError(inflate::InflateError);

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BodyError {}

/// The response body's state.
enum Sink {
    Pass,
    Stream(Box<Rewriter>),
    Whole { held: BytesMut },
}

/// The event-latency clock of a rewritten stream: it times the first
/// upstream piece and every [`PieceClock::EVERY`]th after it, so the
/// histogram `citestream_event_added_latency_seconds` is a sample (its count
/// is the pieces timed, not all pieces) and untimed pieces cost one
/// increment, not two clock reads and three atomic adds.
#[derive(Debug, Default)]
struct PieceClock {
    n: u32,
}

impl PieceClock {
    /// One piece in this many is timed.
    const EVERY: u32 = 16;

    /// The clock for the next piece: `Some` when it is one to time.
    #[inline]
    fn start(&mut self) -> Option<Instant> {
        let timed = self.n.is_multiple_of(Self::EVERY);
        self.n = self.n.wrapping_add(1);
        timed.then(Instant::now)
    }

    /// Records a timed piece's time.
    #[inline]
    fn stop(t0: Option<Instant>, metrics: &Metrics) {
        if let Some(t0) = t0 {
            metrics.event_added_latency(t0.elapsed());
        }
    }
}

/// One exchange (see the module docs).
pub struct Exchange {
    grounding: Arc<Grounding>,
    handling: Handling,
    method: Method,
    path: String,
    headers: HeaderMap,
    client: Option<SocketAddr>,
    request_id: String,
    started: Instant,
    // Request side.
    rejected: bool,
    outcome: Option<Outcome>,
    plan: Option<ResponsePlan>,
    remaining: Option<u32>,
    pending: Option<Reservation<Store>>,
    account: String,
    model: Option<String>,
    stream: bool,
    search_time: Option<Duration>,
    query_chars: Option<usize>,
    cache: crate::cache::CacheResult,
    sent_at: Option<Instant>,
    upstream_time: Option<Duration>,
    upstream_span: Option<UpstreamSpan>,
    // Response side.
    status: Option<u16>,
    sink: Sink,
    inflate: Option<Inflater>,
    out: VecDeque<Bytes>,
    input_ended: bool,
    sink_ended: bool,
    open: Option<OpenStream>,
    bytes: u64,
    pieces: PieceClock,
    error: Option<String>,
    recorded: bool,
}

impl fmt::Debug for Exchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exchange")
            .field("request_id", &self.request_id)
            .field("handling", &self.handling)
            .field("outcome", &self.outcome)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl Exchange {
    /// A new exchange for a request whose headers have arrived.
    #[must_use]
    pub fn new(grounding: Arc<Grounding>, head: RequestHead) -> Exchange {
        let RequestHead {
            method,
            path,
            headers,
            client,
        } = head;
        let path = match path.find(['?', '#']) {
            Some(i) => path[..i].to_owned(),
            None => path,
        };
        let handling = match Endpoint::from_path(&path) {
            Some(e) if method == Method::POST => Handling::Grounded(e),
            _ if path.starts_with("/v1/") => Handling::Proxied,
            _ => Handling::NotOurs,
        };
        let request_id = request_id(&headers);
        Exchange {
            grounding,
            handling,
            method,
            path,
            headers,
            client,
            request_id,
            started: Instant::now(),
            rejected: false,
            outcome: None,
            plan: None,
            remaining: None,
            pending: None,
            account: String::new(),
            model: None,
            stream: false,
            search_time: None,
            query_chars: None,
            cache: crate::cache::CacheResult::Off,
            sent_at: None,
            upstream_time: None,
            upstream_span: None,
            status: None,
            sink: Sink::Pass,
            inflate: None,
            out: VecDeque::new(),
            input_ended: false,
            sink_ended: false,
            open: None,
            bytes: 0,
            pieces: PieceClock::default(),
            error: None,
            recorded: false,
        }
    }

    /// How the request is handled.
    #[must_use]
    pub fn handling(&self) -> Handling {
        self.handling
    }

    /// The grounded endpoint, if the request is grounded.
    #[must_use]
    pub fn endpoint(&self) -> Option<Endpoint> {
        match self.handling {
            Handling::Grounded(e) => Some(e),
            _ => None,
        }
    }

    /// The client's request headers.
    #[must_use]
    pub fn request_headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The request id (sent upstream and returned to the client).
    #[must_use]
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// Why sources were or were not injected (after [`Exchange::on_request`]
    /// of a grounded request).
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome
    }

    /// The account's searches left today, when a search was asked for
    /// (a reserved search counts as used until it is released).
    #[must_use]
    pub fn remaining(&self) -> Option<u32> {
        self.remaining
    }

    /// The account the request counts against (after auth).
    #[must_use]
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The request asked for a streamed response.
    #[must_use]
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// The response plan: `Some` when sources were injected.
    #[must_use]
    pub fn plan(&self) -> Option<&ResponsePlan> {
        self.plan.as_ref()
    }

    /// Largest request body of a grounded request
    /// (`server.max_request_body`); a larger one is answered with
    /// [`Exchange::request_too_large`].
    #[must_use]
    pub fn max_request_body(&self) -> u64 {
        self.grounding.limits().max_request_body
    }

    /// How long a started response body may send nothing
    /// (`upstream.idle_timeout`; zero: no limit). A host that reads the
    /// upstream's body cuts it after this long without a piece and ends
    /// the client's response as broken ([`Exchange::on_broken`]).
    #[must_use]
    pub fn idle_timeout(&self) -> Duration {
        self.grounding.limits().idle_timeout
    }

    fn shape(&self) -> ErrorShape {
        self.endpoint()
            .map_or_else(|| ErrorShape::for_path(&self.path), ErrorShape::from)
    }

    /// Answers the request with `e` before it went upstream.
    fn reject(&mut self, e: &ErrorReply) -> Reply {
        self.rejected = true;
        let r = self.reply(e);
        self.finish(Ending::Complete);
        r
    }

    fn reply(&mut self, e: &ErrorReply) -> Reply {
        self.status = Some(e.status());
        self.bytes += e.body().len() as u64;
        let mut headers = HeaderEdits::default();
        headers.set(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        self.id_edit(&mut headers);
        self.search_edits(&mut headers);
        Reply {
            status: e.status(),
            body: e.body().clone(),
            headers,
        }
    }

    fn id_edit(&self, edits: &mut HeaderEdits) {
        edits.set_str(X_REQUEST_ID, &self.request_id);
    }

    fn search_edits(&self, edits: &mut HeaderEdits) {
        if let Some(o) = self.outcome {
            edits.set(X_SEARCH, HeaderValue::from_static(o.as_str()));
            if let Some(n) = self.remaining {
                edits.set(X_REMAINING, HeaderValue::from(n));
            }
        }
    }

    /// The 404 for a request that is not ours, when the host answers those
    /// itself.
    pub fn not_found(&mut self) -> Reply {
        let e = ErrorReply::not_found(self.shape(), self.method.as_str(), &self.path);
        self.reject(&e)
    }

    /// The 413 for a request body over [`Exchange::max_request_body`].
    pub fn request_too_large(&mut self) -> Reply {
        let e = ErrorReply::too_large(self.shape(), self.max_request_body());
        self.reject(&e)
    }

    /// The 400 for a request body that could not be read (`detail` goes to
    /// the log only).
    pub fn request_unreadable(&mut self, detail: &str) -> Reply {
        self.error = Some(detail.to_owned());
        let e = ErrorReply::invalid_request(self.shape(), "Could not read the request body.", None);
        self.reject(&e)
    }

    /// Checks the client's key now (a host that sees the headers before
    /// the body answers a 401 early); [`Exchange::on_request`] checks it
    /// again.
    ///
    /// # Errors
    /// The 401 to answer in `keys` mode without a known key.
    pub fn authenticate(&mut self) -> Result<(), Reply> {
        if self.handling == Handling::NotOurs {
            return Ok(());
        }
        match self
            .grounding
            .accounts()
            .authenticate_headers(&self.headers)
        {
            Ok(a) => {
                a.id().clone_into(&mut self.account);
                Ok(())
            }
            Err(e) => Err(self.reject(&ErrorReply::unauthorized(self.shape(), &e.to_string()))),
        }
    }

    /// Runs the request side: auth, then for a grounded request the
    /// request rules with the whole `body` (`None` is an empty body); a
    /// proxied request's body is not needed (`None`).
    ///
    /// # Errors
    /// The [`Reply`] to answer instead of going upstream (401, 400).
    pub async fn on_request(&mut self, body: Option<Bytes>) -> Result<Forward, Reply> {
        let endpoint = match self.handling {
            Handling::NotOurs => {
                return Ok(Forward {
                    body: None,
                    edits: HeaderEdits::default(),
                });
            }
            Handling::Proxied => {
                self.authenticate()?;
                let mut edits = HeaderEdits::default();
                self.upstream_edits(&mut edits);
                self.sent_at = Some(Instant::now());
                self.upstream_span = UpstreamSpan::open(&mut edits);
                return Ok(Forward { body: None, edits });
            }
            Handling::Grounded(e) => e,
        };
        let body = body.unwrap_or_default();
        let g = match self.grounding.prepare(endpoint, &self.headers, body).await {
            Ok(g) => g,
            Err(e) => return Err(self.reject(&e)),
        };
        let p = g.prepared;
        self.outcome = Some(p.outcome);
        self.remaining = g.remaining;
        self.pending = p.reservation;
        self.account = g.account;
        self.model = g.model;
        self.stream = g.stream;
        self.search_time = g.search_time;
        self.query_chars = g.query_chars;
        self.cache = g.cache;
        let mut edits = HeaderEdits::default();
        self.upstream_edits(&mut edits);
        edits.set(header::CONTENT_LENGTH, HeaderValue::from(p.body.len()));
        if p.plan.is_some() {
            edits.set(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        self.plan = p.plan;
        self.sent_at = Some(Instant::now());
        self.upstream_span = UpstreamSpan::open(&mut edits);
        Ok(Forward {
            body: Some(p.body),
            edits,
        })
    }

    /// `x-request-id` and the key rules.
    fn upstream_edits(&self, edits: &mut HeaderEdits) {
        self.id_edit(edits);
        let rules = self.grounding.key_rules();
        if let Some(key) = &rules.api_key {
            upstream_key(edits, self.shape(), key);
        } else if rules.strip_client {
            edits.remove(header::AUTHORIZATION).remove(X_API_KEY);
        }
    }

    /// The upstream's response headers arrived with `status`: commits or
    /// releases the reserved search and decides the response. A request
    /// that is not ours gets no edits and is not counted.
    pub async fn on_response_headers(&mut self, status: u16, headers: &HeaderMap) -> ResponseHead {
        self.status = Some(status);
        if self.handling == Handling::NotOurs {
            return ResponseHead {
                edits: HeaderEdits::default(),
                body: BodyPlan::Pass,
            };
        }
        if let Some(u) = &self.upstream_span {
            u.headers(status);
        }
        let metrics = self.grounding.metrics().clone();
        let ep = self.endpoint();
        if let Some(t) = self.sent_at.take() {
            let took = t.elapsed();
            self.upstream_time = Some(took);
            metrics.upstream_latency(ep, took);
        }
        metrics.upstream_response(ep, status);
        let ok = (200..300).contains(&status);
        self.settle_quota(ok).await;
        let mut edits = HeaderEdits::default();
        self.id_edit(&mut edits);
        self.search_edits(&mut edits);
        let sse = media_type(headers).is_some_and(|m| m == "text/event-stream");
        if sse {
            edits
                .set(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))
                .set(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
            self.open = Some(metrics.open_stream());
        }
        let pass = |edits| ResponseHead {
            edits,
            body: BodyPlan::Pass,
        };
        let Some(plan) = self.plan.as_ref().filter(|_| ok) else {
            return pass(edits);
        };
        let whole = !sse && media_type(headers).is_none_or(|m| m.ends_with("json"));
        if !sse && !whole {
            return pass(edits);
        }
        let coding = match inflate::coding(headers) {
            Ok(c) => c,
            Err(_) => {
                edits.set(
                    X_REWRITE,
                    HeaderValue::from_static("skipped-content-encoding"),
                );
                return pass(edits);
            }
        };
        let cap = self.grounding.limits().max_whole_body;
        if whole && coding.is_none() && content_length(headers).is_some_and(|n| n > cap as u64) {
            return pass(edits); // over the cap: never held
        }
        if let Some(c) = coding {
            self.inflate = Some(Inflater::new(c));
            edits.remove(header::CONTENT_ENCODING);
        }
        edits.remove(header::CONTENT_LENGTH);
        if sse {
            let rw = plan.stream_rewriter(self.grounding.rewrite_options());
            self.sink = Sink::Stream(Box::new(rw));
            ResponseHead {
                edits,
                body: BodyPlan::Stream,
            }
        } else {
            self.sink = Sink::Whole {
                held: BytesMut::new(),
            };
            ResponseHead {
                edits,
                body: BodyPlan::Whole,
            }
        }
    }

    async fn settle_quota(&mut self, ok: bool) {
        let Some(p) = self.pending.take() else {
            return;
        };
        let r = if ok {
            p.commit().instrument(telemetry::span("quota.commit")).await
        } else {
            // Given back: one more left than the header said.
            self.remaining = self.remaining.map(|n| n.saturating_add(1));
            p.release()
                .instrument(telemetry::span("quota.release"))
                .await
        };
        if let Err(e) = r {
            self.grounding.metrics().quota_error();
            tracing::warn!(error = %e, account = %self.account, "quota store");
        }
    }

    /// A piece of the upstream's response body (`end`: the last one; it may
    /// be empty). Then call [`Exchange::next_output`] until `None`.
    pub fn on_response_body(&mut self, piece: Bytes, end: bool) {
        if self.input_ended {
            return;
        }
        // The first body byte (or the end of an empty body) ends the
        // upstream span.
        let span = self.upstream_span.take_if(|_| !piece.is_empty() || end);
        if let (Some(u), false) = (span, piece.is_empty()) {
            u.first_byte();
        }
        self.input_ended = end;
        if let Some(inf) = &mut self.inflate {
            inf.feed(piece);
            if end {
                inf.end();
            }
            return; // inflated in next_output, a step at a time
        }
        if let Sink::Stream(rw) = &mut self.sink {
            // The hot path: one feed, the first output at once (timed).
            let t0 = self.pieces.start();
            if !piece.is_empty() {
                rw.feed(piece);
            }
            if end {
                rw.finish();
                self.sink_ended = true;
            }
            if let Some(b) = rw.next_output() {
                self.out.push_back(b);
            }
            PieceClock::stop(t0, self.grounding.metrics());
            return;
        }
        self.sink(piece);
        if end {
            self.end_sink();
        }
    }

    /// A piece of the upstream's response body that is not its end, and
    /// the first piece to send the client: the same as
    /// [`Exchange::on_response_body`]`(piece, false)` then
    /// [`Exchange::next_output`], in one call (the per-piece path of a host
    /// that forwards each output as soon as it has it). Then call
    /// [`Exchange::next_output`] until `None` for the rest.
    ///
    /// A piece that passes is handed back as it is (the same `Bytes`, no
    /// copy); a streamed rewrite hands back the rewriter's first output.
    ///
    /// # Errors
    /// As [`Exchange::next_output`].
    #[inline]
    pub fn on_response_piece(&mut self, piece: Bytes) -> Result<Option<Bytes>, BodyError> {
        if self.upstream_span.is_some()
            || self.input_ended
            || self.inflate.is_some()
            || !self.out.is_empty()
        {
            self.on_response_body(piece, false);
            return self.next_output();
        }
        let first = match &mut self.sink {
            Sink::Pass => (!piece.is_empty()).then_some(piece),
            Sink::Stream(rw) => {
                let t0 = self.pieces.start();
                if !piece.is_empty() {
                    rw.feed(piece);
                }
                let b = rw.next_output();
                PieceClock::stop(t0, self.grounding.metrics());
                b
            }
            Sink::Whole { .. } => {
                self.sink(piece);
                return self.next_output();
            }
        };
        if let Some(b) = &first {
            self.bytes += b.len() as u64;
        }
        Ok(first)
    }

    /// The next piece to send the client; `Ok(None)` when it needs more
    /// input (or the body is done).
    ///
    /// # Errors
    /// [`BodyError`]: the body cannot be decoded; end the client's
    /// response as broken (what was output so far is all there is).
    #[inline]
    pub fn next_output(&mut self) -> Result<Option<Bytes>, BodyError> {
        // Between pieces (nothing queued, not inflating, not ended): a
        // passed or held body has nothing; a stream has what its rewriter
        // has.
        if self.out.is_empty() && self.inflate.is_none() && !self.input_ended {
            let b = match &mut self.sink {
                Sink::Pass | Sink::Whole { .. } => return Ok(None),
                Sink::Stream(rw) => rw.next_output(),
            };
            if let Some(b) = &b {
                self.bytes += b.len() as u64;
            }
            return Ok(b);
        }
        self.next_held()
    }

    /// Whether the body passes piece by piece with nothing held: no
    /// rewriter, no inflater, no output waiting, not ended. Then
    /// [`Exchange::next_output`] has nothing to give before the next piece,
    /// and [`Exchange::on_response_piece`] hands each piece back as it is.
    #[inline]
    #[must_use]
    pub fn passes(&self) -> bool {
        matches!(self.sink, Sink::Pass)
            && self.out.is_empty()
            && self.inflate.is_none()
            && !self.input_ended
    }

    /// [`Exchange::next_output`] when something may be held.
    fn next_held(&mut self) -> Result<Option<Bytes>, BodyError> {
        loop {
            if let Some(b) = self.out.pop_front() {
                self.bytes += b.len() as u64;
                return Ok(Some(b));
            }
            let rewritten = match &mut self.sink {
                Sink::Stream(rw) => rw.next_output(),
                _ => None,
            };
            if let Some(b) = rewritten {
                self.bytes += b.len() as u64;
                return Ok(Some(b));
            }
            if let Some(inf) = &mut self.inflate {
                match inf.next_plain() {
                    Ok(Some(plain)) => {
                        self.sink(plain);
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        self.failed(UpstreamError::Broken, e.to_string());
                        self.inflate = None;
                        self.sink = Sink::Pass;
                        self.out.clear();
                        self.sink_ended = true;
                        self.input_ended = true;
                        return Err(BodyError(e));
                    }
                }
                if self.input_ended && !self.sink_ended {
                    self.end_sink();
                    continue;
                }
            }
            if self.sink_ended || (self.input_ended && matches!(self.sink, Sink::Pass)) {
                self.finish(Ending::Complete);
            }
            return Ok(None);
        }
    }

    /// Plain bytes into the sink.
    fn sink(&mut self, plain: Bytes) {
        match &mut self.sink {
            Sink::Pass => {
                if !plain.is_empty() {
                    self.out.push_back(plain);
                }
            }
            Sink::Stream(rw) => {
                let t0 = self.pieces.start();
                rw.feed(plain);
                PieceClock::stop(t0, self.grounding.metrics());
            }
            Sink::Whole { held } => {
                let cap = self.grounding.limits().max_whole_body;
                if held.len() + plain.len() > cap {
                    // Over the cap: what was held and the rest pass unchanged.
                    let head = held.split().freeze();
                    self.out
                        .extend([head, plain].into_iter().filter(|b| !b.is_empty()));
                    self.sink = Sink::Pass;
                } else {
                    held.extend_from_slice(&plain);
                }
            }
        }
    }

    fn end_sink(&mut self) {
        self.sink_ended = true;
        match &mut self.sink {
            Sink::Pass => {}
            Sink::Stream(rw) => rw.finish(),
            Sink::Whole { held } => {
                let held = held.split().freeze();
                let out = match &self.plan {
                    Some(p) => match p.rewrite_body(&held, self.grounding.rewrite_options()) {
                        std::borrow::Cow::Borrowed(_) => held,
                        std::borrow::Cow::Owned(v) => Bytes::from(v),
                    },
                    None => held,
                };
                if !out.is_empty() {
                    self.out.push_back(out);
                }
                self.sink = Sink::Pass;
            }
        }
    }

    /// The upstream failed before its response headers (`detail`: the
    /// internal error, for the log only): the reserved search is released
    /// and the returned 502/504 is the answer. (A whole body that broke off
    /// before the host sent anything is answered the same way, with
    /// [`FailureClass::Broken`].)
    pub async fn on_error(&mut self, class: FailureClass, detail: &str) -> Reply {
        let kind = match class {
            FailureClass::Timeout => UpstreamError::Timeout,
            FailureClass::Broken => UpstreamError::Broken,
            FailureClass::Refused | FailureClass::Tls => UpstreamError::Refused,
        };
        if self.status.is_none() {
            self.settle_quota(false).await;
        }
        if let Some(u) = self.upstream_span.take() {
            u.failed();
        }
        self.failed(kind, format!("{}: {detail}", class.as_str()));
        self.sink = Sink::Pass;
        self.out.clear();
        self.inflate = None;
        let shape = self.shape();
        let e = match class {
            FailureClass::Refused => ErrorReply::bad_gateway(shape, "the connection failed."),
            FailureClass::Tls => ErrorReply::bad_gateway(shape, "the TLS handshake failed."),
            FailureClass::Broken => ErrorReply::bad_gateway(shape, "its response broke off."),
            FailureClass::Timeout => ErrorReply::gateway_timeout(shape, "no answer in time."),
        };
        let r = self.reply(&e);
        self.finish(Ending::Error);
        r
    }

    /// The response body broke off after the host started sending it
    /// (`detail`: for the log only). What the rewriter holds becomes
    /// available from [`Exchange::next_output`]: send it, then end the
    /// client's response as broken.
    pub fn on_broken(&mut self, detail: &str) {
        if let Some(u) = self.upstream_span.take() {
            u.failed();
        }
        self.failed(UpstreamError::Broken, format!("broken: {detail}"));
        if !self.sink_ended {
            self.input_ended = true;
            // Compressed bytes not inflated yet are dropped: they may be a
            // torn block.
            self.inflate = None;
            self.end_sink();
        }
    }

    fn failed(&mut self, kind: UpstreamError, detail: String) {
        self.grounding.metrics().upstream_error(kind);
        self.error = Some(detail);
    }

    /// Counts the request and writes its log line, once.
    fn finish(&mut self, ending: Ending) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        self.open = None;
        if self.handling == Handling::NotOurs && !self.rejected {
            return;
        }
        let ending = if self.error.is_some() {
            Ending::Error
        } else {
            ending
        };
        let search = if self.rejected {
            SearchLabel::Rejected
        } else {
            self.outcome.map_or(SearchLabel::None, SearchLabel::Outcome)
        };
        self.grounding
            .metrics()
            .request(self.endpoint(), search, self.status);
        record::write(&record::Record {
            request_id: &self.request_id,
            method: self.method.as_str(),
            path: &self.path,
            endpoint: crate::metrics::endpoint_label(self.endpoint()),
            model: self.model.as_deref(),
            account: &self.account,
            status: self.status.unwrap_or(0),
            search: search.as_str(),
            sources: self.plan.as_ref().map_or(0, |p| p.sources.len()),
            cache: self.cache.as_str(),
            query_chars: self.query_chars,
            search_ms: self.search_time.map(ms),
            upstream_ms: self.upstream_time.map(ms),
            duration_ms: ms(self.started.elapsed()),
            bytes: self.bytes,
            client: self.client,
            stream: self.stream,
            ending,
            error: self.error.as_deref(),
        });
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        // Unfinished: the client went away (a pending search is released by
        // its own drop).
        self.finish(Ending::ClientClosed);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Replaces the client's credentials with the upstream key, in the
/// header the path's API uses.
pub fn upstream_key(edits: &mut HeaderEdits, shape: ErrorShape, key: &str) {
    edits.remove(header::AUTHORIZATION).remove(X_API_KEY);
    match shape {
        ErrorShape::OpenAi => edits.set_str(header::AUTHORIZATION, &format!("Bearer {key}")),
        ErrorShape::Anthropic => edits.set_str(X_API_KEY, key),
    };
}

/// The client's `x-request-id` when it is sane (1–200 visible ASCII
/// characters), else a new random one.
fn request_id(h: &HeaderMap) -> String {
    if let Some(v) = h.get(X_REQUEST_ID) {
        let b = v.as_bytes();
        if !b.is_empty() && b.len() <= 200 && b.iter().all(u8::is_ascii_graphic) {
            return String::from_utf8_lossy(b).into_owned();
        }
    }
    new_request_id()
}

fn new_request_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut parts = [0u64; 2];
    for (i, p) in parts.iter_mut().enumerate() {
        let mut h = std::hash::RandomState::new().build_hasher();
        h.write_u64(c);
        h.write_usize(i);
        *p = h.finish();
    }
    format!("req_{:016x}{:016x}", parts[0], parts[1])
}

/// The media type of `content-type`, lowercase, without parameters.
fn media_type(h: &HeaderMap) -> Option<String> {
    let v = h.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let m = v.split(';').next().unwrap_or_default().trim();
    (!m.is_empty()).then(|| m.to_ascii_lowercase())
}

fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

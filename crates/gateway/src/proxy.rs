//! One request through the gateway: routing, the grounded endpoints, the
//! pass-through of every other `/v1/` request, and the response path.
//!
//! Contract (SPEC section 12):
//! * `POST /v1/chat/completions` and `POST /v1/messages`: the body is read
//!   whole (at most `server.max_request_body`, else 413), put through
//!   [`Grounding::prepare`] (401 / 400 in the endpoint's error shape), sent
//!   upstream, and the response rewritten when sources were injected and
//!   the upstream answered 2xx without a content encoding: an SSE response
//!   event by event as it arrives, any other body whole (up to
//!   [`WHOLE_BODY_CAP`]; a larger one passes through unchanged). Nothing is
//!   sent to the client before the search has finished and the upstream's
//!   headers arrived.
//! * Any other request under `/v1/` is proxied untouched, bodies streamed
//!   both ways (in `keys` mode it needs a key too).
//! * `GET /healthz`, `GET /readyz` (503 while draining), `GET /metrics`.
//! * Every response carries `x-request-id` (the client's, or a new one, also
//!   sent upstream); grounded ones `x-citestream-search` and, when a search
//!   was asked for, `x-citestream-searches-remaining`. Streamed responses
//!   get `cache-control: no-cache` and `x-accel-buffering: no`.
//! * A compressed upstream body (which the gateway asked not to get) is
//!   inflated before rewriting when it is `gzip` or `deflate` (the client
//!   gets it uncompressed); any other coding is never rewritten: it passes
//!   through untouched, and `x-citestream-rewrite: skipped-content-encoding`
//!   says why.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bytes::Bytes;
use citestream::flow::ResponsePlan;
use citestream::request::Endpoint;
use citestream_host::errors::{ErrorReply, ErrorShape};
use citestream_host::grounding::{Grounded, Grounding};
use citestream_host::metrics::{EndpointLabel, SearchLabel, UpstreamError};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tracing::Instrument;

use citestream_host::telemetry;

use crate::body::{AnyBody, Collected, Logged, Rewriting, collect_capped, full};
use crate::decode::{self, Decoded};
use crate::log::RequestLog;
use crate::upstream::{Upstream, UpstreamFailure, json_response};

/// Largest whole (non-streamed) upstream body the gateway rewrites; a
/// larger one passes through unchanged.
pub(crate) const WHOLE_BODY_CAP: usize = 64 << 20;

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_SEARCH: HeaderName = HeaderName::from_static("x-citestream-search");
const X_REMAINING: HeaderName = HeaderName::from_static("x-citestream-searches-remaining");
const X_REWRITE: HeaderName = HeaderName::from_static("x-citestream-rewrite");

/// What every request shares.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) grounding: Grounding,
    pub(crate) upstream: Upstream,
    pub(crate) max_request_body: u64,
    pub(crate) draining: AtomicBool,
}

/// The hyper service: never fails (errors are responses).
pub(crate) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Logged>, Infallible> {
    let rid = request_id(req.headers());
    let mut log = RequestLog::new(&rid, req.method().as_str(), req.uri().path());
    let span = telemetry::request_span(req.method().as_str(), req.uri().path(), req.headers());
    span.record("citestream.request_id", rid.as_str());
    let mut resp = route(&state, req, &rid, &mut log)
        .instrument(span.clone())
        .await;
    telemetry::record_status(&span, resp.status().as_u16());
    if let Some(v) = resp.headers().get(&X_SEARCH).and_then(|v| v.to_str().ok()) {
        span.record("citestream.search", v);
    }
    log.set_status(resp.status().as_u16());
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert(X_REQUEST_ID, v);
    }
    let open = is_sse(resp.headers()).then(|| state.grounding.metrics().open_stream());
    Ok(resp.map(|b| Logged::new(b, log, open)))
}

async fn route(
    state: &State,
    req: Request<Incoming>,
    rid: &str,
    log: &mut RequestLog,
) -> Response<AnyBody> {
    let path = req.uri().path();
    let get_only =
        |state: &State, req: &Request<Incoming>, f: &dyn Fn(&State) -> Response<AnyBody>| {
            if matches!(*req.method(), Method::GET | Method::HEAD) {
                f(state)
            } else {
                let e = ErrorReply::method_not_allowed(
                    ErrorShape::OpenAi,
                    req.method().as_str(),
                    req.uri().path(),
                );
                let mut r = reply(&e);
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
                r
            }
        };
    match path {
        "/healthz" => get_only(state, &req, &|_| text(StatusCode::OK, "ok\n")),
        "/readyz" => get_only(state, &req, &|s| {
            if s.draining.load(Ordering::Relaxed) {
                text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
            } else {
                text(StatusCode::OK, "ready\n")
            }
        }),
        "/metrics" => get_only(state, &req, &|s| {
            let mut r = Response::new(full(s.grounding.metrics().render()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }),
        "/v1/chat/completions" if req.method() == Method::POST => {
            grounded(state, Endpoint::ChatCompletions, req, rid, log).await
        }
        "/v1/messages" if req.method() == Method::POST => {
            grounded(state, Endpoint::Messages, req, rid, log).await
        }
        p if p.starts_with("/v1/") => pass_through(state, req, rid, log).await,
        _ => reply(&ErrorReply::not_found(
            ErrorShape::OpenAi,
            req.method().as_str(),
            path,
        )),
    }
}

/// The client's `x-request-id` when it is sane (1–200 visible ASCII
/// characters), else a new random one.
fn request_id(h: &HeaderMap) -> String {
    if let Some(v) = h.get(X_REQUEST_ID) {
        let b = v.as_bytes();
        if !b.is_empty() && b.len() <= 200 && b.iter().all(|c| c.is_ascii_graphic()) {
            return String::from_utf8_lossy(b).into_owned();
        }
    }
    new_request_id()
}

fn new_request_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::AtomicU64;
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

async fn grounded(
    state: &State,
    endpoint: Endpoint,
    req: Request<Incoming>,
    rid: &str,
    log: &mut RequestLog,
) -> Response<AnyBody> {
    let label = EndpointLabel::from(endpoint);
    log.set_endpoint(label.as_str());
    let (parts, body) = req.into_parts();
    let body = match read_body(state, endpoint, &parts.headers, body).await {
        Ok(b) => b,
        Err(e) => {
            state
                .grounding
                .metrics()
                .request(label, SearchLabel::Rejected);
            return reply(&e);
        }
    };
    let g = match state
        .grounding
        .prepare(endpoint, &parts.headers, body)
        .await
    {
        Ok(g) => g,
        Err(e) => return reply(&e),
    };
    log.set_search(g.search_header(), &g.account);
    log.set_stream(g.stream);
    let mut headers = forward_headers(&parts.headers, rid);
    if g.plan.is_some() {
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    let mut up = Request::new(full(g.body.clone()));
    *up.method_mut() = Method::POST;
    *up.uri_mut() = parts.uri.clone();
    *up.headers_mut() = headers;
    let mut resp = match send(state, Some(endpoint), up, log).await {
        Ok(r) => respond(state, r, g.plan.as_ref()).await,
        Err(e) => e,
    };
    search_headers(resp.headers_mut(), &g);
    resp
}

/// The request body, at most `max_request_body` bytes.
async fn read_body(
    state: &State,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<Bytes, ErrorReply> {
    let limit = state.max_request_body;
    let too_large = || ErrorReply::too_large(endpoint.into(), limit);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, cap).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(ErrorReply::invalid_request(
            endpoint.into(),
            &format!("Could not read the request body: {e}"),
            None,
        )),
    }
}

fn search_headers(h: &mut HeaderMap, g: &Grounded) {
    h.insert(X_SEARCH, HeaderValue::from_static(g.search_header()));
    if let Some(v) = g
        .remaining_header()
        .and_then(|v| HeaderValue::from_str(&v).ok())
    {
        h.insert(X_REMAINING, v);
    }
}

async fn pass_through(
    state: &State,
    req: Request<Incoming>,
    rid: &str,
    log: &mut RequestLog,
) -> Response<AnyBody> {
    log.set_endpoint(EndpointLabel::Other.as_str());
    let metrics = state.grounding.metrics();
    if let Err(e) = state
        .grounding
        .authenticate(req.uri().path(), req.headers())
    {
        metrics.request(EndpointLabel::Other, SearchLabel::Rejected);
        return reply(&e);
    }
    metrics.request(EndpointLabel::Other, SearchLabel::None);
    let (parts, body) = req.into_parts();
    let mut up = Request::new(body.map_err(Into::into).boxed());
    *up.method_mut() = parts.method.clone();
    *up.uri_mut() = parts.uri.clone();
    *up.headers_mut() = forward_headers(&parts.headers, rid);
    if let Some(cl) = parts.headers.get(header::CONTENT_LENGTH) {
        up.headers_mut().insert(header::CONTENT_LENGTH, cl.clone());
    }
    match send(state, None, up, log).await {
        Ok(r) => relay(r),
        Err(e) => e,
    }
}

/// Sends upstream; a failure becomes the 502/504 to answer.
async fn send(
    state: &State,
    endpoint: Option<Endpoint>,
    up: Request<AnyBody>,
    log: &mut RequestLog,
) -> Result<Response<AnyBody>, Response<AnyBody>> {
    let shape = ErrorShape::for_path(up.uri().path());
    let label = endpoint.map_or(EndpointLabel::Other, EndpointLabel::from);
    let metrics = state.grounding.metrics();
    let t0 = Instant::now();
    let span = tracing::info_span!(
        "upstream",
        otel.kind = "client",
        http.response.status_code = tracing::field::Empty,
        citestream.headers_ms = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let mut up = up;
    telemetry::inject_trace(&span, up.headers_mut());
    let r = state
        .upstream
        .send(endpoint, up)
        .instrument(span.clone())
        .await;
    span.record("citestream.headers_ms", t0.elapsed().as_secs_f64() * 1000.0);
    match &r {
        Ok(resp) => telemetry::record_status(&span, resp.status().as_u16()),
        Err(_) => {
            span.record("otel.status_code", "ERROR");
        }
    }
    drop(span);
    log.set_upstream_time(t0);
    match r {
        Ok(resp) => {
            metrics.upstream_latency(label, t0.elapsed());
            Ok(resp)
        }
        Err(UpstreamFailure::Timeout(m)) => {
            metrics.upstream_error(UpstreamError::Timeout);
            log.set_error(m.clone());
            Err(reply(&ErrorReply::gateway_timeout(shape, &m)))
        }
        Err(UpstreamFailure::Unreachable(m)) => {
            metrics.upstream_error(UpstreamError::Refused);
            log.set_error(m.clone());
            Err(reply(&ErrorReply::bad_gateway(shape, &m)))
        }
    }
}

/// The response of a grounded request: rewritten when there is a plan and
/// the upstream answered 2xx with an uncompressed body.
async fn respond(
    state: &State,
    resp: Response<AnyBody>,
    plan: Option<&ResponsePlan>,
) -> Response<AnyBody> {
    let Some(plan) = plan.filter(|_| resp.status().is_success()) else {
        return relay(resp);
    };
    let Ok(coding) = decode::coding(resp.headers()) else {
        let mut r = relay(resp);
        r.headers_mut().insert(
            X_REWRITE,
            HeaderValue::from_static("skipped-content-encoding"),
        );
        return r;
    };
    let opts = state.grounding.rewrite_options();
    let (mut parts, mut body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(c) = coding {
        parts.headers.remove(header::CONTENT_ENCODING);
        parts.headers.remove(header::CONTENT_LENGTH);
        body = Decoded::new(body, c).boxed();
    }
    if is_sse(&parts.headers) {
        parts.headers.remove(header::CONTENT_LENGTH);
        sse_headers(&mut parts.headers);
        let metrics = state.grounding.metrics().clone();
        let body = Rewriting::new(body, plan.stream_rewriter(opts), metrics);
        return Response::from_parts(parts, body.boxed());
    }
    let span = tracing::info_span!("rewrite", citestream.bytes = tracing::field::Empty,);
    match collect_capped(body, WHOLE_BODY_CAP)
        .instrument(span.clone())
        .await
    {
        Ok(Collected::Whole(b)) => {
            let out = span.in_scope(|| Bytes::from(plan.rewrite_body(&b, opts).into_owned()));
            span.record("citestream.bytes", out.len());
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(out.len()));
            Response::from_parts(parts, full(out))
        }
        Ok(Collected::Over(rest)) => Response::from_parts(parts, rest),
        Err(e) => {
            state
                .grounding
                .metrics()
                .upstream_error(UpstreamError::Broken);
            let shape = ErrorShape::from(plan.endpoint);
            reply(&ErrorReply::bad_gateway(
                shape,
                &format!("the response body broke off: {e}"),
            ))
        }
    }
}

/// An upstream response relayed as it is (hop-by-hop headers dropped).
fn relay(resp: Response<AnyBody>) -> Response<AnyBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if is_sse(&parts.headers) {
        sse_headers(&mut parts.headers);
    }
    Response::from_parts(parts, body)
}

fn sse_headers(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
}

fn is_sse(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// The client's headers as they go upstream: hop-by-hop ones, `host` and
/// `content-length` dropped (the client sets them), `x-request-id` set.
fn forward_headers(client: &HeaderMap, rid: &str) -> HeaderMap {
    let mut h = client.clone();
    strip_hop_by_hop(&mut h);
    h.remove(header::HOST);
    h.remove(header::CONTENT_LENGTH);
    if let Ok(v) = HeaderValue::from_str(rid) {
        h.insert(X_REQUEST_ID, v);
    }
    h
}

/// Removes the hop-by-hop headers (RFC 9110 section 7.6.1), including the
/// ones named in `connection`.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        h.remove(n);
    }
}

/// A host-made error response.
fn reply(e: &ErrorReply) -> Response<AnyBody> {
    json_response(e.status(), e.body().clone())
}

fn text(status: StatusCode, s: &'static str) -> Response<AnyBody> {
    let mut r = Response::new(full(s));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

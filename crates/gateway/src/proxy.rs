//! One request through the gateway: the probes, and the plumbing around
//! the request's [`Exchange`], which makes every decision (see
//! `citestream_host::exchange`: grounded or proxied, auth, keys, quota,
//! rewrite or pass, headers, error bodies, the log line).
//!
//! Contract:
//! * `GET /healthz`, `GET /readyz` (503 while draining), `GET /metrics`
//!   (another method: 405); logged at debug only.
//! * A grounded request's body is read whole (at most
//!   `server.max_request_body`, else the exchange's 413), handed to
//!   [`Exchange::on_request`] and sent upstream as it says; nothing is
//!   sent to the client before the search has finished and the upstream's
//!   headers arrived.
//! * A proxied request (any other `/v1/` path) streams its body both ways.
//! * The upstream's response headers (hop-by-hop ones dropped) get the
//!   exchange's edits; a whole body to rewrite is read until the exchange
//!   has output (its end, or the cap), then sent with its length; any other
//!   body goes through the exchange piece by piece ([`Exchanged`]); either
//!   is cut after `upstream.idle_timeout` without a piece (see
//!   [`crate::body`]).
//! * An upstream failure before the response headers is answered with the
//!   exchange's 502/504; the client leaving drops the exchange (its
//!   reserved search is released) and the upstream request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Bytes, BytesMut};
use citestream_host::errors::{ErrorReply, ErrorShape};
use citestream_host::exchange::{BodyPlan, Exchange, FailureClass, Handling, Reply, RequestHead};
use citestream_host::grounding::Grounding;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use citestream_host::telemetry::{self, Instrument};

use crate::body::{AnyBody, Exchanged, Flushes, IdleTimer, full, poll_upstream};
use crate::upstream::{OutBody, Upstream, UpstreamFailure, json_response};

/// What every request shares.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) grounding: Arc<Grounding>,
    pub(crate) upstream: Upstream,
    pub(crate) draining: AtomicBool,
}

/// The hyper service: never fails (errors are responses).
pub(crate) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
    client: Option<SocketAddr>,
    flushes: Arc<Flushes>,
) -> Result<Response<AnyBody>, Infallible> {
    if let Some(r) = probe(&state, &req) {
        tracing::debug!(
            target: "citestream::request",
            method = %req.method(),
            path = req.uri().path(),
            status = r.status().as_u16(),
            "probe"
        );
        return Ok(r);
    }
    let span = telemetry::request_span(req.method().as_str(), req.uri().path(), req.headers());
    // Boxed: hyper keeps this future in a box of its size for the whole
    // connection (its `in_flight` slot, made when the connection opens),
    // so inline the exchange's future (about 6 KB) would stay allocated
    // while the response streams and while the connection idles; boxed,
    // it is freed once the response head is handed over.
    let resp = Box::pin(exchange(state, req, client, flushes))
        .instrument(span.clone())
        .await;
    let search = resp.headers().get("x-citestream-search");
    telemetry::record_reply(&span, resp.status().as_u16(), search);
    Ok(resp)
}

/// One exchange, in the `request` span.
async fn exchange(
    state: Arc<State>,
    req: Request<Incoming>,
    client: Option<SocketAddr>,
    flushes: Arc<Flushes>,
) -> Response<AnyBody> {
    let (parts, body) = req.into_parts();
    // Only HTTP/1 waits for flushes (see `Flushes`).
    let flushes = (parts.version < http::Version::HTTP_2).then_some(flushes);
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |p| p.as_str());
    let head = RequestHead {
        method: parts.method.clone(),
        path: path.to_owned(),
        headers: parts.headers,
        client,
    };
    // Boxed: the exchange (about 1 KB) moves into the response body
    // through several futures; a box moves as a pointer.
    let mut ex = Box::new(Exchange::new(state.grounding.clone(), head));
    let (method, uri) = (parts.method, parts.uri);
    let (body, whole) = match ex.handling() {
        Handling::NotOurs => return reply(ex.not_found()),
        Handling::Grounded(_) => match read_body(&mut ex, body).await {
            Ok(b) => (None, Some(b)),
            Err(r) => return reply(r),
        },
        Handling::Proxied => (Some(body), None),
    };
    // The large futures (the search, the upstream's retry loop, the
    // response) are boxed: this future stays small, so hyper's moves of it
    // copy little.
    let fwd = match Box::pin(ex.on_request(whole)).await {
        Ok(f) => f,
        Err(r) => return reply(r),
    };
    let mut headers = forward_headers(ex.request_headers());
    let up_body = match (fwd.body, body) {
        (Some(b), _) => OutBody::Whole(b),
        (None, Some(b)) => {
            // Proxied: the client's body streams through with its length.
            if let Some(cl) = ex.request_headers().get(header::CONTENT_LENGTH) {
                headers.insert(header::CONTENT_LENGTH, cl.clone());
            }
            OutBody::Streamed(b.map_err(Into::into).boxed())
        }
        (None, None) => OutBody::Whole(Bytes::new()),
    };
    fwd.edits.apply_owned(&mut headers);
    let mut up = Request::new(up_body);
    *up.method_mut() = method;
    *up.uri_mut() = uri;
    *up.headers_mut() = headers; // with the exchange's `traceparent` (its upstream span)
    let sent = Box::pin(state.upstream.send(ex.endpoint(), up)).await;
    let resp = match sent {
        Ok(r) => r,
        Err(f) => {
            let (class, detail) = failure_class(f);
            return reply(ex.on_error(class, &detail).await);
        }
    };
    Box::pin(respond(ex, resp, flushes))
        .instrument(telemetry::span("response"))
        .await
}

/// `/healthz`, `/readyz`, `/metrics`; `None` for any other path.
fn probe(state: &State, req: &Request<Incoming>) -> Option<Response<AnyBody>> {
    let path = req.uri().path();
    if !matches!(path, "/healthz" | "/readyz" | "/metrics") {
        return None;
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let e = ErrorReply::method_not_allowed(ErrorShape::OpenAi, req.method().as_str(), path);
        let mut r = json_response(e.status(), e.into_body());
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Some(r);
    }
    Some(match path {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if state.draining.load(Ordering::Relaxed) => {
            text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
        }
        "/readyz" => text(StatusCode::OK, "ready\n"),
        _ => {
            let mut r = Response::new(full(state.grounding.metrics().render()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
    })
}

/// The request body, at most the exchange's limit.
async fn read_body(ex: &mut Exchange, body: Incoming) -> Result<Bytes, Reply> {
    let limit = ex.max_request_body();
    let declared = ex
        .request_headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ex.request_too_large());
    }
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, cap).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ex.request_too_large()),
        Err(e) => Err(ex.request_unreadable(&e.to_string())),
    }
}

/// The class of an upstream failure, and its detail for the log.
fn failure_class(f: UpstreamFailure) -> (FailureClass, String) {
    match f {
        UpstreamFailure::Timeout(m) => (FailureClass::Timeout, m),
        UpstreamFailure::Unreachable(m) => {
            let l = m.to_ascii_lowercase();
            let tls = ["certificate", "tls", "handshake", "ssl"]
                .iter()
                .any(|w| l.contains(w));
            let class = if tls {
                FailureClass::Tls
            } else {
                FailureClass::Refused
            };
            (class, m)
        }
    }
}

/// The upstream's response, as the exchange decides.
async fn respond(
    mut ex: Box<Exchange>,
    resp: Response<AnyBody>,
    flushes: Option<Arc<Flushes>>,
) -> Response<AnyBody> {
    let (mut parts, mut body) = resp.into_parts();
    let mut idle = IdleTimer::start(ex.idle_timeout());
    strip_hop_by_hop(&mut parts.headers);
    let head = ex
        .on_response_headers(parts.status.as_u16(), &parts.headers)
        .await;
    head.edits.apply_owned(&mut parts.headers);
    if head.body != BodyPlan::Whole {
        let trailers = head.body == BodyPlan::Pass;
        let body = Exchanged::new(body, ex, trailers, flushes, idle);
        return Response::from_parts(parts, body.boxed());
    }
    // A whole body: read until the exchange has output.
    let mut ended = false;
    loop {
        let mut first = match ex.next_output() {
            Ok(Some(b)) => b,
            Ok(None) if ended => Bytes::new(), // an empty body
            Ok(None) => {
                match std::future::poll_fn(|cx| poll_upstream(&mut body, &mut idle, cx)).await {
                    Some(Ok(f)) => {
                        if let Ok(d) = f.into_data() {
                            ex.on_response_body(d, false);
                        }
                    }
                    Some(Err(e)) => {
                        return reply(ex.on_error(FailureClass::Broken, &e.to_string()).await);
                    }
                    None => {
                        ended = true;
                        ex.on_response_body(Bytes::new(), true);
                    }
                }
                continue;
            }
            Err(e) => {
                return reply(ex.on_error(FailureClass::Broken, &e.to_string()).await);
            }
        };
        if !ended {
            // Over the cap: the rest passes through the exchange.
            let rest = Exchanged::new(body, ex, false, flushes, idle).after(first);
            return Response::from_parts(parts, rest.boxed());
        }
        // The whole rewritten body (one piece, or a few when it was passed
        // over the cap at its very end).
        let mut more = BytesMut::new();
        while let Ok(Some(b)) = ex.next_output() {
            if more.is_empty() {
                more.extend_from_slice(&first);
            }
            more.extend_from_slice(&b);
        }
        if !more.is_empty() {
            first = more.freeze();
        }
        return Response::from_parts(parts, full(first));
    }
}

/// The client's headers as they go upstream: hop-by-hop ones, `host` and
/// `content-length` dropped (the upstream client sets them).
fn forward_headers(client: &HeaderMap) -> HeaderMap {
    let mut h = client.clone();
    strip_hop_by_hop(&mut h);
    h.remove(header::HOST);
    h.remove(header::CONTENT_LENGTH);
    h
}

/// Removes the hop-by-hop headers (RFC 9110 section 7.6.1), including the
/// ones named in `connection`.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    if h.contains_key(header::CONNECTION) {
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
    }
    // Names, not strings: nothing to parse per request.
    for n in &HOP_BY_HOP {
        h.remove(n);
    }
}

/// The hop-by-hop headers every hop removes.
static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// A reply the exchange made.
fn reply(r: Reply) -> Response<AnyBody> {
    let mut resp = json_response(r.status, r.body);
    r.headers.apply_owned(resp.headers_mut());
    resp
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

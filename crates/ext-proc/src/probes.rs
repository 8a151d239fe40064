//! The processor's metrics port: plain HTTP/1.1 with three routes, the
//! same as `citestream serve` answers them.
//!
//! * `GET /metrics`: the Prometheus text of the shared registry;
//! * `GET /healthz`: 200 `ok` while the process runs;
//! * `GET /readyz`: 200 `ready`, 503 `draining` once shutdown began;
//! * `HEAD` of those the same without a body; any other method 405, any
//!   other path 404.
//!
//! Probes are logged at `debug` only. A connection that fails is dropped
//! on its own; the port never stops the gRPC server.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use citestream_host::grounding::Grounding;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Accepts on `listener` until the task is aborted.
pub(crate) async fn serve(
    listener: TcpListener,
    grounding: Arc<Grounding>,
    draining: Arc<AtomicBool>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (g, d) = (grounding.clone(), draining.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let r = answer(&req, &g, &d);
                async move { Ok::<_, Infallible>(r) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn answer(
    req: &Request<Incoming>,
    grounding: &Grounding,
    draining: &AtomicBool,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    tracing::debug!(method = %req.method(), path, "probe");
    let (status, ctype, body) = match path {
        "/healthz" => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"ok\n"),
        ),
        "/readyz" if draining.load(Ordering::Relaxed) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"draining\n"),
        ),
        "/readyz" => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"ready\n"),
        ),
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            Bytes::from(grounding.metrics().render()),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"not found\n"),
        ),
    };
    let (status, body) = match *req.method() {
        Method::GET => (status, body),
        Method::HEAD => (status, Bytes::new()),
        _ if status == StatusCode::NOT_FOUND => (status, body),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            Bytes::from_static(b"method not allowed\n"),
        ),
    };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    if status == StatusCode::METHOD_NOT_ALLOWED {
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
    }
    r
}

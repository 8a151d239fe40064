//! The model server the gateway forwards to: an HTTP(S) upstream through a
//! pooled client (hyper-util's, rustls with the ring provider and Mozilla's
//! roots; HTTP/2 over TLS by ALPN), or the built-in demo model when
//! `upstream.base_url` is `""`.
//!
//! Contract:
//! * `/v1/messages` and the paths under it go to `messages_base_url` when
//!   set, everything else to `base_url`. The request's path and query are
//!   appended to the base URL's path; a base ending in `/v1` does not
//!   double it (`https://api.openai.com/v1` + `/v1/models` →
//!   `https://api.openai.com/v1/models`).
//! * Hop-by-hop headers are not forwarded (either way); `host` is the
//!   upstream's. Credentials are the request's exchange's decision
//!   (`citestream_host::exchange`): the headers arrive here as they go.
//! * No response headers within `headers_timeout` (or no connection within
//!   `connect_timeout`): [`UpstreamFailure::Timeout`] (a 504); refused or
//!   broken before the headers: [`UpstreamFailure::Unreachable`] (a 502).
//! * Dropping the future returned by [`Upstream::send`] or the response
//!   body cancels the upstream request (its connection is closed).

use std::time::Duration;

use bytes::Bytes;
use citestream::request::Endpoint;
use citestream_host::config::UpstreamConfig;
use citestream_host::errors::ErrorShape;
use http::header::{self, HeaderValue};
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::body::{AnyBody, Paced, full};
use crate::demo;

/// How long the demo model waits between two streamed events.
const DEMO_PACE: Duration = Duration::from_millis(20);

/// Why there is no upstream response.
#[derive(Debug)]
pub(crate) enum UpstreamFailure {
    /// Refused, reset, TLS failure, … (502).
    Unreachable(String),
    /// Connect or headers timeout (504).
    Timeout(String),
}

/// A base URL split into its parts.
#[derive(Clone, Debug)]
struct Base {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// The path without a trailing `/` (`""` for the root).
    path: String,
}

impl Base {
    fn parse(url: &str) -> Option<Base> {
        let uri: Uri = url.parse().ok()?;
        let p = uri.into_parts();
        let path = p
            .path_and_query
            .map(|pq| pq.path().trim_end_matches('/').to_owned())
            .unwrap_or_default();
        Some(Base {
            scheme: p.scheme?,
            authority: p.authority?,
            path,
        })
    }

    /// The upstream URI of a request's path and query.
    fn join(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        let tail = match path_and_query.strip_prefix("/v1") {
            Some(rest)
                if self.path.ends_with("/v1")
                    && (rest.is_empty() || rest.starts_with(['/', '?'])) =>
            {
                rest
            }
            _ => path_and_query,
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{tail}", self.path))
            .build()
    }
}

/// The upstream: an HTTP(S) model server, or the demo model.
#[derive(Debug)]
pub(crate) enum Upstream {
    /// `upstream.base_url = ""`.
    Demo,
    /// A model server.
    Http(Box<HttpUpstream>),
}

/// A model server reached over HTTP(S).
#[derive(Debug)]
pub(crate) struct HttpUpstream {
    client: Client<HttpsConnector<HttpConnector>, AnyBody>,
    base: Base,
    messages_base: Option<Base>,
    headers_timeout: Duration,
}

impl Upstream {
    /// The upstream of `cfg` (the URLs were validated with the config).
    pub(crate) fn new(cfg: &UpstreamConfig) -> Result<Upstream, String> {
        if cfg.base_url.is_empty() {
            return Ok(Upstream::Demo);
        }
        let base = Base::parse(&cfg.base_url).ok_or("upstream.base_url: invalid URL")?;
        let messages_base = match cfg.messages_base_url.as_str() {
            "" => None,
            u => Some(Base::parse(u).ok_or("upstream.messages_base_url: invalid URL")?),
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(cfg.connect_timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| format!("upstream: TLS setup: {e}"))?
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(https);
        Ok(Upstream::Http(Box::new(HttpUpstream {
            client,
            base,
            messages_base,
            headers_timeout: cfg.headers_timeout,
        })))
    }

    /// A name for the start-up banner.
    pub(crate) fn describe(&self) -> String {
        match self {
            Upstream::Demo => "demo (built-in model)".to_owned(),
            Upstream::Http(h) => format!("{}://{}{}", h.base.scheme, h.base.authority, h.base.path),
        }
    }

    /// Sends a request (its URI holds only the path and query) and waits
    /// for the response headers.
    pub(crate) async fn send(
        &self,
        endpoint: Option<Endpoint>,
        req: Request<AnyBody>,
    ) -> Result<Response<AnyBody>, UpstreamFailure> {
        match self {
            Upstream::Demo => Ok(demo_send(endpoint, req).await),
            Upstream::Http(h) => h.send(req).await,
        }
    }
}

impl HttpUpstream {
    async fn send(&self, req: Request<AnyBody>) -> Result<Response<AnyBody>, UpstreamFailure> {
        let (mut parts, body) = req.into_parts();
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let shape = ErrorShape::for_path(parts.uri.path());
        let base = match (shape, &self.messages_base) {
            (ErrorShape::Anthropic, Some(m)) => m,
            _ => &self.base,
        };
        parts.uri = base
            .join(&pq)
            .map_err(|e| UpstreamFailure::Unreachable(format!("bad upstream URL: {e}")))?;
        parts.headers.remove(header::HOST);
        let fut = self.client.request(Request::from_parts(parts, body));
        match tokio::time::timeout(self.headers_timeout, fut).await {
            Err(_) => Err(UpstreamFailure::Timeout(format!(
                "no response headers within {:?}",
                self.headers_timeout
            ))),
            Ok(Err(e)) => Err(classify(&e)),
            Ok(Ok(resp)) => Ok(resp.map(|b| b.map_err(Into::into).boxed())),
        }
    }
}

/// Connect timeouts are 504s, every other failure before the headers a 502.
fn classify(e: &hyper_util::client::legacy::Error) -> UpstreamFailure {
    let mut msg = e.to_string();
    let mut timed_out = false;
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
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
async fn demo_send(endpoint: Option<Endpoint>, req: Request<AnyBody>) -> Response<AnyBody> {
    let path = req.uri().path().to_owned();
    let Some(endpoint) = endpoint else {
        let shape = ErrorShape::for_path(&path);
        let e = citestream_host::errors::ErrorReply::not_found(shape, req.method().as_str(), &path);
        return json_response(e.status(), e.into_body());
    };
    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::new(),
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

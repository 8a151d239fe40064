//! One HTTP exchange (request and response) as Envoy's `ext_proc` filter
//! presents it: one gRPC stream of `ProcessingRequest`s, each answered
//! here.
//!
//! ```text
//! request_headers ─► endpoint from :method + :path; auth (401 now, in the endpoint's shape)
//! request_body    ─► (BUFFERED) Grounding::prepare: 400/401 as an immediate response,
//!                    else the new body + content-length (+ accept-encoding: identity
//!                    when the response may be rewritten)
//! response_headers ► status; x-citestream-search / -searches-remaining; choose
//!                    Pass | Stream (text/event-stream) | Whole (JSON); drop content-length
//! response_body   ─► crate::response (STREAMED or FULL_DUPLEX_STREAMED)
//! trailers        ─► unchanged (FULL_DUPLEX: the body ends first)
//! ```
//!
//! Requests that are not `POST /v1/chat/completions` or
//! `POST /v1/messages` pass through; under `/v1/` they are authenticated
//! first, as `citestream serve` does. A response is rewritten only when
//! sources were injected, its status is 2xx and it is not compressed
//! (a compressed body passes through untouched, never corrupted).
//!
//! Input that makes no sense (a body before its headers, a second request
//! body in `STREAMED` request mode, unknown messages) is passed through, never
//! an error: the exchange and the process keep going.

use std::sync::Arc;
use std::time::Instant;

use citestream::flow::ResponsePlan;
use citestream::request::Endpoint;
use citestream_host::errors::ErrorReply;
use citestream_host::grounding::Grounding;
use citestream_host::metrics::{OpenStream, SearchLabel};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::{
    BodySendMode, HeaderSendMode,
};
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse,
};

use crate::proto::{self, Chunk, HeaderEdits, Headers};
use crate::response::{BodyMode, ResponseBody};

/// What the request side decided, kept for the response.
#[derive(Debug)]
struct Decided {
    plan: Option<ResponsePlan>,
    search: &'static str,
    remaining: Option<String>,
    account: String,
    pending: Option<citestream_host::grounding::PendingSearch>,
}

/// One exchange (see the module docs).
#[derive(Debug)]
pub(crate) struct Exchange {
    grounding: Arc<Grounding>,
    mode: BodyMode,
    /// Largest whole JSON response held for rewriting.
    body_limit: usize,
    endpoint: Option<Endpoint>,
    path: String,
    headers: http::HeaderMap,
    decided: Option<Decided>,
    status: u16,
    response: ResponseBody,
    /// When the request went upstream (for the upstream latency metric).
    sent: Option<Instant>,
    /// Counts this exchange in `citestream_open_streams` while its
    /// response is being rewritten.
    open: Option<OpenStream>,
}

impl Exchange {
    /// A new exchange; `body_limit` bounds a held JSON response.
    pub(crate) fn new(grounding: Arc<Grounding>, body_limit: usize) -> Exchange {
        Exchange {
            grounding,
            mode: BodyMode::Streamed,
            body_limit,
            endpoint: None,
            path: String::new(),
            headers: http::HeaderMap::new(),
            decided: None,
            status: 0,
            response: ResponseBody::Pass,
            sent: None,
            open: None,
        }
    }

    /// Handles one message from Envoy, pushing the answers to send (none,
    /// one, or two) onto `out`.
    pub(crate) async fn handle(
        &mut self,
        msg: ProcessingRequest,
        out: &mut Vec<ProcessingResponse>,
    ) {
        if let Some(pc) = msg.protocol_config {
            self.mode = if pc.response_body_mode == BodySendMode::FullDuplexStreamed as i32 {
                BodyMode::FullDuplex
            } else {
                BodyMode::Streamed
            };
        }
        let answer = match msg.request {
            Some(Request::RequestHeaders(h)) => Some(self.request_headers(&h).await),
            Some(Request::RequestBody(b)) => Some(self.request_body(b).await),
            Some(Request::RequestTrailers(_)) => Some(proto::request_trailers()),
            Some(Request::ResponseHeaders(h)) => Some(self.response_headers(&h).await),
            Some(Request::ResponseBody(b)) => self.response_body(b),
            Some(Request::ResponseTrailers(_)) => {
                out.extend(self.response.end_before_trailers(self.mode));
                Some(proto::response_trailers())
            }
            None => None,
        };
        // In observability mode answers are ignored; send none.
        if !msg.observability_mode {
            out.extend(answer);
        }
    }

    async fn request_headers(&mut self, h: &HttpHeaders) -> ProcessingResponse {
        let headers = Headers::read(h.headers.as_ref());
        let path = headers.path_only().to_owned();
        self.endpoint = match (headers.method.as_str(), path.as_str()) {
            ("POST", "/v1/chat/completions") => Some(Endpoint::ChatCompletions),
            ("POST", "/v1/messages") => Some(Endpoint::Messages),
            _ => None,
        };
        let guarded = self.endpoint.is_some() || path.starts_with("/v1/");
        let refused = if guarded {
            self.grounding.authenticate(&path, &headers.map).err()
        } else {
            None
        };
        if let Some(reply) = refused {
            self.grounding.metrics().request(
                self.endpoint,
                SearchLabel::Rejected,
                Some(reply.status()),
            );
            return reply_now(&reply, "citestream_unauthorized");
        }
        self.path = path;
        self.headers = headers.map;
        if self.endpoint.is_none() {
            // Not ours: ask Envoy to stop sending this exchange's bodies
            // (honoured with `allow_mode_override`; otherwise they pass
            // through here unchanged).
            let mut r = proto::request_headers(HeaderEdits::default());
            if self.mode == BodyMode::Streamed {
                r.mode_override = Some(pass_through_mode());
            }
            return r;
        }
        if h.end_of_stream {
            // A grounded endpoint without a body: the flow answers it
            // (a 400 in the endpoint's shape).
            return self
                .request_body(HttpBody {
                    end_of_stream: true,
                    ..Default::default()
                })
                .await;
        }
        proto::request_headers(HeaderEdits::default())
    }

    async fn request_body(&mut self, b: HttpBody) -> ProcessingResponse {
        let Some(endpoint) = self.endpoint else {
            return proto::request_body(Chunk::Keep, HeaderEdits::default());
        };
        if !b.end_of_stream || self.decided.is_some() {
            // Not BUFFERED (a misconfigured filter): the request has gone
            // upstream already; let it and its response pass.
            tracing::warn!(
                path = %self.path,
                "request body not buffered (set request_body_mode: BUFFERED); passing through"
            );
            self.endpoint = None;
            return proto::request_body(Chunk::Keep, HeaderEdits::default());
        }
        let original = bytes::Bytes::from(b.body);
        let g = match self
            .grounding
            .prepare(endpoint, &self.headers, original.clone())
            .await
        {
            Ok(g) => g,
            Err(reply) => return reply_now(&reply, "citestream_invalid_request"),
        };
        let mut edits = HeaderEdits::default();
        edits.set("content-length", g.body.len().to_string());
        if g.plan.is_some() {
            edits.set("accept-encoding", "identity");
        }
        let chunk = if g.body == original {
            Chunk::Keep
        } else {
            Chunk::Replace(g.body.to_vec())
        };
        self.decided = Some(Decided {
            search: g.search_header(),
            remaining: g.remaining_header(),
            plan: g.plan,
            account: g.account,
            pending: g.pending,
        });
        self.sent = Some(Instant::now());
        proto::request_body(chunk, edits)
    }

    async fn response_headers(&mut self, h: &HttpHeaders) -> ProcessingResponse {
        let headers = Headers::read(h.headers.as_ref());
        self.status = headers.status;
        let mut edits = HeaderEdits::default();
        let Some(d) = &mut self.decided else {
            return proto::response_headers(edits);
        };
        if let Some(p) = d.pending.take() {
            let _ = if (200..300).contains(&self.status) {
                p.commit().await
            } else {
                p.release().await
            };
        }
        let d = &*d;
        if let Some(t) = self.sent.take() {
            self.grounding
                .metrics()
                .upstream_latency(self.endpoint, t.elapsed());
        }
        edits.set("x-citestream-search", d.search);
        if let Some(n) = &d.remaining {
            edits.set("x-citestream-searches-remaining", n.as_str());
        }
        let ok = (200..300).contains(&self.status) && identity(&headers.map);
        if let (Some(plan), true) = (&d.plan, ok) {
            let opts = self.grounding.rewrite_options();
            let ctype = header_str(&headers.map, "content-type").to_ascii_lowercase();
            if ctype.starts_with("text/event-stream") {
                self.response = ResponseBody::Stream(Box::new(plan.stream_rewriter(opts)));
                self.open = Some(self.grounding.metrics().open_stream());
                edits
                    .remove("content-length")
                    .set("cache-control", "no-cache")
                    .set("x-accel-buffering", "no");
            } else if ctype.contains("json") {
                self.response = ResponseBody::Whole {
                    plan: plan.clone(),
                    opts: opts.clone(),
                    held: Vec::new(),
                    limit: self.body_limit,
                };
                edits.remove("content-length");
            }
        }
        tracing::info!(
            path = %self.path,
            account = %d.account,
            status = self.status,
            search = d.search,
            rewritten = !matches!(self.response, ResponseBody::Pass),
            "request"
        );
        proto::response_headers(edits)
    }

    fn response_body(&mut self, b: HttpBody) -> Option<ProcessingResponse> {
        let timed = matches!(self.response, ResponseBody::Stream(_));
        let t0 = Instant::now();
        let r = self.response.on_body(self.mode, b.body, b.end_of_stream);
        if timed {
            self.grounding.metrics().event_added_latency(t0.elapsed());
        }
        if b.end_of_stream {
            self.open = None;
        }
        r
    }
}

/// An immediate response carrying a host error reply.
fn reply_now(reply: &ErrorReply, details: &str) -> ProcessingResponse {
    proto::immediate(
        reply.status(),
        reply.body().to_vec(),
        HeaderEdits::default(),
        details,
    )
}

/// The mode for an exchange that is not ours: no bodies, no response
/// headers.
fn pass_through_mode() -> ProcessingMode {
    ProcessingMode {
        request_body_mode: BodySendMode::None as i32,
        response_header_mode: HeaderSendMode::Skip as i32,
        response_body_mode: BodySendMode::None as i32,
        ..Default::default()
    }
}

fn header_str<'a>(map: &'a http::HeaderMap, name: &str) -> &'a str {
    map.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// The response body is not compressed (no `content-encoding`, or
/// `identity`).
fn identity(map: &http::HeaderMap) -> bool {
    map.get_all("content-encoding").iter().all(|v| {
        v.to_str()
            .is_ok_and(|s| s.trim().is_empty() || s.trim().eq_ignore_ascii_case("identity"))
    })
}

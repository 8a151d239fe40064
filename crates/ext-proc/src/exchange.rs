//! One HTTP exchange as Envoy's `ext_proc` filter presents it: one gRPC
//! stream of `ProcessingRequest`s, each answered here by driving the
//! request's `citestream_host::exchange::Exchange`, which makes every
//! decision; this module only translates messages.
//!
//! ```text
//! request_headers ─► Exchange::new; grounded: authenticate (401 now, as an immediate response);
//!                    proxied (/v1/…): on_request → the key edits; not ours: pass-through mode
//! request_body    ─► (BUFFERED) on_request(body): 400/401/413 as an immediate response,
//!                    else the new body + the exchange's header edits
//! response_headers ► on_response_headers(status, headers): its edits
//! response_body   ─► on_response_piece (the end: on_response_body) + next_output,
//!                    packed by crate::response
//!                    (STREAMED or FULL_DUPLEX_STREAMED)
//! trailers        ─► unchanged (FULL_DUPLEX: the body ends first)
//! ```
//!
//! Traces (`citestream_host::telemetry`, on with `log.otlp_endpoint`): a
//! request that is ours opens the `request` span at its headers,
//! continuing the `traceparent` Envoy sent; the request side runs in it,
//! and the exchange opens the `upstream` span and sends its
//! `traceparent` upstream with the request's header edits; the response
//! headers are handled in a `response` span.
//!
//! Proxied and not-ours requests ask Envoy (with `allow_mode_override`)
//! not to send their bodies; without it their bodies pass through the
//! exchange unchanged.
//!
//! Input that makes no sense (a body before its headers, a second request
//! body in `STREAMED` request mode, unknown messages) is passed through,
//! never an error: the exchange and the process keep going. Envoy ending
//! the stream drops the exchange (a reserved search is released).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use citestream_host::exchange::{BodyError, Exchange, Handling, RequestHead};
use citestream_host::grounding::Grounding;
use citestream_host::telemetry;
use citestream_host::telemetry::Instrument;

use crate::pb::processing_request::Request;
use crate::pb::{
    BodySendMode, HeaderSendMode, HttpBody, HttpHeaders, ProcessingMode, ProcessingRequest,
    ProcessingResponse, ProtocolConfiguration,
};
use crate::proto::{self, Chunk, Headers};
use crate::response::{self, BodyMode};
use citestream_host::exchange::HeaderEdits;

/// One gRPC stream (see the module docs).
#[derive(Debug)]
pub(crate) struct Session {
    grounding: Arc<Grounding>,
    mode: BodyMode,
    exchange: Option<Exchange>,
    /// The request went upstream unprocessed (request body not
    /// buffered): everything after passes.
    bypass: bool,
    /// The request body has been handled.
    requested: bool,
    /// The `request` span (disabled when not ours or traces are off).
    trace: telemetry::Span,
}

impl Session {
    /// A new session.
    pub(crate) fn new(grounding: Arc<Grounding>) -> Session {
        Session {
            grounding,
            mode: BodyMode::Streamed,
            exchange: None,
            bypass: false,
            requested: false,
            trace: telemetry::Span::none(),
        }
    }

    /// Handles one message from Envoy, pushing the answers to send (none,
    /// one, or two) onto `out`.
    pub(crate) async fn handle(
        &mut self,
        msg: ProcessingRequest,
        out: &mut Vec<ProcessingResponse>,
    ) {
        if waits(&msg) {
            self.handle_waiting(msg, out).await;
        } else {
            let last = self.handle_now(msg, out);
            out.extend(last);
        }
    }

    /// [`Session::handle`] for the messages answered without waiting
    /// (response bodies, trailers: every message of the per-event path;
    /// see [`waits`]): returns the last answer to send, after any pushed
    /// onto `before` (only trailers that end a full-duplex body have one).
    pub(crate) fn handle_now(
        &mut self,
        msg: ProcessingRequest,
        before: &mut Vec<ProcessingResponse>,
    ) -> Option<ProcessingResponse> {
        self.configure(msg.protocol_config.as_ref());
        // In observability mode answers are ignored; send none.
        let answer = |a| (!msg.observability_mode).then_some(a);
        match msg.request {
            Some(Request::RequestTrailers(_)) => answer(proto::request_trailers()),
            Some(Request::ResponseBody(b)) => self.response_body(b).and_then(answer),
            Some(Request::ResponseTrailers(_)) => {
                before.extend(self.end_before_trailers().and_then(answer));
                answer(proto::response_trailers())
            }
            _ => None,
        }
    }

    /// The messages whose answer may wait for the request side (auth, the
    /// search, the quota).
    async fn handle_waiting(&mut self, msg: ProcessingRequest, out: &mut Vec<ProcessingResponse>) {
        self.configure(msg.protocol_config.as_ref());
        let answer = match msg.request {
            Some(Request::RequestHeaders(h)) => Some(self.request_headers(&h).await),
            Some(Request::RequestBody(b)) => Some(self.request_body(b).await),
            Some(Request::ResponseHeaders(h)) => Some(self.response_headers(&h).await),
            _ => None,
        };
        if !msg.observability_mode {
            out.extend(answer);
        }
    }

    /// The body mode announced in an exchange's first message.
    fn configure(&mut self, pc: Option<&ProtocolConfiguration>) {
        if let Some(pc) = pc {
            self.mode = if pc.response_body_mode == BodySendMode::FullDuplexStreamed as i32 {
                BodyMode::FullDuplex
            } else {
                BodyMode::Streamed
            };
        }
    }

    /// The exchange, unless this stream passes everything.
    fn live(&mut self) -> Option<&mut Exchange> {
        if self.bypass {
            None
        } else {
            self.exchange.as_mut()
        }
    }

    async fn request_headers(&mut self, h: &HttpHeaders) -> ProcessingResponse {
        let headers = Headers::read(h.headers.as_ref());
        let method = http::Method::from_bytes(headers.method.as_bytes()).unwrap_or_default();
        let head = RequestHead::new(method, &headers.path, headers.map);
        let ex = self
            .exchange
            .insert(Exchange::new(self.grounding.clone(), head));
        let handling = ex.handling();
        if handling != Handling::NotOurs {
            let path = headers.path.split(['?', '#']).next().unwrap_or_default();
            self.trace = telemetry::request_span(&headers.method, path, ex.request_headers());
        }
        let trace = self.trace.clone();
        let edits = match handling {
            Handling::Grounded(_) => {
                if let Err(r) = ex.authenticate() {
                    return immediate(&trace, r, "citestream_unauthorized");
                }
                if h.end_of_stream {
                    // A grounded endpoint without a body: the exchange
                    // answers it (a 400 in the endpoint's shape).
                    return self
                        .request_body(HttpBody {
                            body: Bytes::new(),
                            end_of_stream: true,
                        })
                        .await;
                }
                return proto::request_headers(&HeaderEdits::default());
            }
            Handling::Proxied => match ex.on_request(None).instrument(trace.clone()).await {
                Ok(f) => f.edits,
                Err(r) => return immediate(&trace, r, "citestream_unauthorized"),
            },
            Handling::NotOurs => HeaderEdits::default(),
        };
        self.requested = true;
        // Not grounded: ask Envoy to stop sending this exchange's bodies
        // (honoured with `allow_mode_override`; otherwise they pass
        // through here unchanged).
        let mut r = proto::request_headers(&edits);
        if self.mode == BodyMode::Streamed {
            r.mode_override = Some(pass_through_mode(handling == Handling::Proxied));
        }
        r
    }

    async fn request_body(&mut self, b: HttpBody) -> ProcessingResponse {
        let keep = || proto::request_body(Chunk::Keep, &HeaderEdits::default());
        if self.requested || self.bypass {
            return keep();
        }
        let Some(ex) = self.exchange.as_mut() else {
            return keep();
        };
        if !b.end_of_stream {
            // Not BUFFERED (a misconfigured filter): the request has gone
            // upstream already; let it and its response pass.
            tracing::warn!(
                request_id = ex.request_id(),
                "request body not buffered (set request_body_mode: BUFFERED); passing through"
            );
            self.bypass = true;
            return keep();
        }
        self.requested = true;
        let trace = &self.trace;
        if b.body.len() as u64 > ex.max_request_body() {
            let r = ex.request_too_large();
            return immediate(trace, r, "citestream_request_too_large");
        }
        let original = b.body;
        match ex
            .on_request(Some(original.clone()))
            .instrument(trace.clone())
            .await
        {
            Err(r) => immediate(trace, r, "citestream_invalid_request"),
            Ok(f) => {
                let chunk = match f.body {
                    Some(body) if body != original => Chunk::Replace(body),
                    _ => Chunk::Keep,
                };
                proto::request_body(chunk, &f.edits)
            }
        }
    }

    async fn response_headers(&mut self, h: &HttpHeaders) -> ProcessingResponse {
        let trace = self.trace.clone();
        let Some(ex) = self.live() else {
            return proto::response_headers(&HeaderEdits::default());
        };
        let headers = Headers::read(h.headers.as_ref());
        let head = ex
            .on_response_headers(headers.status, &headers.map)
            .instrument(trace.child("response"))
            .await;
        let search = head.edits.get("x-citestream-search");
        telemetry::record_reply(&trace, headers.status, search);
        if h.end_of_stream {
            // No body follows.
            ex.on_response_body(Bytes::new(), true);
            while let Ok(Some(_)) = ex.next_output() {}
        }
        proto::response_headers(&head.edits)
    }

    fn response_body(&mut self, b: HttpBody) -> Option<ProcessingResponse> {
        let mode = self.mode;
        let end = b.end_of_stream;
        let piece = b.body;
        let Some(ex) = self.live() else {
            return response::answer(mode, piece, None, end);
        };
        // A piece that does not end the body takes the exchange's
        // per-piece call (its first output handed back at once, nothing
        // queued); the end takes the general one.
        let first = if end {
            ex.on_response_body(piece.clone(), true);
            ex.next_output()
        } else {
            ex.on_response_piece(piece.clone())
        };
        match first.and_then(|first| drain(ex, first, &piece)) {
            Ok(out) => response::answer(mode, piece, out, end),
            Err(_) => Some(broken()),
        }
    }

    fn end_before_trailers(&mut self) -> Option<ProcessingResponse> {
        let mode = self.mode;
        let ex = self.live()?;
        ex.on_response_body(Bytes::new(), true);
        match ex
            .next_output()
            .and_then(|first| drain(ex, first, &Bytes::new()))
        {
            Ok(rest) => response::rest_before_trailers(mode, rest.unwrap_or_default()),
            Err(_) => Some(broken()),
        }
    }
}

/// `true` for the messages whose answer may wait for the request side
/// (headers, the request body), which [`Session::handle`] takes; the
/// others go to [`Session::handle_now`].
pub(crate) fn waits(msg: &ProcessingRequest) -> bool {
    matches!(
        msg.request,
        Some(Request::RequestHeaders(_) | Request::RequestBody(_) | Request::ResponseHeaders(_))
    )
}

/// Everything the exchange has to send now, as one piece, given its first
/// output `first` (`None`: it has nothing); `None` when it is `piece`
/// itself (unchanged). A lone output is handed on as it is; only several
/// are copied, into one.
fn drain(
    ex: &mut Exchange,
    first: Option<Bytes>,
    piece: &Bytes,
) -> Result<Option<Bytes>, BodyError> {
    let Some(first) = first else {
        return Ok(Some(Bytes::new()));
    };
    let Some(second) = ex.next_output()? else {
        let same = first.as_ptr() == piece.as_ptr() && first.len() == piece.len();
        return Ok((!same).then_some(first));
    };
    let mut joined = BytesMut::with_capacity(first.len() + second.len());
    joined.extend_from_slice(&first);
    joined.extend_from_slice(&second);
    while let Some(b) = ex.next_output()? {
        joined.extend_from_slice(&b);
    }
    Ok(Some(joined.freeze()))
}

/// An immediate response (a rejected request), its status on the
/// `request` span.
fn immediate(
    trace: &telemetry::Span,
    r: citestream_host::exchange::Reply,
    details: &str,
) -> ProcessingResponse {
    telemetry::record_reply(trace, r.status, r.headers.get("x-citestream-search"));
    proto::immediate(r, details)
}

/// The answer to a body that cannot be decoded: reset the client's
/// stream (the exchange logged why).
fn broken() -> ProcessingResponse {
    let r = citestream_host::exchange::Reply {
        status: 502,
        body: Bytes::new(),
        headers: HeaderEdits::default(),
    };
    proto::immediate(r, "citestream_broken_response")
}

/// The mode for an exchange that is not grounded: no bodies; the response
/// headers only for a proxied one (the exchange adds its headers and logs
/// its status).
fn pass_through_mode(response_headers: bool) -> ProcessingMode {
    let h = if response_headers {
        HeaderSendMode::Send
    } else {
        HeaderSendMode::Skip
    };
    ProcessingMode {
        request_body_mode: BodySendMode::None as i32,
        response_header_mode: h as i32,
        response_body_mode: BodySendMode::None as i32,
        ..Default::default()
    }
}

//! The floor of the `ext_proc` protocol: an external processor that
//! changes nothing, the baseline `citestream ext-proc` is measured against
//! (served by `examples/noop_processor.rs`; `scripts/bench_envoy.py`, the
//! host benchmark and `examples/ext_proc_callgrind.rs` use it).
//!
//! Contract: every message gets the least the protocol requires of a
//! processor that changes nothing:
//!
//! * headers and trailers: an empty answer of the message's kind
//!   (CONTINUE, no mutation);
//! * a body in `BUFFERED` or `STREAMED` mode: an empty `BodyResponse`
//!   (the bytes are kept as they are);
//! * a body in `FULL_DUPLEX_STREAMED` mode (read from the first message's
//!   `protocol_config`, per direction): Envoy forwards only what the
//!   processor sends back, so each message's bytes go back as one
//!   `streamed_response` with the message's `end_of_stream` (the received
//!   bytes, a slice of the gRPC frame, moved into the answer, not copied);
//!   an empty piece that does not end the body gets no answer;
//! * `observability_mode`: no answers at all.
//!
//! No task or channel per stream: the answer stream polls the inbound one
//! directly, so each answer is made in the poll that read its message. It
//! uses the same message types ([`crate::pb`]) and gRPC service
//! ([`crate::grpc`]) as `citestream ext-proc`, so the difference between
//! the two is the processor's own work.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_core::Stream;
use tonic::{Status, Streaming};

use crate::grpc::Streams;
use crate::pb::{
    BodyMutation, BodyResponse, BodySendMode, CommonResponse, HeadersResponse, HttpBody,
    ProcessingRequest, ProcessingResponse, StreamedBodyResponse, TrailersResponse,
    body_mutation::Mutation, processing_request::Request, processing_response::Response,
};

/// The do-nothing processor (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct Noop;

impl Streams for Noop {
    type Answers = NoopAnswers;

    fn open(&self, inbound: Streaming<ProcessingRequest>) -> NoopAnswers {
        NoopAnswers {
            inbound,
            request_duplex: false,
            response_duplex: false,
        }
    }
}

/// One stream's answers, made as its messages are read.
pub struct NoopAnswers {
    inbound: Streaming<ProcessingRequest>,
    /// `FULL_DUPLEX_STREAMED` request body.
    request_duplex: bool,
    /// `FULL_DUPLEX_STREAMED` response body.
    response_duplex: bool,
}

impl std::fmt::Debug for NoopAnswers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoopAnswers")
            .field("request_duplex", &self.request_duplex)
            .field("response_duplex", &self.response_duplex)
            .finish_non_exhaustive()
    }
}

impl Stream for NoopAnswers {
    type Item = Result<ProcessingResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match ready!(Pin::new(&mut self.inbound).poll_next(cx)) {
                Some(Ok(msg)) => {
                    if let Some(a) = self.answer(msg) {
                        return Poll::Ready(Some(Ok(a)));
                    }
                }
                // Envoy ended the stream or broke it: end ours.
                Some(Err(_)) | None => return Poll::Ready(None),
            }
        }
    }
}

impl NoopAnswers {
    fn answer(&mut self, msg: ProcessingRequest) -> Option<ProcessingResponse> {
        let duplex = BodySendMode::FullDuplexStreamed as i32;
        if let Some(pc) = &msg.protocol_config {
            self.request_duplex = pc.request_body_mode == duplex;
            self.response_duplex = pc.response_body_mode == duplex;
        }
        let r = match msg.request? {
            Request::RequestHeaders(_) => Response::RequestHeaders(HeadersResponse::default()),
            Request::ResponseHeaders(_) => Response::ResponseHeaders(HeadersResponse::default()),
            Request::RequestBody(b) => Response::RequestBody(body(b, self.request_duplex)?),
            Request::ResponseBody(b) => Response::ResponseBody(body(b, self.response_duplex)?),
            Request::RequestTrailers(_) => Response::RequestTrailers(TrailersResponse::default()),
            Request::ResponseTrailers(_) => Response::ResponseTrailers(TrailersResponse::default()),
        };
        (!msg.observability_mode).then(|| ProcessingResponse {
            response: Some(r),
            ..Default::default()
        })
    }
}

/// The answer to one body message: unchanged, or (full duplex) its bytes
/// sent back as they came.
fn body(b: HttpBody, duplex: bool) -> Option<BodyResponse> {
    if !duplex {
        return Some(BodyResponse::default());
    }
    if b.body.is_empty() && !b.end_of_stream {
        return None;
    }
    let echo = StreamedBodyResponse {
        body: b.body,
        end_of_stream: b.end_of_stream,
    };
    Some(BodyResponse {
        response: Some(CommonResponse {
            body_mutation: Some(BodyMutation {
                mutation: Some(Mutation::StreamedResponse(echo)),
            }),
            header_mutation: None,
        }),
    })
}

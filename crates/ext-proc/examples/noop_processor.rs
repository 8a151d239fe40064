//! The floor of the `ext_proc` protocol: an external processor that
//! changes nothing, for benchmarks (`scripts/bench_envoy.py`, the host
//! benchmark) to measure `citestream ext-proc` against.
//!
//! ```sh
//! cargo build --release -p citestream-ext-proc --example noop_processor
//! target/release/examples/noop_processor [--listen ADDR]   # default 127.0.0.1:8080
//! ```
//!
//! It serves `envoy.service.ext_proc.v3.ExternalProcessor` on the same
//! tonic server and generated types as `citestream ext-proc` (the same
//! message size limits, `TCP_NODELAY` on accepted connections, a
//! multi-threaded runtime) and answers every message with the least the
//! protocol requires of a processor that changes nothing:
//!
//! * headers and trailers: an empty answer of the message's kind
//!   (CONTINUE, no mutation);
//! * a body in `BUFFERED` or `STREAMED` mode: an empty `BodyResponse`
//!   (the bytes are kept as they are);
//! * a body in `FULL_DUPLEX_STREAMED` mode (read from the first message's
//!   `protocol_config`, per direction): Envoy forwards only what the
//!   processor sends back, so each message's bytes go back as one
//!   `streamed_response` with the message's `end_of_stream` (the received
//!   buffer moved into the answer, not copied); an empty piece that does
//!   not end the body gets no answer;
//! * `observability_mode`: no answers at all.
//!
//! No task or channel per stream: the answer stream polls the inbound one
//! directly, so each answer is written in the poll that read its message.
//! SIGTERM or SIGINT stops accepting and lets open streams finish.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    BodyMutation, BodyResponse, CommonResponse, HeadersResponse, HttpBody, ProcessingRequest,
    ProcessingResponse, StreamedBodyResponse, TrailersResponse, body_mutation::Mutation,
    processing_request::Request, processing_response::Response,
};
use futures_core::Stream;
use tonic::transport::server::TcpIncoming;
use tonic::{Status, Streaming};

/// The same limit as `citestream ext-proc`.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, Copy)]
struct Noop;

#[tonic::async_trait]
impl ExternalProcessor for Noop {
    type ProcessStream = Answers;

    async fn process(
        &self,
        request: tonic::Request<Streaming<ProcessingRequest>>,
    ) -> Result<tonic::Response<Answers>, Status> {
        Ok(tonic::Response::new(Answers {
            inbound: request.into_inner(),
            request_duplex: false,
            response_duplex: false,
        }))
    }
}

/// One stream's answers, made as its messages are read.
struct Answers {
    inbound: Streaming<ProcessingRequest>,
    /// `FULL_DUPLEX_STREAMED` request body.
    request_duplex: bool,
    /// `FULL_DUPLEX_STREAMED` response body.
    response_duplex: bool,
}

impl Stream for Answers {
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

impl Answers {
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
        ..Default::default()
    };
    Some(BodyResponse {
        response: Some(CommonResponse {
            body_mutation: Some(BodyMutation {
                mutation: Some(Mutation::StreamedResponse(echo)),
            }),
            ..Default::default()
        }),
    })
}

fn listen_addr() -> Result<SocketAddr, String> {
    let mut args = std::env::args().skip(1);
    let mut addr = "127.0.0.1:8080".to_owned();
    while let Some(a) = args.next() {
        if a == "--listen" {
            addr = args.next().ok_or("--listen needs an address")?;
        } else if let Some(v) = a.strip_prefix("--listen=") {
            v.clone_into(&mut addr);
        } else {
            return Err(format!(
                "unknown argument {a:?} (usage: noop_processor [--listen ADDR])"
            ));
        }
    }
    addr.parse().map_err(|e| format!("--listen {addr:?}: {e}"))
}

async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let addr = match listen_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("noop_processor: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("noop_processor: cannot listen on {addr}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    println!("noop_processor: listening on grpc://{local}");
    let svc = ExternalProcessorServer::new(Noop)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let served = tonic::transport::Server::builder()
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming, stopped())
        .await;
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("noop_processor: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

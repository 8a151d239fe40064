//! The gRPC service `envoy.service.ext_proc.v3.ExternalProcessor` over the
//! crate's own message types ([`crate::pb`]): what `tonic-build` would
//! generate for its one method, `Process`, written out for it.
//!
//! Contract:
//! * `POST /envoy.service.ext_proc.v3.ExternalProcessor/Process` opens a
//!   bidirectional stream: the request's messages are decoded with
//!   `prost` (tonic's codec, the configured size limits) and handed to
//!   [`Streams::open`] as one [`tonic::Streaming`]; what it returns is
//!   the answer stream, each item encoded and sent as it is produced (an
//!   `Err` ends the stream with that gRPC status).
//! * Any other path of the service answers gRPC `UNIMPLEMENTED`.
//! * The service's name ([`tonic::server::NamedService`]) is the
//!   protocol's, so `tonic`'s router and `grpc.health.v1` use it.
//! * Opening a stream is synchronous: no future is boxed per stream
//!   beyond tonic's own.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use tonic::codegen::{Body, BoxFuture, Service, StdError, http};
use tonic::{Status, Streaming};
use tonic_prost::ProstCodec;

use crate::pb::{ProcessingRequest, ProcessingResponse};

/// The service's full name.
pub const SERVICE_NAME: &str = "envoy.service.ext_proc.v3.ExternalProcessor";

/// The path of its `Process` method.
const PROCESS: &str = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";

/// An external processor: makes the answer stream of each gRPC stream.
pub trait Streams: Send + Sync + 'static {
    /// One stream's answers.
    type Answers: Stream<Item = Result<ProcessingResponse, Status>> + Send + 'static;

    /// The answers to `inbound`, the messages Envoy sends on one stream.
    fn open(&self, inbound: Streaming<ProcessingRequest>) -> Self::Answers;
}

/// The tonic service of a processor `T` (see the module docs).
#[derive(Debug)]
pub struct ExternalProcessorServer<T> {
    inner: Arc<T>,
    max_decoding: Option<usize>,
    max_encoding: Option<usize>,
}

impl<T> ExternalProcessorServer<T> {
    /// The service of `inner`, with tonic's default size limits.
    pub fn new(inner: T) -> Self {
        ExternalProcessorServer {
            inner: Arc::new(inner),
            max_decoding: None,
            max_encoding: None,
        }
    }

    /// Largest message accepted from Envoy.
    #[must_use]
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.max_decoding = Some(limit);
        self
    }

    /// Largest answer sent.
    #[must_use]
    pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
        self.max_encoding = Some(limit);
        self
    }
}

impl<T> Clone for ExternalProcessorServer<T> {
    fn clone(&self) -> Self {
        ExternalProcessorServer {
            inner: self.inner.clone(),
            max_decoding: self.max_decoding,
            max_encoding: self.max_encoding,
        }
    }
}

impl<T> tonic::server::NamedService for ExternalProcessorServer<T> {
    const NAME: &'static str = SERVICE_NAME;
}

/// `Process` as tonic's streaming method.
struct Process<T>(Arc<T>);

impl<T: Streams> tonic::server::StreamingService<ProcessingRequest> for Process<T> {
    type Response = ProcessingResponse;
    type ResponseStream = T::Answers;
    type Future = std::future::Ready<Result<tonic::Response<T::Answers>, Status>>;

    fn call(&mut self, request: tonic::Request<Streaming<ProcessingRequest>>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(self.0.open(request.into_inner()))))
    }
}

impl<T, B> Service<http::Request<B>> for ExternalProcessorServer<T>
where
    T: Streams,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != PROCESS {
            return Box::pin(async {
                Ok(Status::unimplemented("unknown method").into_http::<tonic::body::Body>())
            });
        }
        let method = Process(self.inner.clone());
        let (dec, enc) = (self.max_decoding, self.max_encoding);
        Box::pin(async move {
            let codec = ProstCodec::<ProcessingResponse, ProcessingRequest>::default();
            let mut grpc = tonic::server::Grpc::new(codec).apply_max_message_size_config(dec, enc);
            Ok(grpc.streaming(method, req).await)
        })
    }
}

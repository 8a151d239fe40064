//! The gRPC service `envoy.service.ext_proc.v3.ExternalProcessor`: one
//! bidirectional stream per HTTP exchange, each driven by an
//! `Session` (the crate's private `exchange` module, around the host's exchange) on its own task.
//!
//! Contract:
//! * Messages are handled in order; the answers to one message are sent
//!   before the next message is read (the protocol's ordering).
//! * When Envoy ends the stream (the client went away, the filter gave up),
//!   work in progress for it (a search, a quota reservation) is dropped at
//!   once: the reservation is released by the host's store.
//! * A malformed or unexpected message never ends the process; a gRPC
//!   error on the inbound stream ends only that stream.

use std::pin::Pin;
use std::sync::Arc;

use citestream_host::grounding::Grounding;
use citestream_host::reload::Swap;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::ExternalProcessor;
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use futures_core::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::exchange::Session;

/// Answers in flight per stream before the task waits for Envoy to read.
const QUEUE: usize = 32;

/// The external processor (see the module docs).
#[derive(Debug, Clone)]
pub struct Processor {
    grounding: Arc<Swap<Grounding>>,
}

impl Processor {
    /// A processor over `grounding`.
    #[must_use]
    pub fn new(grounding: Arc<Grounding>) -> Processor {
        Processor {
            grounding: Arc::new(Swap::new(grounding)),
        }
    }

    /// The request side each new stream takes (a config reload replaces
    /// it; a stream keeps the one it started with).
    #[must_use]
    pub fn grounding(&self) -> &Arc<Swap<Grounding>> {
        &self.grounding
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for Processor {
    type ProcessStream = Answers;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(QUEUE);
        let exchange = Session::new(self.grounding.load());
        tokio::spawn(drive(exchange, inbound, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Reads `inbound` to its end, answering each message through `tx`.
async fn drive(
    mut exchange: Session,
    mut inbound: Streaming<ProcessingRequest>,
    tx: mpsc::Sender<Result<ProcessingResponse, Status>>,
) {
    let mut out = Vec::with_capacity(2);
    loop {
        let msg = tokio::select! {
            m = inbound.message() => m,
            () = tx.closed() => return,
        };
        let msg = match msg {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(status) => {
                tracing::debug!(%status, "ext_proc stream ended by Envoy");
                return;
            }
        };
        // Envoy may cancel while a search runs: drop it (and release the
        // reservation) instead of finishing work nobody will read.
        tokio::select! {
            () = exchange.handle(msg, &mut out) => {}
            () = tx.closed() => return,
        }
        for answer in out.drain(..) {
            if tx.send(Ok(answer)).await.is_err() {
                return;
            }
        }
    }
}

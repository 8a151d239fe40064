//! The processor behind the gRPC service
//! `envoy.service.ext_proc.v3.ExternalProcessor` ([`crate::grpc`]): one
//! bidirectional stream per HTTP exchange, each driven by a `Session`
//! (the crate's private `exchange` module, around the host's exchange).
//!
//! Contract:
//! * Messages are handled in order; the answers to one message are sent
//!   before the next message is read (the protocol's ordering).
//! * No task or channel per stream: the answer stream tonic sends from
//!   reads the next message itself, so the answer to a body message is made
//!   and written in the poll that decoded it (no wake-up of another task
//!   per event). Only the messages that wait for the request side (headers,
//!   the request body: auth, search, quota) run as a future of their own.
//! * When Envoy ends the stream (the client went away, the filter gave up),
//!   tonic drops the answer stream and with it the work in progress (a
//!   search, a quota reservation: released by the host's store).
//! * A malformed or unexpected message never ends the process; a gRPC
//!   error on the inbound stream ends only that stream.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use citestream_host::grounding::Grounding;
use citestream_host::reload::Swap;
use futures_core::Stream;
use tonic::{Status, Streaming};

use crate::exchange::{Session, waits};
use crate::grpc::Streams;
use crate::pb::{ProcessingRequest, ProcessingResponse};

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

impl Streams for Processor {
    type Answers = Answers;

    fn open(&self, inbound: Streaming<ProcessingRequest>) -> Answers {
        Answers {
            inbound,
            session: Some(Session::new(self.grounding.load())),
            waiting: None,
            out: Vec::with_capacity(2),
        }
    }
}

/// A message whose answer waits for the request side, with the session
/// it took; it gives both back.
type Waiting = Pin<Box<dyn Future<Output = (Session, Vec<ProcessingResponse>)> + Send>>;

/// One stream's answers, made as its messages are read (see the module
/// docs).
pub struct Answers {
    inbound: Streaming<ProcessingRequest>,
    /// `None` while `waiting` holds it.
    session: Option<Session>,
    waiting: Option<Waiting>,
    /// Answers not yet sent, the next one last.
    out: Vec<ProcessingResponse>,
}

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answers")
            .field("waiting", &self.waiting.is_some())
            .field("queued", &self.out.len())
            .finish_non_exhaustive()
    }
}

impl Stream for Answers {
    type Item = Result<ProcessingResponse, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(a) = this.out.pop() {
                return Poll::Ready(Some(Ok(a)));
            }
            if let Some(w) = this.waiting.as_mut() {
                let (session, mut out) = ready!(w.as_mut().poll(cx));
                this.waiting = None;
                this.session = Some(session);
                out.reverse();
                this.out = out;
                continue;
            }
            let msg = match ready!(Pin::new(&mut this.inbound).poll_next(cx)) {
                Some(Ok(m)) => m,
                None => return Poll::Ready(None),
                Some(Err(status)) => {
                    tracing::debug!(%status, "ext_proc stream ended by Envoy");
                    return Poll::Ready(None);
                }
            };
            if !waits(&msg) {
                let Some(session) = this.session.as_mut() else {
                    return Poll::Ready(None);
                };
                // The per-event path: the answer goes out from here,
                // without the queue, unless another must go before it.
                let last = session.handle_now(msg, &mut this.out);
                if this.out.is_empty() {
                    match last {
                        Some(a) => return Poll::Ready(Some(Ok(a))),
                        None => continue,
                    }
                }
                this.out.extend(last);
                this.out.reverse();
                continue;
            }
            let Some(mut session) = this.session.take() else {
                return Poll::Ready(None);
            };
            this.waiting = Some(Box::pin(async move {
                let mut out = Vec::with_capacity(2);
                session.handle(msg, &mut out).await;
                (session, out)
            }));
        }
    }
}

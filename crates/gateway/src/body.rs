//! Response bodies: the upstream's body driven through the request's
//! [`Exchange`], and paced demo events.
//!
//! Every body is pulled by hyper only when the client connection can take
//! more (backpressure); none buffers more than what the exchange holds
//! (one upstream piece, the rewriter's partial event, a whole body up to
//! its cap). Dropping a body (client gone) drops the upstream body inside
//! it, which closes the upstream connection at once, and the exchange,
//! which writes the request's log line.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use citestream_host::exchange::Exchange;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;

/// The error type of every body.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The one body type the gateway handles internally.
pub(crate) type AnyBody = BoxBody<Bytes, BoxError>;

/// A whole body from bytes.
pub(crate) fn full(b: impl Into<Bytes>) -> AnyBody {
    http_body_util::Full::new(b.into())
        .map_err(|never| match never {})
        .boxed()
}

/// The upstream's body through the exchange: each upstream piece is handed
/// to it and its output forwarded before the next piece is read. An
/// upstream error ends the output after the exchange has flushed what it
/// holds, then fails the client's stream (so it sees a broken response,
/// not a complete one). Trailers pass only when the body is not
/// rewritten (they have no place in a rewritten stream).
pub(crate) struct Exchanged {
    head: Option<Bytes>,
    upstream: AnyBody,
    exchange: Exchange,
    finished: bool,
    error: Option<BoxError>,
    trailers: bool,
}

impl Exchanged {
    /// `trailers`: pass the upstream's trailers on.
    pub(crate) fn new(upstream: AnyBody, exchange: Exchange, trailers: bool) -> Self {
        Exchanged {
            head: None,
            upstream,
            exchange,
            finished: false,
            error: None,
            trailers,
        }
    }

    /// The same, with `head` sent first (output the exchange gave already).
    pub(crate) fn after(mut self, head: Bytes) -> Self {
        self.head = Some(head);
        self
    }
}

impl Body for Exchanged {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(h) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(h))));
        }
        loop {
            match this.exchange.next_output() {
                Ok(Some(out)) => return Poll::Ready(Some(Ok(Frame::data(out)))),
                Ok(None) => {}
                Err(e) => {
                    this.finished = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
            if this.finished {
                return Poll::Ready(this.error.take().map(Err));
            }
            match ready!(Pin::new(&mut this.upstream).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.exchange.on_response_body(data, false),
                    Err(trailers) if this.trailers => return Poll::Ready(Some(Ok(trailers))),
                    Err(_) => {}
                },
                Some(Err(e)) => {
                    this.exchange.on_broken(&e.to_string());
                    this.error = Some(e);
                    this.finished = true;
                }
                None => {
                    this.exchange.on_response_body(Bytes::new(), true);
                    this.finished = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        false
    }
}

/// SSE events handed out one by one, `pace` apart (the demo model).
pub(crate) struct Paced {
    events: VecDeque<Bytes>,
    pace: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Paced {
    pub(crate) fn new(events: Vec<Bytes>, pace: Duration) -> Self {
        Paced {
            events: events.into(),
            pace,
            sleep: None,
        }
    }
}

impl Body for Paced {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(s) = this.sleep.as_mut() {
            ready!(s.as_mut().poll(cx));
            this.sleep = None;
        }
        match this.events.pop_front() {
            Some(e) => {
                if !this.events.is_empty() && !this.pace.is_zero() {
                    this.sleep = Some(Box::pin(tokio::time::sleep(this.pace)));
                }
                Poll::Ready(Some(Ok(Frame::data(e))))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.events.is_empty()
    }
}

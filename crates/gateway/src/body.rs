//! Response bodies: the upstream's body driven through the request's
//! [`Exchange`], and paced demo events.
//!
//! Every body is pulled by hyper only when the client connection can take
//! more (backpressure); none buffers more than what the exchange holds
//! (one upstream piece, the rewriter's partial event, a whole body up to
//! its cap). Dropping a body (client gone) drops the upstream body inside
//! it, which closes the upstream connection at once, and the exchange,
//! which writes the request's log line.
//!
//! A body that fails makes hyper's HTTP/1 connection drop what it has
//! buffered but not written yet; so on HTTP/1 an upstream break is
//! reported only once the connection's socket was flushed after the last
//! bytes were handed over ([`Flushes`]): every byte the upstream delivered
//! reaches the client, then its response ends abnormally (no last chunk,
//! or fewer bytes than its `content-length`). On HTTP/2 the break resets
//! the stream at once (h2 offers no flush a body can wait for).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};
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

/// How long a broken body waits for the client's socket to take what is
/// buffered for it before failing anyway (a client that stopped reading).
const FLUSH_GRACE: Duration = Duration::from_secs(10);

/// The flushes of one HTTP/1 client connection's socket, for a body
/// waiting until what hyper buffered for it has been written (see the
/// module docs).
///
/// hyper's HTTP/1 connection flushes the socket only once its own write
/// buffer is empty, and flushes after every poll of the body, so a flush
/// after a body's last frame means that frame has reached the kernel.
/// Counting costs nothing while no body waits: one load per flush.
#[derive(Debug, Default)]
pub(crate) struct Flushes {
    count: AtomicU64,
    waiting: AtomicUsize,
    wakers: Mutex<Vec<Waker>>,
}

impl Flushes {
    /// The socket was flushed (called by the connection's I/O).
    #[inline]
    pub(crate) fn flushed(&self) {
        if self.waiting.load(Ordering::SeqCst) != 0 {
            self.wake();
        }
    }

    /// [`Flushes::flushed`] while a body waits.
    #[cold]
    fn wake(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap_or_else(|e| e.into_inner()));
        self.waiting.store(0, Ordering::SeqCst);
        for w in wakers {
            w.wake();
        }
    }

    /// Ready once a flush happened after `mark` (a value of [`Flushes::mark`]).
    fn poll_since(&self, mark: u64, cx: &mut Context<'_>) -> Poll<()> {
        if self.count.load(Ordering::SeqCst) > mark {
            return Poll::Ready(());
        }
        let mut wakers = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        self.waiting.store(wakers.len(), Ordering::SeqCst);
        Poll::Pending
    }

    fn mark(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

/// A broken body waiting for the flush of what it handed over.
struct FlushWait {
    mark: u64,
    grace: Pin<Box<tokio::time::Sleep>>,
}

/// The upstream's body through the exchange: each upstream piece is handed
/// to it and its output forwarded before the next piece is read. An
/// upstream error ends the output after the exchange has flushed what it
/// holds and the client's socket has taken all of it (or
/// [`FLUSH_GRACE`] passed), then fails the client's stream (so it sees a
/// broken response, not a complete one). Trailers pass only when the body
/// is not rewritten (they have no place in a rewritten stream).
pub(crate) struct Exchanged {
    head: Option<Bytes>,
    upstream: AnyBody,
    exchange: Exchange,
    finished: bool,
    error: Option<BoxError>,
    trailers: bool,
    flushes: Option<Arc<Flushes>>,
    wait: Option<FlushWait>,
}

impl Exchanged {
    /// `trailers`: pass the upstream's trailers on; `flushes`: those of the
    /// client's HTTP/1 connection (`None` on HTTP/2).
    pub(crate) fn new(
        upstream: AnyBody,
        exchange: Exchange,
        trailers: bool,
        flushes: Option<Arc<Flushes>>,
    ) -> Self {
        Exchanged {
            head: None,
            upstream,
            exchange,
            finished: false,
            error: None,
            trailers,
            flushes,
            wait: None,
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
            // (A body that passes holds nothing between pieces: the usual
            // case is one check here.)
            if !this.exchange.passes() {
                match this.exchange.next_output() {
                    Ok(Some(out)) => return Poll::Ready(Some(Ok(Frame::data(out)))),
                    Ok(None) => {}
                    Err(e) => {
                        this.finished = true;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                }
            }
            if this.finished {
                if this.error.is_some() {
                    ready!(this.poll_flushed(cx));
                }
                return Poll::Ready(this.error.take().map(Err));
            }
            match ready!(Pin::new(&mut this.upstream).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    // The per-piece path: the piece (or the rewriter's
                    // first output) goes out at once.
                    Ok(data) => match this.exchange.on_response_piece(data) {
                        Ok(Some(out)) => return Poll::Ready(Some(Ok(Frame::data(out)))),
                        Ok(None) => {}
                        Err(e) => {
                            this.finished = true;
                            return Poll::Ready(Some(Err(e.into())));
                        }
                    },
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

impl Exchanged {
    /// Ready once the client's socket was flushed after everything this
    /// body handed over, or the grace is over.
    fn poll_flushed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(flushes) = &self.flushes else {
            return Poll::Ready(());
        };
        let w = self.wait.get_or_insert_with(|| FlushWait {
            mark: flushes.mark(),
            grace: Box::pin(tokio::time::sleep(FLUSH_GRACE)),
        });
        if flushes.poll_since(w.mark, cx).is_ready() {
            return Poll::Ready(());
        }
        w.grace.as_mut().poll(cx)
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

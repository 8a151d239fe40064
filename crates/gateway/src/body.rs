//! Response bodies: the streaming rewrite, paced demo events, and the
//! per-request log line carried to the end of the body.
//!
//! Every body is pulled by hyper only when the client connection can take
//! more (backpressure); none buffers more than one upstream piece, except
//! [`collect_capped`] for whole (non-streamed) bodies, which is bounded.
//! Dropping a body (client gone) drops the upstream body inside it, which
//! closes the upstream connection at once.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use citestream::{Rewriter, StreamRewriter};
use citestream_host::metrics::{Metrics, OpenStream, UpstreamError};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;

use crate::log::RequestLog;

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

/// A streamed response rewritten piece by piece: each upstream piece is
/// fed to the rewriter and its output forwarded before the next piece is
/// read. An upstream error ends the output after the rewriter has flushed
/// what it holds, then fails the client's stream (so it sees a broken
/// response, not a complete one).
pub(crate) struct Rewriting {
    upstream: AnyBody,
    rewriter: Rewriter,
    finished: bool,
    error: Option<BoxError>,
    metrics: Arc<Metrics>,
}

impl Rewriting {
    pub(crate) fn new(upstream: AnyBody, rewriter: Rewriter, metrics: Arc<Metrics>) -> Self {
        Rewriting {
            upstream,
            rewriter,
            finished: false,
            error: None,
            metrics,
        }
    }
}

impl Body for Rewriting {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if let Some(out) = this.rewriter.next_output() {
                return Poll::Ready(Some(Ok(Frame::data(out))));
            }
            if this.finished {
                return Poll::Ready(this.error.take().map(Err));
            }
            match ready!(Pin::new(&mut this.upstream).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    // Trailers have no place in an SSE stream: dropped.
                    if let Ok(data) = frame.into_data() {
                        let t0 = Instant::now();
                        this.rewriter.feed(data);
                        let first = this.rewriter.next_output();
                        this.metrics.event_added_latency(t0.elapsed());
                        if let Some(out) = first {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                }
                Some(Err(e)) => {
                    this.metrics.upstream_error(UpstreamError::Broken);
                    this.error = Some(e);
                    this.rewriter.finish();
                    this.finished = true;
                }
                None => {
                    this.rewriter.finish();
                    this.finished = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        false
    }
}

/// What [`collect_capped`] got.
pub(crate) enum Collected {
    /// The whole body, at most the cap.
    Whole(Bytes),
    /// Over the cap: the pieces read so far and the rest of the body, to
    /// pass through unchanged.
    Over(AnyBody),
}

/// Reads a whole body of at most `cap` bytes.
///
/// # Errors
/// The body's error.
pub(crate) async fn collect_capped(mut body: AnyBody, cap: usize) -> Result<Collected, BoxError> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if buf.len() + data.len() > cap {
            let head = VecDeque::from([buf.freeze(), data]);
            return Ok(Collected::Over(Prefixed { head, rest: body }.boxed()));
        }
        buf.extend_from_slice(&data);
    }
    Ok(Collected::Whole(buf.freeze()))
}

/// Some pieces, then the rest of a body.
struct Prefixed {
    head: VecDeque<Bytes>,
    rest: AnyBody,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        while let Some(b) = this.head.pop_front() {
            if !b.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
        }
        Pin::new(&mut this.rest).poll_frame(cx)
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

/// The body sent to the client: any body, plus the request's log line
/// (written when the body ends or is dropped) and, for streams, the open
/// stream gauge.
pub(crate) struct Logged {
    inner: AnyBody,
    log: RequestLog,
    _open: Option<OpenStream>,
}

impl Logged {
    pub(crate) fn new(inner: AnyBody, log: RequestLog, open: Option<OpenStream>) -> Self {
        Logged {
            inner,
            log,
            _open: open,
        }
    }
}

impl Body for Logged {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let r = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &r {
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    this.log.add_bytes(d.len());
                }
            }
            Some(Err(e)) => this.log.set_error(e.to_string()),
            None => this.log.set_complete(),
        }
        Poll::Ready(r)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.log.set_complete();
        }
    }
}

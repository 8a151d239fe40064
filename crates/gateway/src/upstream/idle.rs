//! `upstream.idle_timeout`: a started upstream body that sends nothing for
//! this long is cut.
//!
//! Contract: [`Idle`] passes every frame of the inner body through
//! unchanged; when no frame (nor the end) came for `limit` since the body
//! started or since the last frame, it ends with an error, which the server
//! turns into a broken response for the client (a stream without its end),
//! and dropping the inner body closes the upstream connection. A frame
//! costs one clock read; the timer is re-armed only when it fires.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::body::{AnyBody, BoxError};

/// An upstream body with an idle limit.
pub(crate) struct Idle {
    inner: AnyBody,
    limit: Duration,
    last: Instant,
    timer: Pin<Box<Sleep>>,
    done: bool,
}

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle").field("limit", &self.limit).finish()
    }
}

impl Idle {
    pub(crate) fn new(inner: AnyBody, limit: Duration) -> Idle {
        let last = Instant::now();
        Idle {
            inner,
            limit,
            last,
            timer: Box::pin(tokio::time::sleep_until(last + limit)),
            done: false,
        }
    }
}

/// The error of a body cut for idling.
#[derive(Debug)]
struct IdleTimeout(Duration);

impl std::fmt::Display for IdleTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the upstream sent nothing for {:?}", self.0)
    }
}

impl std::error::Error for IdleTimeout {}

impl Body for Idle {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(r) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.last = Instant::now();
            return Poll::Ready(r);
        }
        loop {
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let due = this.last + this.limit;
            if Instant::now() >= due {
                this.done = true;
                return Poll::Ready(Some(Err(Box::new(IdleTimeout(this.limit)))));
            }
            this.timer.as_mut().reset(due);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

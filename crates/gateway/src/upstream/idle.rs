//! `upstream.idle_timeout`: a started upstream body that sends nothing for
//! this long is cut.
//!
//! Contract: [`Idle`] passes every frame of the inner body through
//! unchanged; when no frame (nor the end) came for `limit` since the body
//! started or since the last frame, it ends with an error, which the server
//! turns into a broken response for the client (a stream without its end),
//! and dropping the inner body closes the upstream connection. A frame
//! costs one clock read; the timer is not touched while it is armed (it
//! wakes the body's task when it fires) and is re-armed only then.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::body::{AnyBody, BoxError};

/// An upstream body with an idle limit.
///
/// Per frame it only notes the time. The timer, armed for `limit` after
/// the start, is left alone while it is armed and the same task polls the
/// body (it wakes that task when it fires); only when it has fired is it
/// looked at: the body is cut if nothing came for `limit` since the last
/// frame, else the timer is re-armed for the last frame's time plus
/// `limit`.
pub(crate) struct Idle<B = AnyBody> {
    inner: B,
    limit: Duration,
    last: Instant,
    timer: Pin<Box<Sleep>>,
    /// The waker the armed timer holds (of the last poll that registered
    /// it).
    waker: Option<Waker>,
    done: bool,
}

impl<B> std::fmt::Debug for Idle<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle").field("limit", &self.limit).finish()
    }
}

impl<B> Idle<B> {
    pub(crate) fn new(inner: B, limit: Duration) -> Idle<B> {
        let last = Instant::now();
        Idle {
            inner,
            limit,
            last,
            timer: Box::pin(tokio::time::sleep_until(last + limit)),
            waker: None,
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

impl<B> Body for Idle<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
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
            return Poll::Ready(match r {
                Some(Ok(f)) => Some(Ok(f)),
                Some(Err(e)) => Some(Err(e.into())),
                None => None,
            });
        }
        // Armed, and it will wake this task: nothing to do until it fires.
        if !this.timer.is_elapsed() && this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        loop {
            if this.timer.as_mut().poll(cx).is_pending() {
                match &mut this.waker {
                    Some(w) => w.clone_from(cx.waker()),
                    None => this.waker = Some(cx.waker().clone()),
                }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use http_body::{Body, Frame};
    use http_body_util::BodyExt;
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    use super::Idle;
    use crate::body::BoxError;

    /// A body whose frames a test sends through a channel (ends when the
    /// sender is dropped).
    struct Fed(mpsc::Receiver<Bytes>);

    impl Body for Fed {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            self.get_mut()
                .0
                .poll_recv(cx)
                .map(|o| o.map(|b| Ok(Frame::data(b))))
        }
    }

    fn fed(limit: Duration) -> (mpsc::Sender<Bytes>, Idle<Fed>) {
        let (tx, rx) = mpsc::channel(16);
        (tx, Idle::new(Fed(rx), limit))
    }

    #[tokio::test]
    async fn an_active_stream_longer_than_the_limit_is_never_cut() {
        // Frames every 40 ms for 12 frames (about 4 limits): the timer
        // fires several times and is re-armed each time.
        let (tx, body) = fed(Duration::from_millis(120));
        let feeder = tokio::spawn(async move {
            for i in 0..12u8 {
                tokio::time::sleep(Duration::from_millis(40)).await;
                tx.send(Bytes::from(vec![b'a' + i])).await.unwrap();
            }
        });
        let got = body.collect().await.expect("not cut").to_bytes();
        assert_eq!(&got[..], b"abcdefghijkl");
        feeder.await.unwrap();
    }

    #[tokio::test]
    async fn a_stream_silent_for_the_limit_is_cut() {
        let limit = Duration::from_millis(150);
        let (tx, mut body) = fed(limit);
        tx.send(Bytes::from_static(b"one")).await.unwrap();
        let f = body.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), "one");
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send(Bytes::from_static(b"two")).await.unwrap();
        let f = body.frame().await.unwrap().unwrap();
        let last = Instant::now();
        assert_eq!(f.into_data().unwrap(), "two");
        // Then silence (the sender is kept: no end).
        let r = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("cut within 10 s");
        let e = r.unwrap().expect_err("an idle error");
        assert!(e.to_string().contains("sent nothing"), "{e}");
        assert!(
            last.elapsed() >= limit,
            "cut only after the limit of silence"
        );
        assert!(body.frame().await.is_none(), "then the body ends");
        assert!(body.is_end_stream());
        drop(tx);
    }

    #[tokio::test]
    async fn a_body_polled_by_another_task_still_gets_cut() {
        // First polled with a waker that wakes nothing: the armed timer
        // holds that one, so a poll from the real task must register again.
        let (tx, mut body) = fed(Duration::from_millis(100));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(
            std::pin::Pin::new(&mut body)
                .poll_frame(&mut cx)
                .is_pending()
        );
        let r = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("cut within 10 s");
        assert!(r.unwrap().is_err());
        drop(tx);
    }
}

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
//!
//! `upstream.idle_timeout` ([`IdleTimer`], read by [`poll_upstream`]):
//! when the upstream's body sends no frame (nor its end) for the limit
//! since its response headers arrived or since its last frame, it is cut:
//! the exchange is told ([`Exchange::on_broken`]), the client's response
//! ends as broken as above (or, before a whole body was sent, is a 502),
//! and dropping the upstream body closes the upstream connection. An
//! active stream is never cut, however long it lasts. The silence is
//! measured in eighths of the limit, so a body is cut after at least the
//! limit and at most about nine eighths of it without a frame. A frame
//! costs one store (no clock read); the timer fires every eighth of the
//! limit, is not touched between its firings (it wakes the body's task
//! when it fires), and the clock is read only then.

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
use tokio::time::{Instant, Sleep};

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
    exchange: Box<Exchange>,
    /// [`Exchange::passes`], and no head waiting (kept up to date after
    /// every call into the exchange, which changes only through them).
    passes: bool,
    finished: bool,
    error: Option<BoxError>,
    trailers: bool,
    flushes: Option<Arc<Flushes>>,
    wait: Option<FlushWait>,
    idle: Option<IdleTimer>,
}

impl Exchanged {
    /// `trailers`: pass the upstream's trailers on; `flushes`: those of the
    /// client's HTTP/1 connection (`None` on HTTP/2); `idle`: the upstream
    /// body's idle timer ([`IdleTimer::start`]).
    pub(crate) fn new(
        upstream: AnyBody,
        exchange: Box<Exchange>,
        trailers: bool,
        flushes: Option<Arc<Flushes>>,
        idle: Option<IdleTimer>,
    ) -> Self {
        Exchanged {
            head: None,
            upstream,
            passes: exchange.passes(),
            exchange,
            finished: false,
            error: None,
            trailers,
            flushes,
            wait: None,
            idle,
        }
    }

    /// The same, with `head` sent first (output the exchange gave already).
    pub(crate) fn after(mut self, head: Bytes) -> Self {
        self.head = Some(head);
        self.passes = false;
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
        loop {
            // A body that passes holds nothing between pieces: the usual
            // case is this one check (`passes` is false while a head is
            // waiting and once the body finished).
            if !this.passes {
                if let Some(h) = this.head.take() {
                    return this.data(h);
                }
                match this.exchange.next_output() {
                    Ok(Some(out)) => return this.data(out),
                    Ok(None) => {}
                    Err(e) => {
                        this.finished = true;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                }
                if this.finished {
                    if this.error.is_some() {
                        ready!(this.poll_flushed(cx));
                    }
                    return Poll::Ready(this.error.take().map(Err));
                }
            }
            match ready!(poll_upstream(&mut this.upstream, &mut this.idle, cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    // The per-piece path: the piece (or the rewriter's
                    // first output) goes out at once.
                    Ok(data) => {
                        let first = this.exchange.on_response_piece(data);
                        this.passes = this.exchange.passes();
                        match first {
                            Ok(Some(out)) => return this.data(out),
                            Ok(None) => {}
                            Err(e) => {
                                this.finish();
                                return Poll::Ready(Some(Err(e.into())));
                            }
                        }
                    }
                    Err(trailers) if this.trailers => return Poll::Ready(Some(Ok(trailers))),
                    Err(_) => {}
                },
                Some(Err(e)) => {
                    this.exchange.on_broken(&e.to_string());
                    this.error = Some(e);
                    this.finish();
                }
                None => {
                    this.exchange.on_response_body(Bytes::new(), true);
                    this.finish();
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        false
    }
}

/// The most one frame of [`Exchanged`] carries: a larger output (a
/// rewritten event with many annotations, a rewritten whole body) is handed
/// over in slices of this size (no copy), so hyper's HTTP/1 write buffer,
/// which takes a whole frame whenever it holds less than its limit, stays
/// within about twice that instead of growing to the size of the output.
const MAX_FRAME: usize = crate::server::HTTP1_BUF;

impl Exchanged {
    /// `out` as the next frame: its first [`MAX_FRAME`] bytes, the rest
    /// kept to go first at the next poll.
    #[inline]
    fn data(&mut self, mut out: Bytes) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if out.len() > MAX_FRAME {
            let first = out.split_to(MAX_FRAME);
            self.head = Some(out);
            self.passes = false;
            out = first;
        }
        Poll::Ready(Some(Ok(Frame::data(out))))
    }

    /// The upstream body is done with (ended, broken or undecodable).
    fn finish(&mut self) {
        self.finished = true;
        self.passes = false;
    }

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

/// The idle limit of one upstream body (see the module docs).
///
/// Per frame it only notes that one came. The timer fires every
/// [`IdleTimer::TICKS`]th of the limit; at each firing the clock is read
/// once: when a frame came since the previous firing, the silence starts
/// again from now (the frame came no later), and the body is cut once the
/// silence reaches the limit. So it is never cut before the limit of
/// silence, and at most a tick (plus the task's delay in seeing the timer)
/// after it.
pub(crate) struct IdleTimer {
    limit: Duration,
    tick: Duration,
    /// A frame came since the last firing.
    seen: bool,
    /// No frame came after this (an upper bound of the last frame's time,
    /// or the start).
    quiet_since: Instant,
    timer: Pin<Box<Sleep>>,
    /// The waker the armed timer holds (of the last poll that registered
    /// it).
    waker: Option<Waker>,
}

impl IdleTimer {
    /// The limit is measured in this many ticks.
    const TICKS: u32 = 8;

    /// The timer of a body whose response headers just arrived; `None`
    /// when `limit` is zero (no limit).
    pub(crate) fn start(limit: Duration) -> Option<IdleTimer> {
        if limit.is_zero() {
            return None;
        }
        let now = Instant::now();
        let tick = limit / Self::TICKS;
        Some(IdleTimer {
            limit,
            tick,
            seen: false,
            quiet_since: now,
            timer: Box::pin(tokio::time::sleep_until(now + tick)),
            waker: None,
        })
    }

    /// The body handed over a frame.
    #[inline]
    fn frame(&mut self) {
        self.seen = true;
    }

    /// The body had nothing: ready once nothing came for the limit.
    #[inline]
    fn poll_silent(&mut self, cx: &mut Context<'_>) -> Poll<IdleTimeout> {
        // Armed, and it will wake this task: nothing to do until it fires.
        if !self.timer.is_elapsed() && self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        self.poll_timer(cx)
    }

    /// The timer fired, or another task polls: cut, or arm it again.
    #[cold]
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Poll<IdleTimeout> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                match &mut self.waker {
                    Some(w) => w.clone_from(cx.waker()),
                    None => self.waker = Some(cx.waker().clone()),
                }
                return Poll::Pending;
            }
            let now = Instant::now();
            if std::mem::take(&mut self.seen) {
                self.quiet_since = now;
            }
            if now >= self.quiet_since + self.limit {
                return Poll::Ready(IdleTimeout(self.limit));
            }
            let next = (now + self.tick).min(self.quiet_since + self.limit);
            self.timer.as_mut().reset(next);
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

/// The upstream body's next frame, or the idle error once `idle`'s limit
/// passed without one (then poll the body no more).
#[inline]
pub(crate) fn poll_upstream(
    body: &mut AnyBody,
    idle: &mut Option<IdleTimer>,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    match Pin::new(body).poll_frame(cx) {
        Poll::Ready(r) => {
            if let Some(i) = idle {
                i.frame();
            }
            Poll::Ready(r)
        }
        Poll::Pending => match idle {
            Some(i) => i
                .poll_silent(cx)
                .map(|e| Some(Err(Box::new(e) as BoxError))),
            None => Poll::Pending,
        },
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

#[cfg(test)]
mod tests {
    //! `upstream.idle_timeout` through the serve path's body: an upstream
    //! body fed by the test, through a real exchange (a proxied stream).

    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use citestream_host::config::Config;
    use citestream_host::exchange::{BodyPlan, Exchange, RequestHead};
    use citestream_host::grounding::Grounding;
    use http_body::{Body, Frame};
    use http_body_util::BodyExt;
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    use super::{BoxError, Exchanged, IdleTimer, MAX_FRAME};

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

    /// An exchange whose upstream answered an SSE stream it passes.
    async fn exchange() -> Box<Exchange> {
        let cfg = Config::from_toml_with_env("", &|_| None).unwrap();
        let g = Arc::new(Grounding::new(&cfg).await.unwrap());
        let head = RequestHead::new(
            http::Method::POST,
            "/v1/chat/completions",
            http::HeaderMap::new(),
        );
        let mut ex = Exchange::new(g, head);
        let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        ex.on_request(Some(Bytes::from_static(body))).await.unwrap();
        let mut h = http::HeaderMap::new();
        h.insert("content-type", "text/event-stream".parse().unwrap());
        assert_eq!(ex.on_response_headers(200, &h).await.body, BodyPlan::Pass);
        Box::new(ex)
    }

    async fn fed(limit: Duration) -> (mpsc::Sender<Bytes>, Exchanged) {
        let (tx, rx) = mpsc::channel(16);
        let ex = exchange().await;
        let idle = IdleTimer::start(limit);
        (tx, Exchanged::new(Fed(rx).boxed(), ex, true, None, idle))
    }

    #[tokio::test]
    async fn an_active_stream_longer_than_the_limit_is_never_cut() {
        // Frames every 40 ms for 12 frames (about 4 limits): the timer
        // fires several times and is re-armed each time.
        let (tx, body) = fed(Duration::from_millis(120)).await;
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
        let (tx, mut body) = fed(limit).await;
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
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn the_cut_comes_between_the_limit_and_a_tick_after_it() {
        // Paused time: exact. Limit 800 ms, ticks of 100 ms; frames at
        // 250 ms and 730 ms (between ticks), then silence: cut no earlier
        // than 730 + 800 and no later than a tick after.
        let limit = Duration::from_millis(800);
        let t0 = Instant::now();
        let (tx, mut body) = fed(limit).await;
        for at in [250, 730] {
            let tx = tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(t0 + Duration::from_millis(at)).await;
                tx.send(Bytes::from_static(b"x")).await.unwrap();
            });
        }
        for _ in 0..2 {
            let f = body.frame().await.unwrap().unwrap();
            assert_eq!(f.into_data().unwrap(), "x");
        }
        let e = body.frame().await.unwrap().expect_err("cut");
        assert!(e.to_string().contains("sent nothing"), "{e}");
        let at = t0.elapsed();
        assert!(at >= Duration::from_millis(1530), "{at:?}");
        assert!(at <= Duration::from_millis(1630), "{at:?}");
        drop(tx);
    }

    #[tokio::test]
    async fn a_body_polled_by_another_task_still_gets_cut() {
        // First polled with a waker that wakes nothing: the armed timer
        // holds that one, so a poll from the real task must register again.
        let (tx, mut body) = fed(Duration::from_millis(100)).await;
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

    #[tokio::test]
    async fn outputs_larger_than_a_frame_go_out_in_slices_of_it() {
        // A 200 KB output waiting (as `after` holds the exchange's first),
        // then the upstream's pieces: frames of at most MAX_FRAME bytes,
        // slices of the output (no copy), in order, nothing lost.
        let big = Bytes::from((0..200_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>());
        let (tx, rx) = mpsc::channel(4);
        let body =
            Exchanged::new(Fed(rx).boxed(), exchange().await, true, None, None).after(big.clone());
        tx.send(Bytes::from_static(b"tail")).await.unwrap();
        drop(tx);
        let mut body = std::pin::pin!(body);
        let mut frames = Vec::new();
        while let Some(f) = body.frame().await {
            frames.push(f.unwrap().into_data().unwrap());
        }
        let sizes: Vec<usize> = frames.iter().map(Bytes::len).collect();
        assert_eq!(
            sizes,
            [MAX_FRAME, MAX_FRAME, MAX_FRAME, 200_000 - 3 * MAX_FRAME, 4]
        );
        assert_eq!(
            frames[1].as_ptr(),
            big[MAX_FRAME..].as_ptr(),
            "a slice, not a copy"
        );
        assert_eq!(frames.concat(), [&big[..], b"tail"].concat());
    }

    #[tokio::test]
    async fn no_limit_no_timer() {
        assert!(IdleTimer::start(Duration::ZERO).is_none());
        let (tx, rx) = mpsc::channel(1);
        let body = Exchanged::new(Fed(rx).boxed(), exchange().await, true, None, None);
        let reader = tokio::spawn(body.collect());
        tokio::time::sleep(Duration::from_millis(50)).await;
        tx.send(Bytes::from_static(b"late")).await.unwrap();
        drop(tx);
        let got = reader.await.unwrap().expect("not cut").to_bytes();
        assert_eq!(&got[..], b"late");
    }
}

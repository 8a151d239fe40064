//! Plain-HTTP/1 upstreams (an `http://` model server reached directly, not
//! through `HTTP_PROXY`): their connections driven inside the request's own
//! task, so one read of the upstream becomes one write to the client.
//!
//! Contract:
//! * A connection is hyper's HTTP/1 client connection over a TCP stream
//!   (`TCP_NODELAY`), connected within `upstream.connect_timeout`. No task
//!   is spawned for it: the request's task polls it together with the
//!   request until the response head arrives ([`H1Pool::send`]), then the
//!   response body ([`Driven`]) polls it at each of its own polls.
//! * One write per read: a poll of the body hands over the next chunk the
//!   connection has decoded (reading the socket only when none is left),
//!   and the gateway's server polls its body again after every frame until
//!   it is `Pending`, copying each chunk into its one write buffer
//!   (`writev(false)` in `server.rs`: the chunk, a slice of this
//!   connection's read buffer, is dropped at once, so the next read reuses
//!   that buffer in place instead of allocating one), so what one read of
//!   the upstream brought goes to the client in one write. It never waits
//!   for more data: a poll is `Pending` only when nothing decoded is left
//!   and the upstream socket would block.
//! * Polled without waking itself: the connection and hyper's body channel
//!   are polled with a waker of the body's own ([`Relay`]). hyper's channel
//!   wakes its other end as a chunk is put in or taken out, both inside the
//!   same poll here: such wakes are noted and make the poll look again (at
//!   most [`ROUNDS`] times in a row without data, then the task is woken);
//!   only a wake from outside a poll (the upstream socket became readable)
//!   wakes the request's task. A poll with nothing woken since a look found
//!   the connection waiting returns `Pending` without touching it (the
//!   server polls its body again after every frame, and other parts of the
//!   request's task wake it too).
//! * The pool ([`H1Pool`]): a connection whose response body ended and that
//!   can take another request is kept idle, at most
//!   `upstream.pool_max_idle_per_host` per host (`host:port`), for
//!   `upstream.pool_idle_timeout`. Checkout takes the most recently parked
//!   one, polling it once first: one the peer closed (or that failed) and
//!   one parked longer than the idle timeout are closed instead. One pool per
//!   [`super::Upstream`] value (one per worker thread when the server runs
//!   one runtime per core); a connection serves one request at a time and
//!   moves with it.
//! * Parked connections are watched: one task per pool ([`watch`], spawned
//!   on the runtime of the first connection parked, ending with the pool)
//!   is the waker every parked connection is polled with. A connection the
//!   peer closes while parked wakes it and is closed at once, not at the
//!   next checkout, so its socket is not held open; the task also closes
//!   each parked connection as it expires (its timer is the earliest
//!   expiry). Nothing else wakes it: a checkout polls the connection with
//!   the request's own task before using it.
//! * A body dropped before its end closes its connection (the upstream
//!   request is cancelled); so does a body that failed. A body dropped
//!   after its end (hyper's server stops polling a body whose length is
//!   known once it is complete) still returns its connection to the pool.
//! * Failures ([`Failed`]): no connection ([`Failed::Connect`]: refused,
//!   unreachable, timed out), or the request's own ([`Failed::Request`]),
//!   marked stale when a reused connection was closed or reset by the peer
//!   before any byte of the response (the keep-alive race).
//! * Nothing here can strand a request: the connection that carries it is
//!   polled by the task that waits for its answer, so a connection the peer
//!   closes ends that wait with an error at once (the hand-off bound of
//!   hyper-util's pool, [`super::conn::Handed`], does not apply here).

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::Authority;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::UpstreamFailure;
use super::conn::PoolSettings;
use crate::body::{AnyBody, BoxError};

/// One connection: hyper's request sender and the connection future that
/// does its I/O (polled by whoever holds it).
struct Conn {
    send: http1::SendRequest<AnyBody>,
    conn: http1::Connection<TokioIo<TcpStream>, AnyBody>,
}

impl Conn {
    /// Polls the connection once: whether it is still open and can take a
    /// request.
    fn reusable(&mut self, cx: &mut Context<'_>) -> bool {
        Pin::new(&mut self.conn).poll(cx).is_pending() && self.send.is_ready()
    }
}

/// An idle connection and since when.
struct Parked {
    conn: Conn,
    since: Instant,
}

/// Why [`H1Pool::send`] got no response head.
#[derive(Debug)]
pub(crate) enum Failed {
    /// No connection was made (refused, unreachable, timed out): nothing
    /// was sent.
    Connect(UpstreamFailure),
    /// The request failed on its connection before the response head.
    Request {
        failure: UpstreamFailure,
        /// On a reused (parked) connection, the peer closed or reset it
        /// before any byte of the response ([`super::conn::closed_by_peer`]):
        /// the keep-alive race; the request is safe to send again.
        stale: bool,
    },
}

/// The parked connections and the task that watches them.
#[derive(Default)]
struct Idle {
    hosts: HashMap<Authority, Vec<Parked>>,
    /// The [`watch`] task's waker, once it has run: parked connections are
    /// polled with it.
    watcher: Option<Waker>,
}

struct Shared {
    idle: Mutex<Idle>,
    /// A [`watch`] task runs (or is spawned) for this pool.
    watched: AtomicBool,
    settings: PoolSettings,
    connect_timeout: Duration,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watcher's turn: closes the parked connections the peer closed
    /// (or that failed) and those parked longer than the idle timeout,
    /// polls the others with `cx` (the watcher's waker from now on), and
    /// returns when the next one expires.
    fn sweep(&self, cx: &mut Context<'_>) -> Option<Instant> {
        let limit = self.settings.idle_timeout;
        let mut closed = Vec::new();
        let mut next: Option<Instant> = None;
        {
            let mut idle = self.lock();
            if !idle
                .watcher
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                idle.watcher = Some(cx.waker().clone());
            }
            for list in idle.hosts.values_mut() {
                let mut i = 0;
                while i < list.len() {
                    let p = &mut list[i];
                    if p.since.elapsed() >= limit || !p.conn.reusable(cx) {
                        closed.push(list.remove(i));
                    } else {
                        let at = p.since + limit;
                        next = Some(next.map_or(at, |n| n.min(at)));
                        i += 1;
                    }
                }
            }
            idle.hosts.retain(|_, l| !l.is_empty());
        }
        // Closed outside the lock.
        drop(closed);
        next
    }
}

/// Watches a pool's parked connections (see the module doc) until the pool
/// is gone: woken by a parked connection (its peer closed it, most often)
/// or by the earliest expiry.
async fn watch(pool: Weak<Shared>) {
    /// Whatever ends the task (the pool dropped, or the runtime shut down
    /// under it), the next connection parked spawns a new one.
    struct Ended(Weak<Shared>);
    impl Drop for Ended {
        fn drop(&mut self) {
            if let Some(s) = self.0.upgrade() {
                s.lock().watcher = None;
                s.watched.store(false, Ordering::SeqCst);
            }
        }
    }
    let _ended = Ended(pool.clone());
    let mut timer = pin!(tokio::time::sleep(Duration::ZERO));
    poll_fn(|cx| {
        loop {
            let Some(shared) = pool.upgrade() else {
                return Poll::Ready(());
            };
            let next = shared
                .sweep(cx)
                .unwrap_or_else(|| Instant::now() + shared.settings.idle_timeout);
            drop(shared);
            timer.as_mut().reset(next.into());
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    })
    .await;
}

/// The pool of plain-HTTP/1 connections (see the module doc).
#[derive(Clone)]
pub(crate) struct H1Pool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for H1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Pool")
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl H1Pool {
    pub(crate) fn new(settings: PoolSettings, connect_timeout: Duration) -> H1Pool {
        H1Pool {
            shared: Arc::new(Shared {
                idle: Mutex::new(Idle::default()),
                watched: AtomicBool::new(false),
                settings,
                connect_timeout,
            }),
        }
    }

    /// The most recently parked usable connection to `host`, if any.
    fn checkout(&self, host: &Authority, cx: &mut Context<'_>) -> Option<Conn> {
        let limit = self.shared.settings.idle_timeout;
        let mut closed = Vec::new();
        let mut found = None;
        {
            let mut idle = self.shared.lock();
            let list = idle.hosts.get_mut(host)?;
            while let Some(mut p) = list.pop() {
                if p.since.elapsed() < limit && p.conn.reusable(cx) {
                    found = Some(p.conn);
                    break;
                }
                closed.push(p);
            }
        }
        // Closed outside the lock.
        drop(closed);
        found
    }

    /// Parks `conn` (its response has ended), if it can take another
    /// request and its host has room; closes it otherwise.
    fn checkin(&self, host: Authority, mut conn: Conn) {
        let s = &self.shared.settings;
        if s.max_idle_per_host == 0 {
            return;
        }
        if !self.shared.watched.swap(true, Ordering::SeqCst) {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn(watch(Arc::downgrade(&self.shared)))),
                // (No runtime: nothing watches; checkout still checks.)
                Err(_) => self.shared.watched.store(false, Ordering::SeqCst),
            }
        }
        let mut refused = None;
        {
            let mut idle = self.shared.lock();
            // Polled with the watcher's waker (before the watcher first
            // ran, with none: its first sweep polls every parked one).
            let waker = idle
                .watcher
                .clone()
                .unwrap_or_else(|| Waker::noop().clone());
            let list = idle.hosts.entry(host).or_default();
            if list.len() < s.max_idle_per_host && conn.reusable(&mut Context::from_waker(&waker)) {
                list.push(Parked {
                    conn,
                    since: Instant::now(),
                });
            } else {
                refused = Some(conn);
            }
        }
        // Closed outside the lock.
        drop(refused);
    }

    /// A new connection to `host`.
    async fn connect(&self, host: &Authority) -> Result<Conn, Failed> {
        let name = host.host().trim_start_matches('[').trim_end_matches(']');
        let port = host.port_u16().unwrap_or(80);
        let limit = self.shared.connect_timeout;
        let tcp = match tokio::time::timeout(limit, TcpStream::connect((name, port))).await {
            Err(_) => {
                return Err(Failed::Connect(UpstreamFailure::Timeout(format!(
                    "connect to {host}: timed out after {limit:?}"
                ))));
            }
            Ok(Err(e)) => {
                let msg = format!("connect to {host}: {e}");
                return Err(Failed::Connect(
                    if e.kind() == std::io::ErrorKind::TimedOut {
                        UpstreamFailure::Timeout(msg)
                    } else {
                        UpstreamFailure::Unreachable(msg)
                    },
                ));
            }
            Ok(Ok(s)) => s,
        };
        // As hyper-util's connector (`set_nodelay(true)`); a failure here
        // costs latency, not correctness.
        let _ = tcp.set_nodelay(true);
        let (send, conn) = http1::Builder::new()
            .max_buf_size(crate::server::HTTP1_BUF)
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| Failed::Request {
                failure: super::classify(&e),
                stale: false,
            })?;
        Ok(Conn { send, conn })
    }

    /// Sends `req` (origin-form URI, with its `host` header) to `host` on a
    /// parked connection (unless `fresh`) or a new one, and waits for the
    /// response head, driving the connection in this task.
    pub(crate) async fn send(
        &self,
        host: &Authority,
        req: Request<AnyBody>,
        fresh: bool,
    ) -> Result<Response<Driven>, Failed> {
        let parked = if fresh {
            None
        } else {
            poll_fn(|cx| Poll::Ready(self.checkout(host, cx))).await
        };
        let reused = parked.is_some();
        let mut c = match parked {
            Some(c) => c,
            None => self.connect(host).await?,
        };
        let mut answer = pin!(c.send.send_request(req));
        let mut closed = false;
        let head = poll_fn(|cx| {
            if !closed && Pin::new(&mut c.conn).poll(cx).is_ready() {
                // Closed or failed: the answer's future has the error.
                closed = true;
            }
            match answer.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(r.map_err(Some)),
                // (hyper answers the request with the connection's error
                // before the connection ends: a guard against waiting
                // forever.)
                Poll::Pending if closed => Poll::Ready(Err(None)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        let resp = head.map_err(|e| match e {
            Some(e) => Failed::Request {
                failure: super::classify(&e),
                stale: reused && super::conn::closed_by_peer(&e),
            },
            None => Failed::Request {
                failure: UpstreamFailure::Unreachable(
                    "the upstream connection closed before the response".into(),
                ),
                stale: reused,
            },
        })?;
        let host = host.clone();
        let pool = self.clone();
        Ok(resp.map(|body| Driven::new(body, (!closed).then_some(c), pool, host)))
    }
}

/// The waker the connection and its body channel are polled with inside
/// [`Driven::poll_frame`]: a wake while that poll runs (hyper's body
/// channel wakes its other end as a chunk is put in or taken out, both in
/// this very poll) is only noted, and the poll looks again; one from
/// outside it (the upstream socket became readable) wakes the request's
/// task. Without it every piece would wake the task from inside its own
/// poll and hyper's server would poll the whole connection again for
/// nothing.
#[derive(Debug, Default)]
struct Relay {
    /// [`POLLING`] and [`NOTED`].
    state: AtomicU8,
    /// The request's task, as of the body's last poll.
    task: Mutex<Option<Waker>>,
}

/// [`Relay::state`]: the body is being polled.
const POLLING: u8 = 1;
/// [`Relay::state`]: woken since the poll began.
const NOTED: u8 = 2;

impl Relay {
    fn task(&self) -> std::sync::MutexGuard<'_, Option<Waker>> {
        self.task.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes from outside a poll go to the task of `cx` from now on.
    fn register(&self, cx: &Context<'_>) {
        let mut t = self.task();
        if !t.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *t = Some(cx.waker().clone());
        }
    }

    /// Whether anything woke the relay since the last [`Relay::end`].
    fn woken(&self) -> bool {
        self.state.load(Ordering::SeqCst) & NOTED != 0
    }

    /// One look begins: wakes are noted from now on.
    fn begin(&self) {
        self.state.store(POLLING, Ordering::SeqCst);
    }

    /// The look ends: whether a wake came while it ran (a later one wakes
    /// the task).
    fn end(&self) -> bool {
        self.state.fetch_and(!POLLING, Ordering::SeqCst) & NOTED != 0
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // One atomic step: a wake either lands inside a look (which sees it
        // at its end) or wakes the task; either way it is noted.
        if self.state.fetch_or(NOTED, Ordering::SeqCst) & POLLING == 0
            && let Some(w) = self.task().as_ref()
        {
            w.wake_by_ref();
        }
    }
}

/// How many times one poll of [`Driven`] looks again after a look that
/// found nothing but was woken from inside before it leaves the rest to
/// its task (hyper's connection yields by waking itself after 16
/// turns of its loop: this bounds that).
const ROUNDS: usize = 4;

/// The response body of a plain-HTTP/1 upstream, which drives its
/// connection (see the module doc).
pub(crate) struct Driven {
    io: Io,
    /// Nothing woke the relay since the last look found the connection
    /// waiting: a poll then has nothing to look at.
    quiet: bool,
    relay: Arc<Relay>,
    /// `relay` as a waker (made once: the wakers hyper and tokio keep are
    /// then this one, not clones).
    waker: Waker,
}

/// What [`Driven`] polls.
struct Io {
    body: Incoming,
    /// Until the body ends or the connection closes.
    conn: Option<Conn>,
    pool: H1Pool,
    host: Authority,
    ended: bool,
}

impl Driven {
    fn new(body: Incoming, conn: Option<Conn>, pool: H1Pool, host: Authority) -> Driven {
        let relay = Arc::new(Relay::default());
        Driven {
            io: Io {
                body,
                conn,
                pool,
                host,
                ended: false,
            },
            quiet: false,
            waker: Waker::from(relay.clone()),
            relay,
        }
    }
}

impl Io {
    /// The body ended: its connection goes back to the pool (which keeps it
    /// if it can take another request).
    fn end(&mut self) {
        self.ended = true;
        if let Some(c) = self.conn.take() {
            self.pool.checkin(self.host.clone(), c);
        }
    }

    /// One look: the connection reads and decodes what has arrived (at most
    /// one chunk fits hyper's body channel), then the channel is read.
    fn look(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(c) = self.conn.as_mut()
            && Pin::new(&mut c.conn).poll(cx).is_ready()
        {
            // Closed or failed: the body's channel has its end or error.
            self.conn = None;
        }
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => Poll::Ready(Some(Ok(f))),
            Poll::Ready(Some(Err(e))) => {
                self.ended = true;
                self.conn = None;
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                self.end();
                Poll::Ready(None)
            }
            Poll::Pending if self.conn.is_none() => {
                // The connection is over and left the body unfinished
                // (hyper ends or fails a body before its connection ends;
                // this is a guard against waiting forever).
                self.ended = true;
                Poll::Ready(Some(Err(
                    "the upstream connection closed before the body's end".into(),
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Body for Driven {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.io.ended {
            return Poll::Ready(None);
        }
        this.relay.register(cx);
        if this.quiet && !this.relay.woken() {
            // (A wake from now on wakes the task, which polls again.)
            return Poll::Pending;
        }
        this.quiet = false;
        let mut inner = Context::from_waker(&this.waker);
        for _ in 0..ROUNDS {
            this.relay.begin();
            let got = this.io.look(&mut inner);
            let noted = this.relay.end();
            // Wakes from inside a look that gave a frame are dropped: the
            // server polls again for the next one.
            match got {
                Poll::Pending if noted => continue,
                Poll::Pending => {
                    this.quiet = true;
                    return Poll::Pending;
                }
                ready => return ready,
            }
        }
        // Still woken from inside: the next look is the task's.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.io.ended || self.io.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.io.body.size_hint()
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        // A parked connection's wakers are this relay: it must not keep
        // the task (its memory) alive.
        *self.relay.task() = None;
    }
}

impl Drop for Io {
    fn drop(&mut self) {
        if self.conn.is_some() && !self.ended && self.body.is_end_stream() {
            self.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    fn pool() -> H1Pool {
        pool_idle(Duration::from_secs(4))
    }

    /// A pool keeping 4 idle connections per host for `idle`.
    fn pool_idle(idle: Duration) -> H1Pool {
        H1Pool::new(
            PoolSettings {
                idle_timeout: idle,
                max_idle_per_host: 4,
            },
            Duration::from_secs(2),
        )
    }

    /// Reads one request head (and no body: the tests send none).
    async fn read_head(s: &mut TcpStream) -> bool {
        let mut buf = Vec::new();
        let mut b = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        }
        true
    }

    /// `n` SSE events of about 200 bytes, numbered.
    fn events(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                format!("data: {{\"id\":{i},\"pad\":\"{}\"}}\n\n", "x".repeat(180)).into_bytes()
            })
            .collect()
    }

    /// A chunked response carrying `events`, one chunk each.
    fn chunked(events: &[Vec<u8>]) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for e in events {
            out.extend_from_slice(format!("{:x}\r\n", e.len()).as_bytes());
            out.extend_from_slice(e);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    /// An upstream that answers each request on each connection with
    /// `answer` written in pieces of `pieces(i)` bytes (all at once when
    /// `None`), keeping the connection unless `close`; counts connections.
    async fn upstream(
        answer: Vec<u8>,
        close: bool,
        pieces: Option<u64>,
    ) -> (SocketAddr, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let conns = Arc::new(AtomicUsize::new(0));
        let n = conns.clone();
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut seed = pieces.unwrap_or(0);
                    while read_head(&mut s).await {
                        if pieces.is_none() {
                            s.write_all(&answer).await.unwrap();
                        } else {
                            let mut at = 0;
                            while at < answer.len() {
                                seed = seed
                                    .wrapping_mul(6364136223846793005)
                                    .wrapping_add(1442695040888963407);
                                let len = (1 + (seed >> 33) % 700) as usize;
                                let end = (at + len).min(answer.len());
                                s.write_all(&answer[at..end]).await.unwrap();
                                s.flush().await.unwrap();
                                if seed >> 60 == 0 {
                                    tokio::time::sleep(Duration::from_millis(1)).await;
                                } else {
                                    tokio::task::yield_now().await;
                                }
                                at = end;
                            }
                        }
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        (addr, conns)
    }

    fn request(addr: SocketAddr) -> (Authority, Request<AnyBody>) {
        let host: Authority = addr.to_string().parse().unwrap();
        let mut r = Request::new(crate::body::full(Bytes::new()));
        *r.uri_mut() = "/v1/chat/completions".parse().unwrap();
        r.headers_mut()
            .insert(http::header::HOST, addr.to_string().parse().unwrap());
        (host, r)
    }

    async fn get(p: &H1Pool, addr: SocketAddr, fresh: bool) -> Result<Vec<u8>, Failed> {
        let (host, r) = request(addr);
        let resp = p.send(&host, r, fresh).await?;
        Ok(resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec())
    }

    #[tokio::test]
    async fn random_pieces_give_the_same_bytes_and_the_connection_is_reused() {
        let ev = events(300);
        let want = ev.concat();
        for seed in 1..6u64 {
            let (addr, conns) = upstream(chunked(&ev), false, Some(seed)).await;
            let p = pool();
            for _ in 0..3 {
                assert_eq!(get(&p, addr, false).await.unwrap(), want, "seed {seed}");
            }
            assert_eq!(conns.load(Ordering::SeqCst), 1, "one pooled connection");
        }
        // A content-length body, in pieces too.
        let mut cl =
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", want.len()).into_bytes();
        cl.extend_from_slice(&want);
        let (addr, conns) = upstream(cl, false, Some(7)).await;
        let p = pool();
        for _ in 0..2 {
            assert_eq!(get(&p, addr, false).await.unwrap(), want);
        }
        assert_eq!(conns.load(Ordering::SeqCst), 1);
        // A fresh request never takes the pooled connection.
        assert_eq!(get(&p, addr, true).await.unwrap(), want);
        assert_eq!(conns.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn random_pieces_on_a_multi_threaded_runtime() {
        // The upstream socket's wakes come from another thread, some while
        // the body is being polled.
        let ev = events(300);
        let want = ev.concat();
        for seed in 11..14u64 {
            let (addr, _) = upstream(chunked(&ev), false, Some(seed)).await;
            let p = pool();
            for _ in 0..2 {
                assert_eq!(get(&p, addr, false).await.unwrap(), want, "seed {seed}");
            }
        }
    }

    /// An upstream that sends `chunked(events)`'s head, then each event's
    /// chunk only when told to (one message each), then the last chunk.
    async fn stepped(events: Vec<Vec<u8>>) -> (SocketAddr, tokio::sync::mpsc::UnboundedSender<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            assert!(read_head(&mut s).await);
            let all = chunked(&events);
            let head_len = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            s.write_all(&all[..head_len]).await.unwrap();
            for e in &events {
                rx.recv().await.unwrap();
                s.write_all(format!("{:x}\r\n", e.len()).as_bytes())
                    .await
                    .unwrap();
                s.write_all(e).await.unwrap();
                s.write_all(b"\r\n").await.unwrap();
            }
            rx.recv().await.unwrap();
            s.write_all(b"0\r\n\r\n").await.unwrap();
            read_head(&mut s).await;
        });
        (addr, tx)
    }

    #[tokio::test]
    async fn a_chunk_is_handed_over_without_waiting_for_more() {
        // The upstream sends the next chunk only after the body gave the
        // one before: a body that waited for more data would hang here.
        let ev = events(20);
        let (addr, go) = stepped(ev.clone()).await;
        let p = pool();
        let (host, r) = request(addr);
        let mut body = p.send(&host, r, false).await.unwrap().into_body();
        for e in &ev {
            go.send(()).unwrap();
            let mut got = Vec::new();
            while got.len() < e.len() {
                let f = tokio::time::timeout(Duration::from_secs(10), body.frame())
                    .await
                    .expect("a chunk that arrived is handed over")
                    .unwrap()
                    .unwrap();
                got.extend_from_slice(&f.into_data().unwrap());
            }
            assert_eq!(&got, e, "one event's bytes, none of the next");
        }
        go.send(()).unwrap();
        let end = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("the end is handed over");
        assert!(end.is_none());
        assert!(body.is_end_stream());
    }

    #[tokio::test]
    async fn trailers_and_errors_come_after_the_data_before_them() {
        // Data and then trailers in one write: the data, then the trailers.
        let ev = events(5);
        let mut answer = chunked(&ev);
        answer.truncate(answer.len() - 2);
        answer.extend_from_slice(b"x-done: yes\r\n\r\n");
        let (addr, _) = upstream(answer, false, None).await;
        let p = pool();
        let (host, r) = request(addr);
        let body = p.send(&host, r, false).await.unwrap().into_body();
        let got = body.collect().await.unwrap();
        let trailers = got.trailers().cloned();
        assert_eq!(&got.to_bytes()[..], &ev.concat()[..]);
        assert_eq!(trailers.unwrap()["x-done"], "yes");
        // Data and then a broken chunk in one write: the data, then the
        // error.
        let mut answer = chunked(&ev);
        answer.truncate(answer.len() - 5);
        answer.extend_from_slice(b"zz\r\n");
        let (addr, _) = upstream(answer, true, None).await;
        let (host, r) = request(addr);
        let mut body = p.send(&host, r, false).await.unwrap().into_body();
        let mut data = Vec::new();
        let err = loop {
            match body.frame().await {
                Some(Ok(f)) => data.extend_from_slice(&f.into_data().unwrap()),
                Some(Err(e)) => break e,
                None => panic!("no error"),
            }
        };
        assert_eq!(data, ev.concat(), "every byte before the error: {err}");
        assert!(body.frame().await.is_none(), "nothing after the error");
    }

    #[tokio::test]
    async fn a_connection_closed_while_idle_is_not_used() {
        let ev = events(3);
        let (addr, conns) = upstream(chunked(&ev), true, None).await;
        let p = pool();
        for i in 1..=3 {
            assert_eq!(get(&p, addr, false).await.unwrap(), ev.concat());
            // The upstream's close reaches this side.
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(conns.load(Ordering::SeqCst), i);
        }
    }

    #[tokio::test]
    async fn an_expired_idle_connection_is_not_used() {
        let ev = events(3);
        let (addr, conns) = upstream(chunked(&ev), false, None).await;
        let p = pool_idle(Duration::from_millis(50));
        get(&p, addr, false).await.unwrap();
        get(&p, addr, false).await.unwrap();
        assert_eq!(conns.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(80)).await;
        get(&p, addr, false).await.unwrap();
        assert_eq!(conns.load(Ordering::SeqCst), 2);
    }

    /// Whether `p` holds a parked connection, waiting up to 5 s for it to
    /// be (`want`) or not be parked (no checkout meanwhile).
    async fn parked(p: &H1Pool, want: bool) -> bool {
        for _ in 0..500 {
            if p.shared.lock().hosts.is_empty() != want {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// An upstream that answers one request, then keeps its connection
    /// until `close` is sent (or forever), and tells through `gone` when it
    /// read the connection's end from this side.
    async fn lingering() -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::sync::oneshot::Receiver<()>,
    ) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (close_tx, close_rx) = tokio::sync::oneshot::channel::<()>();
        let (gone_tx, gone_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            assert!(read_head(&mut s).await);
            s.write_all(&chunked(&events(2))).await.unwrap();
            let mut b = [0u8; 16];
            tokio::select! {
                _ = close_rx => drop(s),
                n = s.read(&mut b) => {
                    if matches!(n, Ok(0) | Err(_)) {
                        let _ = gone_tx.send(());
                    }
                }
            }
        });
        (addr, close_tx, gone_rx)
    }

    #[tokio::test]
    async fn a_parked_connection_the_peer_closes_is_closed_without_a_checkout() {
        // The upstream closes the connection while it is parked: the pool
        // lets it go at once (its socket closed), with no request to
        // notice.
        let (addr, close, _gone) = lingering().await;
        let p = pool();
        get(&p, addr, false).await.unwrap();
        assert!(parked(&p, true).await, "parked after its response");
        close.send(()).unwrap();
        assert!(parked(&p, false).await, "closed while parked");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_parked_connection_is_closed_when_it_expires() {
        // Nothing checks the pool out again: the connection is closed as it
        // expires, and the upstream reads its end.
        let (addr, _close, gone) = lingering().await;
        let p = pool_idle(Duration::from_millis(100));
        get(&p, addr, false).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), gone)
            .await
            .expect("the expired connection was closed")
            .unwrap();
        assert!(p.shared.lock().hosts.is_empty());
    }

    #[tokio::test]
    async fn the_watcher_ends_with_its_pool() {
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let (addr, _close, gone) = lingering().await;
        // (The upstream's task among them, until it reads the close.)
        let before = tasks();
        let p = pool_idle(Duration::from_secs(1));
        get(&p, addr, false).await.unwrap();
        assert!(p.shared.watched.load(Ordering::SeqCst));
        assert_eq!(tasks(), before + 1, "one watcher");
        drop(p);
        tokio::time::timeout(Duration::from_secs(5), gone)
            .await
            .expect("the parked connection closed with its pool")
            .unwrap();
        for _ in 0..500 {
            if tasks() == before - 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "the watcher outlived its pool: {} tasks, {before} before",
            tasks()
        );
    }

    #[tokio::test]
    async fn a_reused_connection_the_peer_drops_is_stale() {
        // Answers the first request, then closes on the second without a
        // byte: the keep-alive race, forced.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let ev = events(2);
        let answer = chunked(&ev);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    if read_head(&mut s).await {
                        s.write_all(&answer).await.unwrap();
                    }
                    read_head(&mut s).await;
                });
            }
        });
        let p = pool();
        get(&p, addr, false).await.unwrap();
        match get(&p, addr, false).await {
            Err(Failed::Request { stale: true, .. }) => {}
            other => panic!("not a stale failure: {:?}", other.map(|b| b.len())),
        }
        // The same on a fresh connection is not stale.
        get(&p, addr, true).await.unwrap();
        match get(&p, addr, true).await {
            Ok(_) => {}
            other => panic!("a fresh connection answers: {:?}", other.map(|b| b.len())),
        }
    }

    #[tokio::test]
    async fn dropping_the_body_closes_the_upstream_connection() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            assert!(read_head(&mut s).await);
            let ev = events(1);
            let mut head = chunked(&ev);
            head.truncate(head.len() - 5); // no last chunk: a stream still going
            s.write_all(&head).await.unwrap();
            let mut b = [0u8; 16];
            let n = s.read(&mut b).await.unwrap_or(0);
            let _ = closed_tx.send(n);
        });
        let p = pool();
        let (host, r) = request(addr);
        let mut body = p.send(&host, r, false).await.unwrap().into_body();
        let f = body.frame().await.unwrap().unwrap();
        assert!(f.is_data());
        drop(body);
        let n = tokio::time::timeout(Duration::from_secs(5), closed_rx)
            .await
            .expect("the upstream saw the close")
            .unwrap();
        assert_eq!(n, 0, "closed, nothing more sent");
        assert!(p.shared.lock().hosts.is_empty(), "not pooled");
    }

    #[tokio::test]
    async fn refused_is_a_connect_failure() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        assert!(matches!(
            get(&pool(), addr, false).await,
            Err(Failed::Connect(UpstreamFailure::Unreachable(_)))
        ));
    }

    /// A socket that counts its writes.
    struct CountingIo {
        io: TokioIo<TcpStream>,
        writes: Arc<AtomicUsize>,
    }

    impl hyper::rt::Read for CountingIo {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: hyper::rt::ReadBufCursor<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
        }
    }

    impl hyper::rt::Write for CountingIo {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let this = self.get_mut();
            this.writes.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut this.io).poll_write(cx, buf)
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let this = self.get_mut();
            this.writes.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
        }

        fn is_write_vectored(&self) -> bool {
            self.io.is_write_vectored()
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
        }
    }

    #[tokio::test]
    async fn events_delivered_at_once_go_out_in_few_writes() {
        // The upstream writes 2,000 events at once; hyper's server passes
        // the driven body to a client socket that counts its writes.
        let n = 2000;
        let ev = events(n);
        let (up, _) = upstream(chunked(&ev), false, None).await;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front = l.local_addr().unwrap();
        let writes = Arc::new(AtomicUsize::new(0));
        let w = writes.clone();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let p = pool();
            let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                let p = p.clone();
                async move {
                    let (host, r) = request(up);
                    let resp = p
                        .send(&host, r, false)
                        .await
                        .map_err(|e| format!("{e:?}"))?;
                    Ok::<_, String>(resp)
                }
            });
            let io = CountingIo {
                io: TokioIo::new(s),
                writes: w,
            };
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(io, svc)
                .await;
        });
        let mut c = TcpStream::connect(front).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        let body_at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let mut body = Vec::new();
        let mut rest = &got[body_at..];
        loop {
            let line = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let len =
                usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16).unwrap();
            if len == 0 {
                break;
            }
            body.extend_from_slice(&rest[line + 2..line + 2 + len]);
            rest = &rest[line + 2 + len + 2..];
        }
        assert_eq!(body, ev.concat(), "byte-identical");
        let writes = writes.load(Ordering::SeqCst);
        eprintln!("{n} events in {writes} writes");
        assert!(writes * 4 <= n, "{writes} writes for {n} events");
    }
}

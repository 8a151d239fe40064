//! Plain-HTTP/1 upstreams (an `http://` model server reached directly, not
//! through `HTTP_PROXY`): connections of our own, read and written by the
//! request's own task, so one read of the upstream becomes one write to the
//! client. The HTTP/1.1 itself (request head and framing, response head,
//! body framing) is `citestream-h1`'s, without I/O; this module is its I/O.
//!
//! Contract:
//! * A connection is a TCP stream (`TCP_NODELAY`) and its read buffer,
//!   connected within `upstream.connect_timeout`. No task is spawned for
//!   it: [`H1Pool::send`] writes the request and reads the response head
//!   in the request's task, and the response body ([`Driven`]) reads the
//!   socket at its own polls, registering the waker of whoever polls it.
//! * The request: its head and, when it is whole, its body go out in one
//!   write; a streamed body follows as it comes, framed by its
//!   `content-length` or chunked (`citestream_h1::request`). A response
//!   that comes before the request is all written ends the writing (the
//!   upstream answered early, an error most often), and its connection is
//!   not kept. `1xx` answers are skipped; `101` is an error (no upgrade is
//!   asked for).
//! * One piece per read: a poll of the body hands over all the body data
//!   the read buffer holds as one zero-copy slice of it (of a chunked body,
//!   every chunk's data moved together over the framing between them),
//!   reading the socket only when nothing is left to hand over; so what one
//!   read of the upstream brought is one frame for the gateway's server
//!   (one chunk header, one copy into its write buffer, `writev(false)` in
//!   `server.rs`: the slice is dropped at once, so the next read reuses the
//!   read buffer in place) and one piece for the rewriter, and goes to the
//!   client in one write. It never waits for more data: a poll is
//!   `Pending` only when the buffer holds nothing to hand over and the
//!   upstream socket would block.
//! * Bounded: the read buffer grows by [`READ_SIZE`] at a time, to at most
//!   a response head (or trailer section) of [`crate::server::HTTP1_BUF`]
//!   bytes plus one read; a larger head is a 502.
//! * The pool ([`H1Pool`]): a connection whose response ended, that the
//!   response allows to be kept (`citestream_h1::response`: HTTP/1.1
//!   without `connection: close`, a body not delimited by the close) and
//!   with nothing left unread is kept idle, at most
//!   `upstream.pool_max_idle_per_host` per host (`host:port`), for
//!   `upstream.pool_idle_timeout`. Checkout takes the most recently parked
//!   one, looking at its socket once first: one the peer closed (or that
//!   sent anything unasked) and one parked longer than the idle timeout are
//!   closed instead. One pool per [`super::Upstream`] value (one per worker
//!   thread when the server runs one runtime per core); a connection serves
//!   one request at a time and moves with it.
//! * Parked connections are watched: one task per pool ([`watch`], spawned
//!   on the runtime of the first connection parked, ending with the pool)
//!   is the waker every parked socket is registered with. A connection the
//!   peer closes while parked wakes it and is closed at once, not at the
//!   next checkout, so its socket is not held open; the task also closes
//!   each parked connection as it expires (its timer is the earliest
//!   expiry). Nothing else wakes it: a checkout looks at the socket with
//!   the request's own task before using it.
//! * A body dropped before its end closes its connection (the upstream
//!   request is cancelled); so does a body that failed. A body dropped
//!   after its end (hyper's server stops polling a body whose length is
//!   known once it is complete) still returns its connection to the pool:
//!   the last data of a `content-length` body returns it as it is handed
//!   over.
//! * Failures ([`Failed`]): no connection ([`Failed::Connect`]: refused,
//!   unreachable, timed out), or the request's own ([`Failed::Request`]:
//!   the socket failed or closed, or the answer is not HTTP/1), marked
//!   stale when a reused connection was closed or reset by the peer before
//!   any byte of the response (the keep-alive race).
//! * Nothing here can strand a request: the connection that carries it is
//!   read by the task that waits for its answer, so a connection the peer
//!   closes ends that wait with an error at once (the hand-off bound of
//!   hyper-util's pool, [`super::conn::Handed`], does not apply here).

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use citestream_h1::body::{BodyDecoder, Decoded};
use citestream_h1::request::{self, RequestFraming};
use citestream_h1::response::{self, ResponseHead};
use http::uri::Authority;
use http::{Method, Request, Response};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use super::UpstreamFailure;
use super::conn::PoolSettings;
use crate::body::{AnyBody, BoxError};
use crate::server::HTTP1_BUF;

/// What the read buffer grows by when it has less than [`READ_MIN`] free
/// (it is reused in place once the slices handed over are dropped).
pub(crate) const READ_SIZE: usize = 16 * 1024;

/// The least free room a read is made with.
const READ_MIN: usize = 2 * 1024;

/// One connection: its socket and what has been read from it and not yet
/// handed over.
struct Conn {
    io: TcpStream,
    buf: BytesMut,
}

impl Conn {
    /// Looks at the socket once (registering `cx`'s waker for its next
    /// readiness): whether it is still open with nothing unasked to read,
    /// so it can take a request.
    fn reusable(&mut self, cx: &mut Context<'_>) -> bool {
        let mut one = [0u8; 1];
        self.buf.is_empty()
            && self
                .io
                .poll_peek(cx, &mut ReadBuf::new(&mut one))
                .is_pending()
    }

    /// Reads what the socket has into the buffer: how many bytes (0: the
    /// peer closed it). `Pending` registers `cx`'s waker.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_MIN {
            self.buf.reserve(READ_SIZE);
        }
        let room = self.buf.capacity() - self.buf.len();
        loop {
            ready!(self.io.poll_read_ready(cx))?;
            let mut got = 0;
            // A read shorter than the room drained the socket: its
            // readiness is cleared with it (as tokio's own `poll_read`
            // does), so the next poll waits for the next arrival instead
            // of reading again only to be told it would block. (A
            // readiness that came after this look is kept, and the close
            // is never cleared.)
            let read = self.io.try_io(Interest::READABLE, || {
                got = self.io.try_read_buf(&mut self.buf)?;
                if got > 0 && got < room {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(got)
                }
            });
            match read {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => {
                    return Poll::Ready(Ok(got));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
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
        /// before any byte of the response: the keep-alive race; the
        /// request is safe to send again.
        stale: bool,
    },
}

impl Failed {
    fn request(msg: String) -> Failed {
        Failed::Request {
            failure: UpstreamFailure::Unreachable(msg),
            stale: false,
        }
    }
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
                return Err(Failed::Connect(if e.kind() == io::ErrorKind::TimedOut {
                    UpstreamFailure::Timeout(msg)
                } else {
                    UpstreamFailure::Unreachable(msg)
                }));
            }
            Ok(Ok(s)) => s,
        };
        // A failure here costs latency, not correctness.
        let _ = tcp.set_nodelay(true);
        Ok(Conn {
            io: tcp,
            buf: BytesMut::new(),
        })
    }

    /// Sends `req` (origin-form URI, with its `host` header) to `host` on a
    /// parked connection (unless `fresh`) or a new one, and waits for the
    /// response head, reading and writing the connection in this task.
    pub(crate) async fn send(
        &self,
        host: &Authority,
        req: Request<AnyBody>,
        fresh: bool,
    ) -> Result<Response<Driven>, Failed> {
        let (parts, body) = req.into_parts();
        let framing =
            RequestFraming::choose(&parts.method, &parts.headers, body.size_hint().exact())
                .map_err(|e| Failed::request(format!("request: {e}")))?;
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
        let mut out = Vec::with_capacity(1024);
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        request::write_head(&parts.method, target, &parts.headers, framing, &mut out);
        let mut sending = Sending {
            out,
            at: 0,
            body: Some(body),
            framing,
            sent: 0,
        };
        let to_head = parts.method == Method::HEAD;
        let mut written = false;
        let mut write_error = None;
        let mut answered = false;
        let head = poll_fn(|cx| {
            if !written && write_error.is_none() {
                match sending.poll(&mut c.io, cx) {
                    Poll::Ready(Ok(())) => written = true,
                    Poll::Ready(Err(e)) => write_error = Some(e),
                    Poll::Pending => {}
                }
            }
            loop {
                match response::parse(&c.buf, to_head, HTTP1_BUF) {
                    Ok(Some((h, len))) if h.informational() => {
                        if h.status == http::StatusCode::SWITCHING_PROTOCOLS {
                            return Poll::Ready(Err(Failed::request(
                                "the upstream switched protocols unasked".into(),
                            )));
                        }
                        c.buf.advance(len);
                        continue;
                    }
                    Ok(Some((h, len))) => {
                        c.buf.advance(len);
                        return Poll::Ready(Ok(h));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Poll::Ready(Err(Failed::request(format!(
                            "the upstream's answer: {e}"
                        ))));
                    }
                }
                let stale = reused && !answered;
                match c.poll_fill(cx) {
                    Poll::Pending => break,
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(Failed::Request {
                            failure: UpstreamFailure::Unreachable(
                                "the upstream connection closed before the response".into(),
                            ),
                            stale,
                        }));
                    }
                    Poll::Ready(Ok(_)) => answered = true,
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Err(Failed::Request {
                            failure: super::classify(&e),
                            stale: stale && closed_by_peer(&e),
                        }));
                    }
                }
            }
            // Nothing (more) to read; a request that cannot be written,
            // with no answer to it so far, has failed.
            match write_error.take() {
                Some(Sent::Io(e)) => Poll::Ready(Err(Failed::Request {
                    failure: super::classify(&e),
                    stale: reused && !answered && closed_by_peer(&e),
                })),
                Some(Sent::Body(e)) => Poll::Ready(Err(Failed::request(format!(
                    "the request body failed: {e}"
                )))),
                Some(Sent::Framing(what)) => Poll::Ready(Err(Failed::request(what.into()))),
                None => Poll::Pending,
            }
        })
        .await?;
        // An answer before the whole request: the connection is not kept.
        let keep_alive = head.keep_alive && written;
        Ok(Driven::response(
            head,
            c,
            keep_alive,
            self.clone(),
            host.clone(),
        ))
    }
}

/// Whether an I/O error on a reused connection means the peer had closed
/// it (the keep-alive race), not that something else failed.
fn closed_by_peer(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

/// Why a request could not be written.
#[derive(Debug)]
enum Sent {
    Io(io::Error),
    /// The client's streamed body failed.
    Body(BoxError),
    /// The body did not match its `content-length`.
    Framing(&'static str),
}

/// A request being written: the bytes framed so far (`out[at..]` not
/// written yet) and the rest of its body.
struct Sending {
    out: Vec<u8>,
    at: usize,
    /// Until its end has been framed.
    body: Option<AnyBody>,
    framing: RequestFraming,
    /// Body bytes framed so far.
    sent: u64,
}

impl Sending {
    /// Frames what the body has (while less than [`READ_SIZE`] is waiting
    /// to be written) and writes it; `Ready(Ok)` when all of it is written.
    fn poll(&mut self, io: &mut TcpStream, cx: &mut Context<'_>) -> Poll<Result<(), Sent>> {
        loop {
            while self.out.len() - self.at < READ_SIZE {
                let Some(body) = self.body.as_mut() else {
                    break;
                };
                match Pin::new(body).poll_frame(cx) {
                    Poll::Pending => break,
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(Sent::Body(e))),
                    // (Request trailers are not sent.)
                    Poll::Ready(Some(Ok(f))) => {
                        if let Ok(d) = f.into_data() {
                            self.frame(&d)?;
                        }
                    }
                    Poll::Ready(None) => {
                        self.body = None;
                        match self.framing {
                            RequestFraming::Chunked => {
                                self.out.extend_from_slice(request::LAST_CHUNK)
                            }
                            RequestFraming::Length { len, .. } if len != self.sent => {
                                return Poll::Ready(Err(Sent::Framing(
                                    "the request body is shorter than its content-length",
                                )));
                            }
                            RequestFraming::Length { .. } => {}
                        }
                    }
                }
            }
            if self.at == self.out.len() {
                self.out.clear();
                self.at = 0;
                return if self.body.is_none() {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                };
            }
            match ready!(Pin::new(&mut *io).poll_write(cx, &self.out[self.at..])) {
                Ok(0) => return Poll::Ready(Err(Sent::Io(io::ErrorKind::WriteZero.into()))),
                Ok(n) => self.at += n,
                Err(e) => return Poll::Ready(Err(Sent::Io(e))),
            }
        }
    }

    /// Frames one piece of the body.
    fn frame(&mut self, d: &[u8]) -> Result<(), Sent> {
        if d.is_empty() {
            return Ok(());
        }
        self.sent += d.len() as u64;
        match self.framing {
            RequestFraming::Length { len, .. } if self.sent > len => Err(Sent::Framing(
                "the request body is longer than its content-length",
            )),
            RequestFraming::Length { .. } => {
                self.out.extend_from_slice(d);
                Ok(())
            }
            RequestFraming::Chunked => {
                request::chunk_head(d.len(), &mut self.out);
                self.out.extend_from_slice(d);
                self.out.extend_from_slice(request::CHUNK_END);
                Ok(())
            }
        }
    }
}

/// The response body of a plain-HTTP/1 upstream, which reads its
/// connection (see the module doc).
pub(crate) struct Driven {
    /// Until the body ends or fails.
    conn: Option<Conn>,
    decoder: BodyDecoder,
    /// The response allows the connection to be kept after its body.
    keep_alive: bool,
    pool: H1Pool,
    host: Authority,
    ended: bool,
}

impl Driven {
    /// The response of `head`, whose body is read from `conn`.
    fn response(
        head: ResponseHead,
        conn: Conn,
        keep_alive: bool,
        pool: H1Pool,
        host: Authority,
    ) -> Response<Driven> {
        let body = Driven {
            conn: Some(conn),
            decoder: BodyDecoder::new(head.framing, HTTP1_BUF),
            keep_alive,
            pool,
            host,
            ended: false,
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = head.status;
        *resp.version_mut() = head.version;
        *resp.headers_mut() = head.headers;
        // A reason phrase of its own is kept (hyper's server writes it).
        if head.status.canonical_reason().map(str::as_bytes) != Some(&head.reason[..])
            && let Ok(r) = hyper::ext::ReasonPhrase::try_from(head.reason)
        {
            resp.extensions_mut().insert(r);
        }
        resp
    }

    /// The body ended: its connection goes back to the pool if the
    /// response allows it and nothing unasked was read after the body.
    fn end(&mut self) {
        self.ended = true;
        if let Some(c) = self.conn.take()
            && self.keep_alive
            && c.buf.is_empty()
        {
            self.pool.checkin(self.host.clone(), c);
        }
    }

    /// The body failed: its connection is closed.
    fn fail(&mut self, e: BoxError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.ended = true;
        self.conn = None;
        Poll::Ready(Some(Err(e)))
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
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            let Some(c) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.decoder.decode(&mut c.buf) {
                Ok(Decoded::Data(d)) => {
                    if this.decoder.is_done() {
                        this.end();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Ok(Decoded::Trailers(t)) => {
                    this.end();
                    return Poll::Ready(Some(Ok(Frame::trailers(t))));
                }
                Ok(Decoded::End) => {
                    this.end();
                    return Poll::Ready(None);
                }
                Ok(Decoded::More) => {}
                Err(e) => return this.fail(format!("the upstream's body: {e}").into()),
            }
            match ready!(c.poll_fill(cx)) {
                Ok(0) => match this.decoder.closed() {
                    Ok(()) => {
                        this.ended = true;
                        this.conn = None;
                        return Poll::Ready(None);
                    }
                    Err(e) => return this.fail(e.to_string().into()),
                },
                Ok(_) => {}
                Err(e) => return this.fail(format!("the upstream connection: {e}").into()),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.decoder.remaining() == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder.remaining() {
            _ if self.ended => SizeHint::with_exact(0),
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        // Dropped at its end without the end polled (an empty body, or
        // hyper's server done with a body whose length it knew): the
        // connection is still good.
        if self.conn.is_some() && !self.ended && self.decoder.remaining() == Some(0) {
            self.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use hyper::body::Incoming;
    use hyper_util::rt::TokioIo;
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

    /// Reads one request (head, then its body by its framing) and returns
    /// its bytes as sent; `None` when the connection ended first.
    async fn read_request(s: &mut TcpStream, with_body: bool) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        let mut b = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        };
        if !with_body {
            return Some(buf);
        }
        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
        let done = |buf: &[u8]| {
            let body = &buf[head_end..];
            if head.contains("transfer-encoding: chunked") {
                body.ends_with(b"0\r\n\r\n")
            } else {
                let len = head
                    .split("content-length: ")
                    .nth(1)
                    .and_then(|r| r.split("\r\n").next())
                    .map_or(0, |n| n.parse::<usize>().unwrap());
                body.len() >= len
            }
        };
        while !done(&buf) {
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        }
        Some(buf)
    }

    /// An upstream that answers the `i`th request of each connection with
    /// `answers[i]` (then closes when there are no more), reading each
    /// request's body first when `with_body`; sends each request's bytes
    /// on the channel and counts connections.
    async fn scripted(
        answers: Vec<Vec<u8>>,
        with_body: bool,
    ) -> (
        SocketAddr,
        Arc<AtomicUsize>,
        tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    ) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let conns = Arc::new(AtomicUsize::new(0));
        let n = conns.clone();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let answers = Arc::new(answers);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                let (answers, tx) = (answers.clone(), tx.clone());
                tokio::spawn(async move {
                    for a in answers.iter() {
                        let Some(req) = read_request(&mut s, with_body).await else {
                            return;
                        };
                        let _ = tx.send(req);
                        if s.write_all(a).await.is_err() {
                            return;
                        }
                    }
                    // Held open until the other side closes it.
                    let mut b = [0u8; 64];
                    while matches!(s.read(&mut b).await, Ok(n) if n > 0) {}
                });
            }
        });
        (addr, conns, rx)
    }

    /// A body of `pieces` whose length is not known before it ends.
    fn streamed(pieces: &[&'static str]) -> AnyBody {
        let frames: Vec<Result<Frame<Bytes>, BoxError>> = pieces
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed()
    }

    async fn send_body(
        p: &H1Pool,
        addr: SocketAddr,
        method: Method,
        body: AnyBody,
    ) -> Result<Response<Driven>, Failed> {
        let (host, mut r) = request(addr);
        *r.method_mut() = method;
        *r.body_mut() = body;
        p.send(&host, r, false).await
    }

    #[tokio::test]
    async fn request_bodies_go_with_their_length_or_chunked() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec();
        let (addr, conns, mut reqs) = scripted(vec![ok.clone(), ok.clone(), ok], true).await;
        let p = pool();
        let whole = crate::body::full(Bytes::from_static(b"{\"model\":\"m\"}"));
        let resp = send_body(&p, addr, Method::POST, whole).await.unwrap();
        assert_eq!(
            &resp.into_body().collect().await.unwrap().to_bytes()[..],
            b"ok"
        );
        let sent = String::from_utf8(reqs.recv().await.unwrap()).unwrap();
        assert!(
            sent.starts_with("POST /v1/chat/completions HTTP/1.1\r\nhost: "),
            "{sent}"
        );
        assert!(
            sent.ends_with("\r\ncontent-length: 13\r\n\r\n{\"model\":\"m\"}"),
            "{sent}"
        );
        let resp = send_body(&p, addr, Method::POST, streamed(&["{\"a\":", "", "1}"]))
            .await
            .unwrap();
        assert_eq!(
            &resp.into_body().collect().await.unwrap().to_bytes()[..],
            b"ok"
        );
        let sent = String::from_utf8(reqs.recv().await.unwrap()).unwrap();
        assert!(
            sent.ends_with(
                "\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n"
            ),
            "{sent:?}"
        );
        // A GET with no body says nothing of one.
        let resp = send_body(&p, addr, Method::GET, crate::body::full(Bytes::new()))
            .await
            .unwrap();
        drop(resp.into_body().collect().await.unwrap());
        let sent = String::from_utf8(reqs.recv().await.unwrap()).unwrap();
        assert!(!sent.contains("content-length") && !sent.contains("transfer-encoding"));
        assert_eq!(conns.load(Ordering::SeqCst), 1, "one kept connection");
        // A body longer than the content-length it declares is not sent.
        let (host, mut r) = request(addr);
        r.headers_mut()
            .insert(http::header::CONTENT_LENGTH, "2".parse().unwrap());
        *r.body_mut() = crate::body::full(Bytes::from_static(b"abc"));
        assert!(matches!(
            p.send(&host, r, false).await,
            Err(Failed::Request { .. })
        ));
    }

    #[tokio::test]
    async fn an_answer_before_the_whole_request_ends_the_writing() {
        // The upstream answers after the head alone; the body never ends.
        let answer = b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!".to_vec();
        let (addr, conns, _reqs) = scripted(vec![answer], false).await;
        let p = pool();
        let forever = http_body_util::StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, BoxError>,
        >())
        .boxed();
        let resp = tokio::time::timeout(
            Duration::from_secs(5),
            send_body(&p, addr, Method::POST, forever),
        )
        .await
        .expect("the early answer is read")
        .unwrap();
        assert_eq!(resp.status(), 413);
        assert_eq!(
            &resp.into_body().collect().await.unwrap().to_bytes()[..],
            b"big!"
        );
        assert!(
            p.shared.lock().hosts.is_empty(),
            "not kept: its request was cut"
        );
        assert_eq!(conns.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn informational_answers_are_skipped_and_an_upgrade_fails() {
        let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 Fine Thanks\r\ncontent-length: 2\r\n\r\nok".to_vec();
        let (addr, _, _reqs) = scripted(vec![answer], false).await;
        let p = pool();
        let (host, r) = request(addr);
        let resp = p.send(&host, r, false).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers().get("link").is_none(),
            "the 103's headers are not the answer's"
        );
        let reason = resp.extensions().get::<hyper::ext::ReasonPhrase>().unwrap();
        assert_eq!(
            reason.as_bytes(),
            b"Fine Thanks",
            "a reason of its own is kept"
        );
        assert_eq!(
            &resp.into_body().collect().await.unwrap().to_bytes()[..],
            b"ok"
        );
        assert!(!p.shared.lock().hosts.is_empty(), "kept");
        let upgrade = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n".to_vec();
        let (addr, _, _reqs) = scripted(vec![upgrade], false).await;
        assert!(matches!(
            get(&p, addr, false).await,
            Err(Failed::Request { stale: false, .. })
        ));
    }

    #[tokio::test]
    async fn only_answers_that_allow_it_keep_their_connection() {
        let cases: [(&[u8], &[u8], bool); 7] = [
            (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", b"ok", true),
            (
                b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
                b"ok",
                false,
            ),
            (b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok", b"ok", false),
            (
                b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok",
                b"ok",
                true,
            ),
            // Something unasked after the body.
            (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1", b"ok", false),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 9\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                b"ok",
                false,
            ),
            (b"HTTP/1.1 204 No Content\r\n\r\n", b"", true),
        ];
        for (answer, body, kept) in cases {
            let (addr, _, _reqs) = scripted(vec![answer.to_vec()], false).await;
            let p = pool();
            assert_eq!(get(&p, addr, false).await.unwrap(), body);
            // (Parked, or not, as the body ends.)
            assert_eq!(
                !p.shared.lock().hosts.is_empty(),
                kept,
                "{:?}",
                String::from_utf8_lossy(answer)
            );
        }
    }

    #[tokio::test]
    async fn a_body_to_the_close_ends_at_the_close() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            assert!(read_head(&mut s).await);
            s.write_all(b"HTTP/1.1 200 OK\r\n\r\nuntil ").await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            s.write_all(b"the close").await.unwrap();
        });
        let p = pool();
        assert_eq!(get(&p, addr, false).await.unwrap(), b"until the close");
        assert!(p.shared.lock().hosts.is_empty());
        // A length body cut by the close fails instead.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let cut = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            assert!(read_head(&mut s).await);
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort")
                .await
                .unwrap();
        });
        let (host, r) = request(cut);
        let body = p.send(&host, r, false).await.unwrap().into_body();
        assert!(body.collect().await.is_err(), "cut short");
    }

    #[tokio::test]
    async fn a_head_request_reads_no_body_and_keeps_the_connection() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n".to_vec();
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec();
        let (addr, conns, _reqs) = scripted(vec![head, ok], false).await;
        let p = pool();
        let resp = send_body(&p, addr, Method::HEAD, crate::body::full(Bytes::new()))
            .await
            .unwrap();
        assert_eq!(resp.headers()["content-length"], "10");
        assert!(resp.body().is_end_stream());
        assert!(
            resp.into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .is_empty()
        );
        assert_eq!(get(&p, addr, false).await.unwrap(), b"ok");
        assert_eq!(conns.load(Ordering::SeqCst), 1, "the same connection");
    }

    #[tokio::test]
    async fn broken_heads_fail_and_are_not_stale() {
        let big = format!(
            "HTTP/1.1 200 OK\r\nx-big: {}\r\n\r\n",
            "a".repeat(HTTP1_BUF)
        );
        for answer in [&b"NOT HTTP\r\n\r\n"[..], big.as_bytes()] {
            let (addr, _, _reqs) = scripted(vec![answer.to_vec()], false).await;
            assert!(matches!(
                get(&pool(), addr, false).await,
                Err(Failed::Request { stale: false, .. })
            ));
        }
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

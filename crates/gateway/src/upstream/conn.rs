//! The upstream connections of hyper-util's pooled client (HTTPS, and
//! anything through a proxy; plain-HTTP/1 ones are [`super::h1`]'s) and
//! the keep-alive race.
//!
//! Contract:
//! * Every connection notes when it was made and counts its turns
//!   ([`Counted`]): a turn starts with the first write after a read (or the
//!   first write at all). A request's connection is a reused, pooled one
//!   when it was made before the request was sent (it waited in the pool),
//!   or when the request is on its turn 2 or later (it carried an earlier
//!   exchange), whatever the timing of the pool.
//! * [`is_stale`]: the failure of a request on such a reused connection
//!   before any byte of the response was parsed (the peer closed or reset
//!   it: the keep-alive race, where the server drops an idle connection as
//!   the gateway hands it a request). Such a request is safe to send again:
//!   the server never answered it.
//! * [`Clients::fresh`] never pools: a request sent there gets a connection
//!   of its own, closed after the response.
//! * [`Handed`]: a request body that notes when a connection's dispatcher
//!   took its request (hyper reads the body's length then, before writing
//!   the head). A request not taken long after it was sent never reached a
//!   connection: nothing of it was written, it is safe to send again.
//! * The pool keeps idle connections for `upstream.pool_idle_timeout`
//!   (default 4 s, below uvicorn's 5 s keep-alive) and at most
//!   `upstream.pool_max_idle_per_host` per host.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

use crate::body::AnyBody;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

/// A request body that notes when a connection took its request: the
/// first time hyper asks for its length or its frames.
pub(crate) struct Handed {
    inner: AnyBody,
    taken: Arc<AtomicBool>,
}

impl Handed {
    /// `inner`, and the flag set once a connection took it.
    pub(crate) fn wrap(inner: AnyBody) -> (AnyBody, Arc<AtomicBool>) {
        let taken = Arc::new(AtomicBool::new(false));
        let body = Handed {
            inner,
            taken: taken.clone(),
        };
        (body.boxed(), taken)
    }

    fn mark(&self) {
        self.taken.store(true, Ordering::Release);
    }
}

impl Body for Handed {
    type Data = Bytes;
    type Error = crate::body::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        this.mark();
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.mark();
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.mark();
        self.inner.size_hint()
    }
}

/// When a connection was made and its turn count, shared with its
/// [`Connected`] info.
#[derive(Clone, Debug)]
struct Turns(Arc<AtomicU64>, Instant);

/// A connector whose connections count their turns.
#[derive(Clone, Debug)]
pub(crate) struct Counted<C> {
    inner: C,
}

impl<C> Service<Uri> for Counted<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = Io<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Io<C::Response>, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let fut = self.inner.call(uri);
        Box::pin(async move {
            Ok(Io {
                io: fut.await?,
                turns: Some(Turns(Arc::new(AtomicU64::new(0)), Instant::now())),
                writing: false,
                absolute_form: false,
            })
        })
    }
}

/// A connection with what the client needs to know of it: its turn count
/// (the connector's outermost layer), whether it goes to a proxy that
/// takes absolute-form requests (the TCP layer, [`super::tunnel`]).
#[derive(Debug)]
pub(crate) struct Io<T> {
    io: T,
    turns: Option<Turns>,
    /// Written since the last read: the current turn's request is going out.
    writing: bool,
    absolute_form: bool,
}

impl<T> Io<T> {
    /// A connection that counts no turns; `absolute_form`: requests on it
    /// go to an HTTP proxy.
    pub(crate) fn plain(io: T, absolute_form: bool) -> Io<T> {
        Io {
            io,
            turns: None,
            writing: false,
            absolute_form,
        }
    }

    fn wrote(&mut self, r: &Poll<std::io::Result<usize>>) {
        if !self.writing && matches!(r, Poll::Ready(Ok(n)) if *n > 0) {
            self.writing = true;
            if let Some(t) = &self.turns {
                t.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl<T: Connection> Connection for Io<T> {
    fn connected(&self) -> Connected {
        let c = self.io.connected();
        let c = if self.absolute_form { c.proxy(true) } else { c };
        match &self.turns {
            Some(t) => c.extra(t.clone()),
            None => c,
        }
    }
}

impl<T: Read + Unpin> Read for Io<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) {
            this.writing = false;
        }
        r
    }
}

impl<T: Write + Unpin> Write for Io<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(&r);
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(&r);
        r
    }
}

/// The pooled client and the never-pooling one, over one connector.
#[derive(Debug)]
pub(crate) struct Clients<C> {
    pooled: Client<Counted<C>, AnyBody>,
    fresh: Client<Counted<C>, AnyBody>,
}

/// Pool settings (`upstream.pool_*`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolSettings {
    pub(crate) idle_timeout: std::time::Duration,
    pub(crate) max_idle_per_host: usize,
}

impl<C> Clients<C>
where
    C: Service<Uri> + Clone + Send + Sync + 'static,
    Counted<C>: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(connector: C, pool: PoolSettings) -> Self {
        let connector = Counted { inner: connector };
        let build = |idle: usize| {
            Client::builder(TokioExecutor::new())
                .timer(TokioTimer::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(pool.idle_timeout)
                .pool_max_idle_per_host(idle)
                .http1_max_buf_size(crate::server::HTTP1_BUF)
                .build(connector.clone())
        };
        Clients {
            pooled: build(pool.max_idle_per_host),
            fresh: build(0),
        }
    }

    /// The pooled client.
    pub(crate) fn pooled(&self) -> &Client<Counted<C>, AnyBody> {
        &self.pooled
    }

    /// The client that opens a connection for each request.
    pub(crate) fn fresh(&self) -> &Client<Counted<C>, AnyBody> {
        &self.fresh
    }
}

/// Whether `e` is the failure of a request sent at `sent` on a reused
/// connection (made before `sent`, or on turn 2 or later) before any byte
/// of the response was parsed.
pub(crate) fn is_stale(e: &hyper_util::client::legacy::Error, sent: Instant) -> bool {
    if e.is_connect() {
        return false;
    }
    let Some(info) = e.connect_info() else {
        return false;
    };
    let mut ext = http::Extensions::new();
    info.get_extras(&mut ext);
    if ext
        .get::<Turns>()
        .is_none_or(|t| t.1 >= sent && t.0.load(Ordering::Relaxed) < 2)
    {
        return false;
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return closed_by_peer(h);
        }
        src = s.source();
    }
    false
}

/// Whether hyper's error before a response head is the peer closing or
/// resetting the connection: not a parse error (response bytes arrived),
/// a user error (ours) or a timeout.
pub(crate) fn closed_by_peer(h: &hyper::Error) -> bool {
    !(h.is_parse() || h.is_parse_status() || h.is_user() || h.is_timeout())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::client::legacy::connect::HttpConnector;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback upstream that answers one request per connection and
    /// closes it (no `connection: close`), after `delay`.
    async fn upstream(delay: std::time::Duration) -> std::net::SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    tokio::time::sleep(delay).await;
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                });
            }
        });
        addr
    }

    fn clients() -> Clients<HttpConnector> {
        Clients::new(
            HttpConnector::new(),
            PoolSettings {
                idle_timeout: std::time::Duration::from_secs(4),
                max_idle_per_host: 16,
            },
        )
    }

    #[tokio::test]
    async fn handed_notes_when_a_connection_takes_the_request() {
        // A slow answer: the request is taken long before its headers.
        let addr = upstream(std::time::Duration::from_millis(300)).await;
        let c = clients();
        for body in [Bytes::new(), Bytes::from_static(b"{\"a\":1}")] {
            let (b, taken) = Handed::wrap(crate::body::full(body));
            assert!(!taken.load(Ordering::Acquire));
            let mut req = http::Request::new(b);
            *req.method_mut() = http::Method::POST;
            *req.uri_mut() = format!("http://{addr}/v1/x").parse().unwrap();
            let fut = c.pooled().request(req);
            tokio::pin!(fut);
            let early = tokio::time::timeout(std::time::Duration::from_millis(150), &mut fut).await;
            assert!(early.is_err(), "answered before the upstream's delay");
            assert!(taken.load(Ordering::Acquire), "taken before the answer");
            let resp = fut.await.unwrap();
            assert_eq!(resp.status(), 200);
        }
    }

    #[tokio::test]
    async fn a_request_not_yet_on_a_connection_is_not_taken() {
        // Nothing listens: the connect fails, the body was never read.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let c = clients();
        let (b, taken) = Handed::wrap(crate::body::full(Bytes::from_static(b"x")));
        let mut req = http::Request::new(b);
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = format!("http://{addr}/").parse().unwrap();
        assert!(c.fresh().request(req).await.is_err());
        assert!(!taken.load(Ordering::Acquire));
    }
}

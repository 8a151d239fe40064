//! The upstream connections: the pooled client and the keep-alive race.
//!
//! Contract:
//! * Every connection the client opens is numbered in the order it was
//!   made ([`Numbered`]); a request notes the next number before it is sent
//!   ([`Clients::mark`]), so a failure on a connection with a smaller
//!   number happened on a connection that already existed — a reused,
//!   pooled one.
//! * [`is_stale`]: the failure of a request on such a reused connection
//!   before any byte of the response was parsed (the peer closed or reset
//!   it: the keep-alive race, where the server drops an idle connection as
//!   the gateway hands it a request). Such a request is safe to send again:
//!   the server never answered it.
//! * [`Clients::fresh`] never pools: a request sent there gets a connection
//!   of its own, closed after the response.
//! * The pool keeps idle connections for `upstream.pool_idle_timeout`
//!   (default 4 s, below uvicorn's 5 s keep-alive) and at most
//!   `upstream.pool_max_idle_per_host` per host.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

use crate::body::AnyBody;

/// The number of a connection, in the order the client made them.
#[derive(Clone, Copy, Debug)]
struct Born(u64);

/// A connector whose connections carry their [`Born`] number.
#[derive(Clone, Debug)]
pub(crate) struct Numbered<C> {
    inner: C,
    next: Arc<AtomicU64>,
}

impl<C> Numbered<C> {
    pub(crate) fn new(inner: C) -> Self {
        Numbered {
            inner,
            next: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl<C> Service<Uri> for Numbered<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = NumberedIo<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<NumberedIo<C::Response>, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let next = self.next.clone();
        let fut = self.inner.call(uri);
        Box::pin(async move {
            let io = fut.await?;
            Ok(NumberedIo {
                io,
                born: next.fetch_add(1, Ordering::Relaxed),
            })
        })
    }
}

/// A connection and its number.
#[derive(Debug)]
pub(crate) struct NumberedIo<T> {
    io: T,
    born: u64,
}

impl<T: Connection> Connection for NumberedIo<T> {
    fn connected(&self) -> Connected {
        self.io.connected().extra(Born(self.born))
    }
}

impl<T: Read + Unpin> Read for NumberedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for NumberedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
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
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

/// The pooled client and the never-pooling one, over one connector.
#[derive(Debug)]
pub(crate) struct Clients<C> {
    pooled: Client<Numbered<C>, AnyBody>,
    fresh: Client<Numbered<C>, AnyBody>,
    next: Arc<AtomicU64>,
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
    Numbered<C>: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(connector: C, pool: PoolSettings) -> Self {
        let connector = Numbered::new(connector);
        let next = connector.next.clone();
        let build = |idle: usize| {
            Client::builder(TokioExecutor::new())
                .timer(TokioTimer::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(pool.idle_timeout)
                .pool_max_idle_per_host(idle)
                .build(connector.clone())
        };
        Clients {
            pooled: build(pool.max_idle_per_host),
            fresh: build(0),
            next,
        }
    }

    /// The pooled client.
    pub(crate) fn pooled(&self) -> &Client<Numbered<C>, AnyBody> {
        &self.pooled
    }

    /// The client that opens a connection for each request.
    pub(crate) fn fresh(&self) -> &Client<Numbered<C>, AnyBody> {
        &self.fresh
    }

    /// The number the next new connection gets: a connection with a
    /// smaller one existed before this call.
    pub(crate) fn mark(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }
}

/// Whether `e` is the failure of a request on a connection made before
/// `mark` (a reused one), before any byte of the response was parsed.
pub(crate) fn is_stale(e: &hyper_util::client::legacy::Error, mark: u64) -> bool {
    if e.is_connect() {
        return false;
    }
    let Some(info) = e.connect_info() else {
        return false;
    };
    let mut ext = http::Extensions::new();
    info.get_extras(&mut ext);
    if ext.get::<Born>().is_none_or(|b| b.0 >= mark) {
        return false;
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            // A parse error means response bytes arrived; a user error or a
            // timeout is not the peer closing.
            return !(h.is_parse() || h.is_parse_status() || h.is_user() || h.is_timeout());
        }
        src = s.source();
    }
    false
}

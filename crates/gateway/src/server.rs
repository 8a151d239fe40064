//! Accepting connections (HTTP/1.1 and cleartext HTTP/2, told apart by the
//! HTTP/2 preface), slow-client limits, and the graceful drain.
//!
//! Contract:
//! * A client must send its request headers within
//!   `server.header_read_timeout` (the connection is closed otherwise), so a
//!   slow client only ever holds its own connection. A connection whose
//!   first bytes do not arrive in that time is closed too.
//! * Each request takes the gateway's state of the moment ([`Swap::load`])
//!   once, at its start, and keeps it to its end: a config reload changes
//!   what later requests get, never an open stream.
//! * On shutdown ([`Drain`]): `/readyz` answers 503 at once, and for
//!   `delay` everything is still served and new connections accepted (a
//!   load balancer's probe sees the 503 and stops sending); then the
//!   listener is closed (new connections are refused), idle connections
//!   close, open requests and streams run on for up to `grace`; then
//!   [`serve`] returns.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use citestream_host::reload::Swap;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::body::Flushes;
use crate::proxy::{State, handle};

/// The HTTP/2 connection preface.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How to stop: `/readyz` 503 and still serving for `delay`, then open
/// requests may finish for up to `grace`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Drain {
    pub(crate) delay: Duration,
    pub(crate) grace: Duration,
}

/// The state requests use, and whether the gateway is stopping (a state
/// stored by a reload from then on is draining too).
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) state: Swap<State>,
    pub(crate) closing: AtomicBool,
}

impl Live {
    pub(crate) fn new(state: State) -> Live {
        Live {
            state: Swap::new(Arc::new(state)),
            closing: AtomicBool::new(false),
        }
    }

    /// Replaces the state for new requests (a reload).
    pub(crate) fn store(&self, state: State) {
        let state = Arc::new(state);
        self.state.store(state.clone());
        if self.closing.load(Ordering::SeqCst) {
            state.draining.store(true, Ordering::SeqCst);
        }
    }

    /// `/readyz` answers 503 from now on.
    fn start_draining(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.state.load().draining.store(true, Ordering::SeqCst);
    }
}

/// Serves `listener` until `shutdown` completes, then drains as it says.
pub(crate) async fn serve(
    live: Arc<Live>,
    listener: TcpListener,
    header_timeout: Duration,
    shutdown: impl Future<Output = Drain>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    let accept = |stream: TcpStream, peer: SocketAddr| {
        let _ = stream.set_nodelay(true);
        let live = live.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            if !preface_arrives(&stream, header_timeout).await {
                return;
            }
            let flushes = Arc::new(Flushes::default());
            let io = Watched {
                io: stream,
                flushes: flushes.clone(),
            };
            // The state of the moment, once per request.
            let svc =
                service_fn(move |req| handle(live.state.load(), req, Some(peer), flushes.clone()));
            let conn = builder.serve_connection(TokioIo::new(io), svc);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    };
    let drain = loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => accept(stream, peer),
                Err(e) => accept_failed(&e).await,
            },
            d = &mut shutdown => break d,
        }
    };
    live.start_draining();
    if !drain.delay.is_zero() {
        tracing::info!(
            drain_delay_secs = drain.delay.as_secs_f64(),
            "draining: /readyz answers 503, still serving"
        );
        let delay = tokio::time::sleep(drain.delay);
        tokio::pin!(delay);
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => accept(stream, peer),
                    Err(e) => accept_failed(&e).await,
                },
                () = &mut delay => break,
            }
        }
    }
    drop(listener);
    let grace = drain.grace;
    tracing::info!(grace_secs = grace.as_secs_f64(), "draining");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("drained"),
        () = tokio::time::sleep(grace) => tracing::warn!("shutdown grace over; closing the open connections"),
    }
}

/// A client connection's socket, telling its bodies when it was flushed
/// (see [`Flushes`]).
struct Watched {
    io: TcpStream,
    flushes: Arc<Flushes>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        if r.is_ready() {
            this.flushes.flushed();
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Out of file descriptors and the like: log, and wait a little.
async fn accept_failed(e: &std::io::Error) {
    tracing::warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Waits (without consuming anything) until the client has sent enough to
/// tell HTTP/1 from HTTP/2, within `timeout`. `false`: closed or too slow.
async fn preface_arrives(stream: &TcpStream, timeout: Duration) -> bool {
    let check = async {
        let mut buf = [0u8; H2_PREFACE.len()];
        let mut last = 0;
        loop {
            let n = match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            if n == buf.len() || buf[..n] != H2_PREFACE[..n] {
                return true;
            }
            if n == last {
                // The same partial preface again: wait for more bytes.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            last = n;
        }
    };
    tokio::time::timeout(timeout, check).await.unwrap_or(false)
}

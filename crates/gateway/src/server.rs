//! Accepting connections (HTTP/1.1 and cleartext HTTP/2, told apart by the
//! HTTP/2 preface), slow-client limits, the worker threads, and the
//! graceful drain.
//!
//! Contract:
//! * `serve` runs `server.workers` threads (`serve-worker-0`, …), each with
//!   its own current-thread runtime, its own listener on the one address
//!   ([`Listeners`]: `SO_REUSEPORT` when there are several, so the kernel
//!   spreads new connections across them) and its own [`State`] (its own
//!   upstream client; the grounding, metrics and quota store are shared).
//!   A connection is accepted, served and proxied upstream on one thread:
//!   no cross-thread wake-up per event.
//! * A client must send its request headers within
//!   `server.header_read_timeout` (the connection is closed otherwise), so a
//!   slow client only ever holds its own connection. A connection whose
//!   first bytes do not arrive in that time is closed too.
//! * Each request takes its worker's state of the moment ([`Swap::load`])
//!   once, at its start, and keeps it to its end: a config reload stores
//!   one new state per worker and changes what later requests get, never an
//!   open stream.
//! * On shutdown ([`Drain`]): `/readyz` answers 503 at once, and for
//!   `delay` everything is still served and new connections accepted (a
//!   load balancer's probe sees the 503 and stops sending); then the
//!   listener is closed (new connections are refused), idle connections
//!   close, open requests and streams run on for up to `grace`; then
//!   [`serve`] returns. Every worker drains so, on the same signal.

use std::future::Future;
use std::io;
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

impl Drain {
    /// No delay and no grace.
    const NOW: Drain = Drain {
        delay: Duration::ZERO,
        grace: Duration::ZERO,
    };
}

/// The state each worker's requests use (one slot per worker), and whether
/// the gateway is stopping (a state stored by a reload from then on is
/// draining too).
#[derive(Debug)]
pub(crate) struct Live {
    slots: Vec<Swap<State>>,
    closing: AtomicBool,
}

impl Live {
    /// One slot per state, in worker order (at least one).
    pub(crate) fn new(states: Vec<State>) -> Live {
        assert!(!states.is_empty(), "a gateway has at least one worker");
        Live {
            slots: states.into_iter().map(|s| Swap::new(Arc::new(s))).collect(),
            closing: AtomicBool::new(false),
        }
    }

    /// How many workers (slots).
    pub(crate) fn workers(&self) -> usize {
        self.slots.len()
    }

    /// Worker `w`'s state of the moment.
    pub(crate) fn load(&self, w: usize) -> Arc<State> {
        self.slots[w].load()
    }

    /// Replaces each worker's state for its new requests (a reload): one
    /// state per slot, in worker order.
    pub(crate) fn store(&self, states: Vec<State>) {
        debug_assert_eq!(states.len(), self.slots.len());
        for (slot, state) in self.slots.iter().zip(states) {
            let state = Arc::new(state);
            slot.store(state.clone());
            if self.closing.load(Ordering::SeqCst) {
                state.draining.store(true, Ordering::SeqCst);
            }
        }
    }

    /// `/readyz` answers 503 from now on, on every worker.
    fn start_draining(&self) {
        self.closing.store(true, Ordering::SeqCst);
        for slot in &self.slots {
            slot.load().draining.store(true, Ordering::SeqCst);
        }
    }
}

/// The listening sockets of the workers: one per worker, all on one
/// address. Several are bound with `SO_REUSEPORT` (the kernel then hashes
/// each new connection to one of them); a single one without it.
#[derive(Debug)]
pub struct Listeners {
    sockets: Vec<std::net::TcpListener>,
}

impl Listeners {
    /// Binds `workers` listeners (at least one) on `addr`. With port 0 the
    /// first picks the port and the others bind to it.
    ///
    /// # Errors
    /// The address cannot be bound (in use, not ours, no permission).
    pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<Listeners> {
        let workers = workers.max(1);
        let first = listen_socket(addr, workers > 1)?;
        let addr = first.local_addr()?;
        let mut sockets = vec![first];
        for _ in 1..workers {
            sockets.push(listen_socket(addr, true)?);
        }
        Ok(Listeners { sockets })
    }

    /// The address they listen on (the port chosen for port 0).
    ///
    /// # Errors
    /// As [`std::net::TcpListener::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sockets[0].local_addr()
    }

    /// How many there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    /// Never: there is at least one.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }

    pub(crate) fn into_sockets(self) -> Vec<std::net::TcpListener> {
        self.sockets
    }
}

/// A non-blocking listening socket on `addr` (`SO_REUSEADDR` as tokio's own
/// `bind`; `SO_REUSEPORT` when `shared`).
fn listen_socket(addr: SocketAddr, shared: bool) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    if shared {
        #[cfg(all(unix, not(any(target_os = "solaris", target_os = "illumos"))))]
        socket.set_reuse_port(true)?;
        #[cfg(not(all(unix, not(any(target_os = "solaris", target_os = "illumos")))))]
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "several server.workers need SO_REUSEPORT, which this system lacks; set server.workers = 1",
        ));
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Runs one worker per listener, each on its own thread
/// (`serve-worker-N`) with its own current-thread runtime, until
/// `shutdown` completes; then every worker drains as it says, and this
/// returns when all have finished.
///
/// # Errors
/// A worker thread could not be started (the ones started are stopped at
/// once).
pub(crate) async fn serve_workers(
    live: Arc<Live>,
    listeners: Listeners,
    header_timeout: Duration,
    shutdown: impl Future<Output = Drain>,
) -> io::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(None::<Drain>);
    let mut finished = Vec::new();
    let mut failed = None;
    for (w, socket) in listeners.into_sockets().into_iter().enumerate() {
        let (live, stop) = (live.clone(), stop_rx.clone());
        let (done, on_done) = tokio::sync::oneshot::channel::<()>();
        let started = std::thread::Builder::new()
            .name(format!("serve-worker-{w}"))
            .spawn(move || {
                if let Err(e) = worker(live, w, socket, header_timeout, stop) {
                    tracing::error!(worker = w, error = %e, "a worker could not start");
                }
                drop(done);
            });
        match started {
            Ok(_) => finished.push(on_done),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let drain = match failed {
        None => shutdown.await,
        Some(_) => Drain::NOW,
    };
    let _ = stop_tx.send(Some(drain));
    for f in finished {
        // `Err`: the thread has ended (its sender dropped), as expected.
        let _ = f.await;
    }
    failed.map_or(Ok(()), Err)
}

/// One worker's thread: its runtime, its listener, served until `stop`
/// holds a drain (or its sender is gone: stop at once).
fn worker(
    live: Arc<Live>,
    w: usize,
    socket: std::net::TcpListener,
    header_timeout: Duration,
    mut stop: tokio::sync::watch::Receiver<Option<Drain>>,
) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = TcpListener::from_std(socket)?;
        let shutdown = async move {
            match stop.wait_for(Option::is_some).await {
                Ok(d) => d.unwrap_or(Drain::NOW),
                Err(_) => Drain::NOW,
            }
        };
        serve(live, w, listener, header_timeout, shutdown).await;
        Ok(())
    })
}

/// The most an HTTP/1 connection buffers each way, the server's and the
/// plain-HTTP/1 upstream's (hyper's `max_buf_size`; its default is about
/// 400 KiB): a request or response head that does not fit is refused (431
/// for a client's, 502 for an upstream's; hyper checks between reads of
/// growing size, so a head of up to about twice this may still fit), and
/// a stream's writes stop taking body chunks once this much waits for a
/// slow reader. Below glibc's mmap threshold, so a
/// stream's buffers come from and go back to the heap instead of being
/// mapped, faulted in page by page and unmapped per connection.
pub(crate) const HTTP1_BUF: usize = 64 * 1024;

/// Serves `listener` with worker `w`'s state until `shutdown` completes,
/// then drains as it says.
pub(crate) async fn serve(
    live: Arc<Live>,
    w: usize,
    listener: TcpListener,
    header_timeout: Duration,
    shutdown: impl Future<Output = Drain>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        // Body chunks are copied into the connection's one write buffer as
        // they are written and dropped at once: a plain-HTTP/1 upstream's
        // chunks are slices of its connection's read buffer, which the
        // next read then reuses in place (upstream/h1.rs); one buffer per
        // write, not an iovec per chunk.
        .writev(false)
        .max_buf_size(HTTP1_BUF);
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
            // The worker's state of the moment, once per request.
            let svc = service_fn(move |req| handle(live.load(w), req, Some(peer), flushes.clone()));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn reuse_port(l: &std::net::TcpListener) -> bool {
        socket2::SockRef::from(l).reuse_port().unwrap()
    }

    /// `n` listeners on a port the kernel picks, and that port's address.
    fn on_port_0(n: usize) -> (Listeners, SocketAddr) {
        let l = Listeners::bind("127.0.0.1:0".parse().unwrap(), n).unwrap();
        assert_eq!(l.len(), n);
        let addr = l.local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        (l, addr)
    }

    #[test]
    fn one_worker_binds_one_listener_without_reuseport() {
        let (l, addr) = on_port_0(1);
        assert!(!reuse_port(&l.sockets[0]));
        // Nobody else may share the port.
        assert!(Listeners::bind(addr, 2).is_err());
        assert!(Listeners::bind(addr, 1).is_err());
    }

    #[test]
    fn several_workers_share_one_port_and_the_kernel_spreads_connections() {
        let (l, addr) = on_port_0(3);
        for s in &l.sockets {
            assert_eq!(s.local_addr().unwrap(), addr);
            assert!(reuse_port(s));
        }
        // 96 connections, hashed by their source port: every listener
        // takes some (the odds of one taking none are (2/3)^96).
        let clients: Vec<_> = (0..96)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let mut taken = [0usize; 3];
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while taken.iter().sum::<usize>() < clients.len() && std::time::Instant::now() < deadline {
            for (i, s) in l.sockets.iter().enumerate() {
                while s.accept().is_ok() {
                    taken[i] += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(taken.iter().sum::<usize>(), clients.len(), "{taken:?}");
        assert!(taken.iter().all(|&n| n > 0), "{taken:?}");
    }

    #[test]
    fn zero_workers_is_one_listener() {
        let l = Listeners::bind("127.0.0.1:0".parse().unwrap(), 0).unwrap();
        assert_eq!(l.len(), 1);
        assert!(!l.is_empty());
    }
}

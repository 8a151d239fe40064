//! Accepting connections (HTTP/1.1 and cleartext HTTP/2, told apart by the
//! HTTP/2 preface), slow-client limits, and the graceful drain.
//!
//! Contract:
//! * A client must send its request headers within
//!   `server.header_read_timeout` (the connection is closed otherwise), so a
//!   slow client only ever holds its own connection. A connection whose
//!   first bytes do not arrive in that time is closed too.
//! * On shutdown: the listener is closed (new connections are refused),
//!   `/readyz` answers 503, idle connections close, open requests and
//!   streams run on for up to `server.shutdown_grace`; then [`serve`]
//!   returns.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};

use crate::proxy::{State, handle};

/// The HTTP/2 connection preface.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serves `listener` until `shutdown` completes, then drains.
pub(crate) async fn serve(
    state: Arc<State>,
    listener: TcpListener,
    header_timeout: Duration,
    grace: Duration,
    shutdown: impl Future<Output = ()>,
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
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            if !preface_arrives(&stream, header_timeout).await {
                return;
            }
            let svc = service_fn(move |req| handle(state.clone(), req, Some(peer)));
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    state.draining.store(true, Ordering::SeqCst);
    tracing::info!(grace_secs = grace.as_secs_f64(), "draining");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("drained"),
        () = tokio::time::sleep(grace) => tracing::warn!("shutdown grace over; closing the open connections"),
    }
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

//! The floor of the `ext_proc` protocol: an external processor that
//! changes nothing, for benchmarks (`scripts/bench_envoy.py`, the host
//! benchmark) to measure `citestream ext-proc` against.
//!
//! ```sh
//! cargo build --release -p citestream-ext-proc --example noop_processor
//! target/release/examples/noop_processor [--listen ADDR]   # default 127.0.0.1:8080
//! ```
//!
//! It serves `citestream_ext_proc::noop::Noop` (what it answers to each
//! message is documented there) on the same tonic server, gRPC service and
//! message types as `citestream ext-proc`: the same message size limits,
//! `TCP_NODELAY` on accepted connections, a multi-threaded runtime.
//! SIGTERM or SIGINT stops accepting and lets open streams finish.

use std::net::SocketAddr;

use citestream_ext_proc::noop::Noop;
use citestream_ext_proc::{ExternalProcessorServer, MAX_MESSAGE};
use tonic::transport::server::TcpIncoming;

fn listen_addr() -> Result<SocketAddr, String> {
    let mut args = std::env::args().skip(1);
    let mut addr = "127.0.0.1:8080".to_owned();
    while let Some(a) = args.next() {
        if a == "--listen" {
            addr = args.next().ok_or("--listen needs an address")?;
        } else if let Some(v) = a.strip_prefix("--listen=") {
            v.clone_into(&mut addr);
        } else {
            return Err(format!(
                "unknown argument {a:?} (usage: noop_processor [--listen ADDR])"
            ));
        }
    }
    addr.parse().map_err(|e| format!("--listen {addr:?}: {e}"))
}

async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let addr = match listen_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("noop_processor: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("noop_processor: cannot listen on {addr}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    println!("noop_processor: listening on grpc://{local}");
    let svc = ExternalProcessorServer::new(Noop)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let served = tonic::transport::Server::builder()
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming, stopped())
        .await;
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("noop_processor: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

//! `citestream ext-proc` (docs/envoy.md): the web-search grounding system
//! of `citestream serve` as an Envoy external processor, so any
//! Envoy-based gateway gets it by adding one HTTP filter.
//!
//! The processor is a gRPC server of `envoy.service.ext_proc.v3.ExternalProcessor`
//! (tonic, over the crate's own `prost` types of the messages it uses,
//! whose body fields are `Bytes`: see [`pb`]). It shares
//! everything but the HTTP stack with `citestream serve` through
//! `citestream-host`: the config file (without `[upstream]`: Envoy routes
//! the request), accounts and auth, search providers, quota stores, the
//! request flow ([`Grounding::prepare`]) and error bodies. The response is
//! rewritten by the core's rewriters, so its bytes equal
//! `citestream rewrite`'s output for the same upstream stream and sources.
//!
//! # Envoy filter settings it expects
//!
//! ```yaml
//! processing_mode:
//!   request_header_mode: SEND
//!   response_header_mode: SEND
//!   request_body_mode: BUFFERED          # the flow needs the whole request body
//!   response_body_mode: STREAMED         # or FULL_DUPLEX_STREAMED (+ response_trailer_mode: SEND)
//! allow_mode_override: true              # optional: other paths skip the processor's body work
//! failure_mode_allow: false              # or true: see below
//! ```
//!
//! `examples/envoy/` in the repository ships a working configuration.
//!
//! # Modules
//! * `exchange` (private): one HTTP exchange, message by
//!   message.
//! * `response` (private): the answers to response body
//!   messages in both body modes.
//! * [`service`]: the processor's answer streams.
//! * [`grpc`]: the tonic service of any processor.
//! * [`pb`]: the protobuf messages.
//! * [`noop`]: the do-nothing processor, the protocol's floor for
//!   benchmarks.
//! * `proto` (private): the processor's builders and readers of the
//!   messages.
//! * `probes` (private): the metrics port (`/metrics`, `/healthz`,
//!   `/readyz`).
//!
//! # Watching it
//! * The gRPC port also serves `grpc.health.v1.Health`: `SERVING` for the
//!   whole server (`""`) and for `envoy.service.ext_proc.v3.ExternalProcessor`
//!   while it accepts streams, `NOT_SERVING` from the shutdown signal on.
//! * `ext_proc.metrics_listen` (default `127.0.0.1:9464`, `""` off) serves
//!   over HTTP/1.1 `GET /metrics` (the same Prometheus registry as
//!   `citestream serve`), `GET /healthz` (200 while the process runs) and
//!   `GET /readyz` (200, 503 from the shutdown signal on).
//!
//! # Shutting down
//! SIGTERM: `NOT_SERVING` and `/readyz` 503 at once, while everything is
//! still served (new streams and connections too) for `server.drain_delay`,
//! so Kubernetes or the load balancer in front of Envoy stops sending
//! traffic here; then the gRPC listener closes, open streams finish for up
//! to `server.shutdown_grace`, and the process exits. SIGINT: the same
//! without the delay. The times are the config in force when the signal
//! arrives (a reload changes them), as `citestream serve` does
//! (docs/gateway.md, "Running in production").
//!
//! # Failure behaviour
//! What happens to a stream whose processor goes away is Envoy's
//! `failure_mode_allow`: `false` (the default) ends it with an error
//! (a 500 before the response started, a reset after); `true` lets the
//! rest of the exchange through unprocessed. Bad input from Envoy or the
//! upstream never fails a stream here: it passes through.

mod exchange;
pub mod grpc;
pub mod noop;
pub mod pb;
mod probes;
mod proto;
mod response;
pub mod service;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use citestream_host::config::Config;
use citestream_host::grounding::Grounding;
use citestream_host::reload::{Reloader, Signal, Swap, rebuild_grounding};
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

pub use grpc::ExternalProcessorServer;
pub use proto::http_headers;
pub use response::BodyMode;
pub use service::Processor;

/// Largest gRPC message accepted from Envoy (a buffered request body comes
/// in one message; Envoy's own buffer limit usually stops it first).
pub const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// Errors that stop the processor from starting or serving.
#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// A bound, ready processor: call [`Server::run`].
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    metrics: Option<TcpListener>,
    grounding: Arc<Grounding>,
    processor: Processor,
    drain: Arc<Swap<DrainTimes>>,
}

/// `server.drain_delay` and `server.shutdown_grace` of the config in force.
#[derive(Debug)]
struct DrainTimes {
    delay: Duration,
    grace: Duration,
}

impl DrainTimes {
    fn of(cfg: &Config) -> Arc<DrainTimes> {
        Arc::new(DrainTimes {
            delay: cfg.server.drain_delay,
            grace: cfg.server.shutdown_grace,
        })
    }
}

impl Server {
    /// Builds the shared request side from `cfg` and binds
    /// `cfg.server.listen` and `cfg.ext_proc.metrics_listen` (unless `""`).
    ///
    /// # Errors
    /// A config problem (search provider, quota store) or an address that
    /// cannot be bound.
    pub async fn bind(cfg: &Config) -> Result<Server, Error> {
        let metrics_addr = cfg
            .ext_proc
            .metrics_addr()
            .map_err(|e| Error(format!("config: {e}")))?;
        let grounding = Arc::new(
            Grounding::new(cfg)
                .await
                .map_err(|e| Error(format!("config: {e}")))?,
        );
        let addr = cfg.server.listen;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| Error(format!("cannot listen on {addr}: {e}")))?;
        let metrics = match metrics_addr {
            None => None,
            Some(a) => Some(TcpListener::bind(a).await.map_err(|e| {
                Error(format!(
                    "ext_proc.metrics_listen: cannot listen on {a}: {e}"
                ))
            })?),
        };
        Ok(Server {
            listener,
            metrics,
            processor: Processor::new(grounding.clone()),
            grounding,
            drain: Arc::new(Swap::new(DrainTimes::of(cfg))),
        })
    }

    /// Reloads the config with `reloader` (see
    /// [`citestream_host::reload`]): new streams use the new request side
    /// once it is built; open ones finish with theirs, the drain times
    /// are the new ones, and `applied` is called with the new config (the
    /// process's log level). A file that does not load or build is logged
    /// and the old config stays.
    pub fn reload_task(
        &self,
        reloader: Reloader,
        applied: impl Fn(&Config) + Send + Sync + 'static,
    ) -> impl Fn() + Send + Sync + 'static {
        let swap = self.processor.grounding().clone();
        let drain = self.drain.clone();
        let reloader = Arc::new(reloader);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                let old = swap.load();
                let built = reloader
                    .reload(move |old_cfg, new_cfg| rebuild_grounding(&old, old_cfg, new_cfg))
                    .await;
                if let Some((g, cfg)) = built {
                    swap.store(Arc::new(g));
                    drain.store(DrainTimes::of(&cfg));
                    applied(&cfg);
                }
            }
        });
        // One waiting reload covers every request before it.
        move || {
            let _ = tx.try_send(());
        }
    }

    /// The address it listens on.
    ///
    /// # Errors
    /// The OS could not say.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.listener.local_addr().map_err(|e| Error(e.to_string()))
    }

    /// The address of the metrics port; `None` when it is off.
    ///
    /// # Errors
    /// The OS could not say.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, Error> {
        self.metrics
            .as_ref()
            .map(|l| l.local_addr().map_err(|e| Error(e.to_string())))
            .transpose()
    }

    /// Serves until `shutdown` resolves with the signal that stops it,
    /// then drains (see "Shutting down" in the crate docs): `NOT_SERVING`
    /// (gRPC health, `/readyz` 503), still serving for
    /// `server.drain_delay` after [`Signal::Terminate`] (no delay after any
    /// other signal), then stops accepting and lets open streams finish for
    /// up to `server.shutdown_grace`.
    ///
    /// # Errors
    /// The gRPC server failed.
    pub async fn run(self, shutdown: impl Future<Output = Signal> + Send) -> Result<(), Error> {
        let svc = ExternalProcessorServer::new(self.processor)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let (health, health_svc) = tonic_health::server::health_reporter();
        health
            .set_serving::<ExternalProcessorServer<Processor>>()
            .await;
        let draining = Arc::new(AtomicBool::new(false));
        let probes = self
            .metrics
            .map(|l| tokio::spawn(probes::serve(l, self.grounding.clone(), draining.clone())));
        // The grace of the config in force, from the moment the listener
        // closes.
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<Duration>();
        let signal = {
            let draining = draining.clone();
            let drain = self.drain.clone();
            async move {
                let signal = shutdown.await;
                let times = drain.load();
                let delay = if signal == Signal::Terminate {
                    times.delay
                } else {
                    Duration::ZERO
                };
                draining.store(true, Ordering::Relaxed);
                health
                    .set_not_serving::<ExternalProcessorServer<Processor>>()
                    .await;
                health
                    .set_service_status("", ServingStatus::NotServing)
                    .await;
                if !delay.is_zero() {
                    tracing::info!(
                        drain_delay_secs = delay.as_secs_f64(),
                        "draining: NOT_SERVING and /readyz 503, still serving"
                    );
                    tokio::time::sleep(delay).await;
                }
                tracing::info!(
                    grace_secs = times.grace.as_secs_f64(),
                    "shutting down: no new streams, open ones may finish"
                );
                let _ = closed_tx.send(times.grace);
            }
        };
        // Every answer goes out at once: no Nagle delay on accepted
        // connections (the builder's own setting covers only sockets it
        // binds itself).
        let incoming = TcpIncoming::from(self.listener).with_nodelay(Some(true));
        let serve = tonic::transport::Server::builder()
            .add_service(health_svc)
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, signal);
        let result = tokio::select! {
            r = serve => r.map_err(|e| Error(format!("grpc server: {e}"))),
            () = async {
                match closed_rx.await {
                    Ok(grace) => tokio::time::sleep(grace).await,
                    Err(_) => std::future::pending().await,
                }
            } => {
                tracing::warn!("shutdown grace expired; open streams cut");
                Ok(())
            }
        };
        if let Some(p) = probes {
            p.abort();
        }
        result
    }
}

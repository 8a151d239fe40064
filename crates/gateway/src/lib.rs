//! `citestream serve` (docs/gateway.md): the whole web-search system as one
//! process in front of any OpenAI-/Anthropic-compatible model server, and
//! the built-in demo upstream model.
//!
//! The request side (auth, quota, search, injection), the config file, the
//! error bodies and the metrics come from [`citestream_host`]; this crate
//! is the HTTP shell around them:
//!
//! * `server`: accepting HTTP/1.1 and h2c connections, slow-client limits,
//!   the worker threads (`server.workers`, one current-thread runtime and
//!   one `SO_REUSEPORT` listener each: [`Listeners`]), the state of the
//!   moment per request, the graceful drain;
//! * `proxy`: the probes and the plumbing around each request's
//!   `citestream_host::exchange::Exchange` (which decides everything about
//!   the request and its response);
//! * `upstream`: the pooled HTTP(S) client to the model server, or the
//!   [`demo`] model;
//! * `body`: response bodies with backpressure.
//!
//! # Example
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use citestream_gateway::Gateway;
//! use citestream_host::config::Config;
//!
//! let cfg = Config::load(None)?; // embedded defaults
//! let gw = Gateway::new(&cfg).await?;
//! let listener = tokio::net::TcpListener::bind(cfg.server.listen).await?;
//! // Serves until the shutdown future completes (the `citestream` binary
//! // passes one that waits for SIGTERM or SIGINT).
//! let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! gw.serve(listener, async {
//!     let _ = stopped.await;
//! })
//! .await;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use citestream::quota::{Clock, SystemClock};
use citestream_host::config::{Config, ConfigError};
use citestream_host::grounding::Grounding;
use citestream_host::metrics::Metrics;
use citestream_host::reload::{Reloader, Signal, rebuild_grounding};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

mod body;
/// The built-in demo model (its own crate, `citestream-demo`).
pub use citestream_demo as demo;
mod proxy;
mod server;
mod upstream;

use proxy::State;
pub use server::Listeners;
use server::{Drain, Live};
use upstream::Upstream;

/// A configured gateway, ready to serve.
#[derive(Debug)]
pub struct Gateway {
    live: Arc<Live>,
    header_timeout: Duration,
    drain: Drain,
}

/// The states of `cfg` on `grounding`, one per worker, each with its own
/// upstream client (the one place a [`State`] is made).
fn states(cfg: &Config, grounding: Grounding, workers: usize) -> Result<Vec<State>, ConfigError> {
    let grounding = Arc::new(grounding);
    (0..workers.max(1))
        .map(|_| {
            let upstream = Upstream::new(cfg, grounding.metrics().clone(), grounding.tls())
                .map_err(|m| ConfigError::new("upstream", m))?;
            Ok(State {
                grounding: grounding.clone(),
                upstream,
                draining: AtomicBool::new(false),
            })
        })
        .collect()
}

fn drain_of(cfg: &Config) -> Drain {
    Drain {
        delay: cfg.server.drain_delay,
        grace: cfg.server.shutdown_grace,
    }
}

impl Gateway {
    /// Builds the gateway of `cfg`: accounts, quota store, search provider,
    /// and one upstream client per worker (`server.workers`).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key at fault.
    pub async fn new(cfg: &Config) -> Result<Gateway, ConfigError> {
        Gateway::with_clock(cfg, Arc::new(SystemClock)).await
    }

    /// [`Gateway::new`] on another clock (tests).
    ///
    /// # Errors
    /// As [`Gateway::new`].
    pub async fn with_clock(cfg: &Config, clock: Arc<dyn Clock>) -> Result<Gateway, ConfigError> {
        let grounding = Grounding::with_clock(cfg, clock).await?;
        Ok(Gateway {
            live: Arc::new(Live::new(states(cfg, grounding, cfg.server.workers)?)),
            header_timeout: cfg.server.header_read_timeout,
            drain: drain_of(cfg),
        })
    }

    /// A one-line description of the upstream (`demo (built-in model)` or
    /// its base URL), for the start-up banner.
    #[must_use]
    pub fn upstream_name(&self) -> String {
        self.live.load(0).upstream.describe()
    }

    /// The metrics registry (the same one across config reloads).
    #[must_use]
    pub fn metrics(&self) -> Arc<Metrics> {
        self.live.load(0).grounding.metrics().clone()
    }

    /// How many workers it serves with (`server.workers`).
    #[must_use]
    pub fn workers(&self) -> usize {
        self.live.workers()
    }

    /// Binds one listener per worker on `addr` (see [`Listeners`]), for
    /// [`Gateway::run`].
    ///
    /// # Errors
    /// The address cannot be bound.
    pub fn bind(&self, addr: std::net::SocketAddr) -> std::io::Result<Listeners> {
        Listeners::bind(addr, self.workers())
    }

    /// Serves connections from `listener` on the calling runtime (one
    /// worker's state, whatever `server.workers` says) until `shutdown`
    /// completes, then stops accepting, answers `/readyz` with 503 and lets
    /// open requests finish for up to `server.shutdown_grace` (no
    /// `server.drain_delay`: see [`Gateway::run`] for the signals'
    /// behaviour).
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let drain = Drain {
            delay: Duration::ZERO,
            ..self.drain
        };
        server::serve(self.live, 0, listener, self.header_timeout, async {
            shutdown.await;
            drain
        })
        .await;
    }

    /// Serves connections from `listeners` ([`Gateway::bind`]), one worker
    /// thread per listener (`serve-worker-0`, …, each with its own
    /// current-thread runtime), driven by `signals` until one stops it or
    /// the channel closes (then as [`Signal::Interrupt`]). The signals, the
    /// reloads and whatever else runs outside the connections stay on the
    /// caller's runtime.
    ///
    /// * [`Signal::Reload`]: `reloader` reads the config file again and
    ///   the new state (accounts and keys, plans, upstream, search provider
    ///   and local index, inject, rewrite, `server.max_request_body`) is
    ///   built once on a blocking thread (one upstream client per worker),
    ///   then stored in every worker and used by every request that starts
    ///   afterwards; requests already running finish with the old one.
    ///   `server.workers` takes a restart. The quota store (and so today's counts) and the metrics are
    ///   kept; a new store is made only when `[quota]` changed. A file that
    ///   does not load or build is logged and the old config stays.
    ///   `applied` is called with each config put in force (the host
    ///   applies what lives outside the gateway, such as the log level).
    /// * [`Signal::Terminate`]: `/readyz` answers 503 for
    ///   `server.drain_delay` while everything is still served, then the
    ///   listeners close and open requests finish for up to
    ///   `server.shutdown_grace`, on every worker; then this returns.
    /// * [`Signal::Interrupt`]: the same without the delay.
    ///
    /// The drain times are the config in force when the signal arrives.
    ///
    /// # Errors
    /// A worker thread could not be started.
    pub async fn run(
        self,
        listeners: Listeners,
        mut signals: mpsc::Receiver<Signal>,
        reloader: Reloader,
        applied: impl Fn(&Config) + Send + Sync + 'static,
    ) -> std::io::Result<()> {
        let reloader = Arc::new(reloader);
        let applied = Arc::new(applied);
        let live = self.live.clone();
        let control = async move {
            let (reload_tx, mut reload_rx) = mpsc::channel::<()>(1);
            let reloads = {
                let (live, reloader) = (live.clone(), reloader.clone());
                tokio::spawn(async move {
                    while reload_rx.recv().await.is_some() {
                        reload(&live, &reloader, &*applied).await;
                    }
                })
            };
            let stop = loop {
                match signals.recv().await {
                    Some(Signal::Reload) => {
                        // One waiting reload covers every SIGHUP before it.
                        let _ = reload_tx.try_send(());
                    }
                    Some(Signal::Terminate) => break true,
                    Some(Signal::Interrupt) | None => break false,
                    Some(_) => {}
                }
            };
            drop(reload_tx);
            reloads.abort();
            let drain = drain_of(&reloader.config());
            if stop {
                drain
            } else {
                Drain {
                    delay: Duration::ZERO,
                    ..drain
                }
            }
        };
        server::serve_workers(self.live, listeners, self.header_timeout, control).await
    }
}

/// One reload: the config file again, the new states (one per worker)
/// built off the serving path, then stored.
async fn reload(live: &Live, reloader: &Reloader, applied: &(dyn Fn(&Config) + Send + Sync)) {
    let old = live.load(0);
    let workers = live.workers();
    let built = reloader
        .reload(move |old_cfg, new_cfg| {
            if new_cfg.server.workers != workers {
                tracing::warn!(
                    running = workers,
                    configured = new_cfg.server.workers,
                    "server.workers changed: it takes a restart; still serving with the old count"
                );
            }
            states(
                new_cfg,
                rebuild_grounding(&old.grounding, old_cfg, new_cfg)?,
                workers,
            )
        })
        .await;
    if let Some((states, cfg)) = built {
        live.store(states);
        applied(&cfg);
    }
}

//! `citestream serve` (docs/gateway.md): the whole web-search system as one
//! process in front of any OpenAI-/Anthropic-compatible model server, and
//! the built-in demo upstream model.
//!
//! The request side (auth, quota, search, injection), the config file, the
//! error bodies and the metrics come from [`citestream_host`]; this crate
//! is the HTTP shell around them:
//!
//! * `server`: accepting HTTP/1.1 and h2c connections, slow-client limits,
//!   the graceful drain;
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
use tokio::net::TcpListener;

mod body;
/// The built-in demo model (its own crate, `citestream-demo`).
pub use citestream_demo as demo;
mod proxy;
mod server;
mod upstream;

use proxy::State;
use upstream::Upstream;

/// A configured gateway, ready to serve.
#[derive(Debug)]
pub struct Gateway {
    state: Arc<State>,
    header_timeout: Duration,
    grace: Duration,
}

impl Gateway {
    /// Builds the gateway of `cfg`: accounts, quota store, search provider,
    /// upstream client.
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
        let upstream = Upstream::new(cfg, grounding.metrics().clone(), grounding.tls())
            .map_err(|m| ConfigError::new("upstream", m))?;
        Ok(Gateway {
            state: Arc::new(State {
                grounding: Arc::new(grounding),
                upstream,
                draining: AtomicBool::new(false),
            }),
            header_timeout: cfg.server.header_read_timeout,
            grace: cfg.server.shutdown_grace,
        })
    }

    /// A one-line description of the upstream (`demo (built-in model)` or
    /// its base URL), for the start-up banner.
    #[must_use]
    pub fn upstream_name(&self) -> String {
        self.state.upstream.describe()
    }

    /// The metrics registry.
    #[must_use]
    pub fn metrics(&self) -> &Arc<Metrics> {
        self.state.grounding.metrics()
    }

    /// Serves connections from `listener` until `shutdown` completes, then
    /// stops accepting, answers `/readyz` with 503 and lets open requests
    /// finish for up to `server.shutdown_grace`.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        server::serve(
            self.state,
            listener,
            self.header_timeout,
            self.grace,
            shutdown,
        )
        .await;
    }
}

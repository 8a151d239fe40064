//! Process-level concerns of the `citestream` binary, shared by its two
//! long-running subcommands (`serve`, `ext-proc`): when to stop (SIGTERM
//! or SIGINT) and when to reload (SIGHUP), their shared flags, and where log lines go (JSON lines on
//! standard output for the servers, through `citestream_host::telemetry`;
//! plain warnings on standard error for `search`), and [`Failure`], why
//! any command failed (its exit status). The
//! libraries (`citestream-gateway`, `citestream-ext-proc`) take a shutdown
//! future and log through `tracing`; they install neither.

use std::io;
use std::path::PathBuf;

use citestream_host::config::{Config, ConfigError};
use citestream_host::reload::Signal;
use citestream_host::telemetry::Telemetry;

/// Why a command failed; decides the exit status.
pub(crate) enum Failure {
    /// Bad flags, an unreadable input, sources or config file, a server
    /// that cannot start: exit 2.
    Usage(String),
    /// Failed after it started (a search, an I/O error): exit 1.
    Io(io::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

/// The flags `serve` and `ext-proc` share.
#[derive(Debug, clap::Args)]
pub(crate) struct ServerArgs {
    /// The config file (TOML); without it, the embedded defaults.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The address to listen on, over `server.listen` and
    /// `CITESTREAM_LISTEN` (e.g. 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
}

impl ServerArgs {
    /// The config file (or the defaults) with `--listen` applied.
    pub(crate) fn load(&self) -> Result<Config, Failure> {
        (self.loader())().map_err(|e| Failure::Usage(e.to_string()))
    }

    /// Loads the config as at start-up, `--listen` applied: what a SIGHUP
    /// reload reads.
    pub(crate) fn loader(
        &self,
    ) -> impl Fn() -> Result<Config, ConfigError> + Send + Sync + 'static {
        let (config, listen) = (self.config.clone(), self.listen.clone());
        move || {
            let mut cfg = Config::load(config.as_deref())?;
            if let Some(addr) = &listen {
                cfg.set_listen(addr)?;
            }
            Ok(cfg)
        }
    }
}

/// The part of a server's start-up banner that says what it runs with:
/// `search: local, quota: memory, auth: open`.
pub(crate) fn banner_details(cfg: &Config) -> String {
    use citestream_host::config::{AuthMode, StoreName};
    format!(
        "search: {}, quota: {}, auth: {}",
        cfg.search.provider,
        match cfg.quota.store {
            StoreName::Memory => "memory",
            StoreName::Redis => "redis",
        },
        match cfg.auth.mode {
            AuthMode::Open => "open",
            AuthMode::Keys => "keys",
        },
    )
}

/// A multi-threaded runtime (`ext-proc`).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Usage(format!("cannot start the runtime: {e}")))
}

/// `serve`'s background runtime, on the calling thread: the signals, the
/// reloads, the quota store's and the traces' connections; the connections
/// themselves run on the gateway's worker threads, each with its own.
pub(crate) fn background_runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Usage(format!("cannot start the runtime: {e}")))
}

/// The signals a server acts on (SIGTERM, SIGINT, SIGHUP), as they
/// arrive. The handlers are installed when this is called (inside the
/// runtime, before the banner is printed), not when the receiver is first
/// polled: a signal sent as soon as the server answers is never the
/// default action (death by signal).
pub(crate) fn signals() -> tokio::sync::mpsc::Receiver<Signal> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        for (kind, sig) in [
            (SignalKind::terminate(), Signal::Terminate),
            (SignalKind::interrupt(), Signal::Interrupt),
            (SignalKind::hangup(), Signal::Reload),
        ] {
            let Ok(mut s) = signal(kind) else { continue };
            let tx = tx.clone();
            tokio::spawn(async move {
                while s.recv().await.is_some() {
                    if tx.send(sig).await.is_err() {
                        return;
                    }
                }
            });
        }
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = tx.send(Signal::Interrupt).await;
    });
    rx
}

/// Installs the servers' logs (JSON lines on standard output, at
/// `log.level` or `RUST_LOG`) and traces (`log.otlp_endpoint`).
pub(crate) fn telemetry(cfg: &Config) -> Result<Telemetry, Failure> {
    Telemetry::init(&cfg.log, std::io::stdout).map_err(|e| Failure::Usage(e.to_string()))
}

/// Installs the writer of the one-shot `search` command: warnings (a
/// provider that failed, say) as plain lines on standard error, so
/// standard output carries only the result. The search library's own
/// "search failed" line is left out: the command prints that failure
/// itself, once.
pub(crate) fn init_warnings() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::filter::Targets::new()
        .with_default(tracing::Level::WARN)
        .with_target("citestream_search::search", tracing::Level::ERROR);
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .with(filter)
        .try_init();
}

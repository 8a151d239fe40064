//! Process-level concerns of the `citestream` binary, shared by its two
//! long-running subcommands (`serve`, `ext-proc`): when to stop (SIGTERM
//! or SIGINT) or reload (SIGHUP), and where log lines go (JSON lines on standard output for
//! the servers, plain warnings on standard error for `search`). The
//! libraries (`citestream-gateway`, `citestream-ext-proc`) take a shutdown
//! future and log through `tracing`; they install neither.

/// The signals a server acts on (SIGTERM, SIGINT, SIGHUP), as they
/// arrive. The handlers are installed when this is called (inside the
/// runtime, before the banner is printed): from then on none of the three
/// is the default action (death by signal).
pub(crate) fn signals() -> tokio::sync::mpsc::Receiver<citestream_host::reload::Signal> {
    use citestream_host::reload::Signal;
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

/// Installs the JSON-lines log writer on standard output (one line per
/// request, plus start-up and drain lines), at level `info`.
pub(crate) fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stdout)
        .try_init();
}

/// Installs the writer of the one-shot `search` command: warnings (a
/// provider that failed, say) as plain lines on standard error, so
/// standard output carries only the result.
pub(crate) fn init_warnings() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .with_target(false)
        .try_init();
}

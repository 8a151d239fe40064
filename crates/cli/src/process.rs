//! Process-level concerns of the `citestream` binary, shared by its two
//! long-running subcommands (`serve`, `ext-proc`): when to stop (SIGTERM
//! or SIGINT) and where log lines go (JSON lines on standard output for
//! the servers, plain warnings on standard error for `search`). The
//! libraries (`citestream-gateway`, `citestream-ext-proc`) take a shutdown
//! future and log through `tracing`; they install neither.

/// Completes on SIGTERM or SIGINT (Ctrl-C).
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
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

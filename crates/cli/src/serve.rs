//! `citestream serve [--config FILE] [--listen ADDR]`: the gateway (docs/gateway.md).
//!
//! Loads the config (the embedded defaults without `--config`), applies
//! `--listen` over the file and the `CITESTREAM_*` overrides, binds one
//! listener per worker (`server.workers`), prints the address, the worker
//! count and one ready-to-paste request on standard output, then serves
//! (one JSON log line per request on standard output) until
//! SIGTERM/SIGINT, drains, and exits 0. SIGHUP reloads the config file
//! (with `--listen` applied again; the log level too).
//!
//! Exit status 2 on a start-up error (bad flag, config, or address), with
//! one line on standard error naming the flag, key or variable at fault.

use std::io::Write;

use citestream_gateway::Gateway;

use crate::process::Failure;
use crate::process::{ServerArgs, signals};
use citestream_host::config::{Config, ConfigError};
use citestream_host::reload::Reloader;
use citestream_host::telemetry::Telemetry;

/// The flags of `serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    server: ServerArgs,
}

/// Runs the subcommand.
pub(crate) fn run(args: ServeArgs) -> Result<(), Failure> {
    let cfg = args.server.load()?;
    let telemetry = crate::process::telemetry(&cfg)?;
    let reloader = Reloader::new(cfg.clone(), args.server.loader());
    let result = crate::process::background_runtime()?.block_on(serve(cfg, reloader, &telemetry));
    telemetry.shutdown();
    result.map_err(|e| Failure::Usage(e.to_string()))
}

async fn serve(cfg: Config, reloader: Reloader, telemetry: &Telemetry) -> Result<(), ConfigError> {
    let signals = signals();
    let gateway = Gateway::new(&cfg).await?;
    let listeners = gateway.bind(cfg.server.listen).map_err(|e| {
        ConfigError::new(
            "server.listen",
            format!("cannot listen on {}: {e}", cfg.server.listen),
        )
    })?;
    let addr = listeners.local_addr().unwrap_or(cfg.server.listen);
    let model = if cfg.upstream.base_url.is_empty() {
        "citestream-demo"
    } else {
        "YOUR-MODEL"
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "citestream serve: listening on http://{addr} (upstream: {}, {}, workers: {})",
        gateway.upstream_name(),
        crate::process::banner_details(&cfg),
        gateway.workers(),
    );
    let _ = writeln!(
        out,
        "try:\n  curl -s http://{addr}/v1/chat/completions -H 'content-type: application/json' \
         -d '{{\"model\":\"{model}\",\"web_search\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"What is the capital of Portugal?\"}}]}}'"
    );
    let _ = out.flush();
    drop(out);
    let set_level = telemetry.level_control();
    gateway
        .run(listeners, signals, reloader, move |c| {
            set_level(c.log.level)
        })
        .await
        .map_err(|e| ConfigError::new("server.workers", format!("cannot start a worker: {e}")))
}

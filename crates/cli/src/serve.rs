//! `citestream serve [--config FILE] [--listen ADDR]` (SPEC section 12).
//!
//! Loads the config (the embedded defaults without `--config`), applies
//! `--listen` over the file and the `CITESTREAM_*` overrides, binds, prints
//! the address and one ready-to-paste request on standard output, then
//! serves (one JSON log line per request on standard output) until
//! SIGTERM/SIGINT, drains, and exits 0. SIGHUP reloads the config file
//! (with `--listen` applied again).
//!
//! Exit status 2 on a start-up error (bad flag, config, or address), with
//! one line on standard error naming the flag, key or variable at fault.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use citestream_gateway::Gateway;

use crate::process::{init_logging, signals};
use citestream_host::config::{Config, ConfigError};
use citestream_host::reload::Reloader;

const USAGE: &str = "usage: citestream serve [--config FILE] [--listen ADDR]";

/// Runs the subcommand; `args` are the words after `serve`.
pub(crate) fn main(args: &[String]) -> ExitCode {
    let ServeArgs { config, listen } = match parse_args(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => return fail(&format!("{msg} ({USAGE})")),
    };
    let mut cfg = match Config::load(config.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    if let Some(Err(e)) = listen.as_deref().map(|addr| cfg.set_listen(addr)) {
        return fail(&e.to_string());
    }
    let cfg_for_reload = cfg.clone();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    let load = move || {
        let mut c = Config::load(config.as_deref())?;
        if let Some(addr) = &listen {
            c.set_listen(addr)?;
        }
        Ok(c)
    };
    match rt.block_on(run(cfg, Reloader::new(cfg_for_reload, load))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("citestream serve: {msg}");
    ExitCode::from(2)
}

/// The flags of `serve`.
struct ServeArgs {
    config: Option<PathBuf>,
    listen: Option<String>,
}

/// `Ok(None)`: help was asked for.
fn parse_args(args: &[String]) -> Result<Option<ServeArgs>, String> {
    let (mut config, mut listen) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (a.as_str(), None),
        };
        let slot = match name {
            "-h" | "--help" => return Ok(None),
            "--config" => &mut config,
            "--listen" => &mut listen,
            _ => return Err(format!("unknown argument '{a}'")),
        };
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("option '{name}' needs a value"))?,
        };
        if slot.replace(value).is_some() {
            return Err(format!("option '{name}' given twice"));
        }
    }
    Ok(Some(ServeArgs {
        config: config.map(PathBuf::from),
        listen,
    }))
}

async fn run(cfg: Config, reloader: Reloader) -> Result<(), ConfigError> {
    let signals = signals();
    let gateway = Gateway::new(&cfg).await?;
    let listener = tokio::net::TcpListener::bind(cfg.server.listen)
        .await
        .map_err(|e| {
            ConfigError::new(
                "server.listen",
                format!("cannot listen on {}: {e}", cfg.server.listen),
            )
        })?;
    let addr = listener.local_addr().unwrap_or(cfg.server.listen);
    let model = if cfg.upstream.base_url.is_empty() {
        "citestream-demo"
    } else {
        "YOUR-MODEL"
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "citestream serve: listening on http://{addr} (upstream: {}, search: {}, quota: {}, auth: {})",
        gateway.upstream_name(),
        cfg.search.provider,
        match cfg.quota.store {
            citestream_host::config::StoreName::Memory => "memory",
            citestream_host::config::StoreName::Redis => "redis",
        },
        match cfg.auth.mode {
            citestream_host::config::AuthMode::Open => "open",
            citestream_host::config::AuthMode::Keys => "keys",
        },
    );
    let _ = writeln!(
        out,
        "try:\n  curl -s http://{addr}/v1/chat/completions -H 'content-type: application/json' \
         -d '{{\"model\":\"{model}\",\"web_search\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"What is the capital of Portugal?\"}}]}}'"
    );
    let _ = out.flush();
    drop(out);
    init_logging();
    gateway.run(listener, signals, reloader, |_| {}).await;
    Ok(())
}

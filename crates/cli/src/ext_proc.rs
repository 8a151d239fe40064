//! `citestream ext-proc [--config FILE] [--listen ADDR]` (SPEC section 13):
//! the Envoy external processor of `citestream-ext-proc`.
//!
//! Loads the config as `citestream serve` does (`--listen` overrides
//! `server.listen` and `CITESTREAM_LISTEN`; `[upstream]` is not used: Envoy
//! routes the request), binds, prints `citestream ext-proc listening on
//! ADDR` on standard error, logs one JSON line per grounded request on
//! standard output, and serves until SIGTERM or SIGINT, then lets open
//! streams finish. SIGHUP reloads the config file. Exit status 2 for a usage or config error, 1 when the
//! server fails.

use citestream_ext_proc::Server;
use citestream_host::config::Config;
use citestream_host::reload::Reloader;

use crate::{Args, Failure};

const USAGE: &str = "usage: citestream ext-proc [--config FILE] [--listen ADDR]";

pub(crate) fn run(args: &[String]) -> Result<(), Failure> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return Ok(());
    }
    let args = Args::parse(args, &["--config", "--listen"])?;
    if let Some(extra) = args.positional.first() {
        return Err(Failure::Usage(format!("unexpected argument '{extra}'")));
    }
    let config = args.get("--config").map(std::path::PathBuf::from);
    let listen = args.get("--listen").map(str::to_owned);
    let load = move || {
        let mut cfg = Config::load(config.as_deref())?;
        if let Some(addr) = &listen {
            cfg.set_listen(addr)?;
        }
        Ok::<_, citestream_host::config::ConfigError>(cfg)
    };
    let cfg = load().map_err(|e| Failure::Usage(format!("config: {e}")))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut signals = crate::process::signals();
        let server = Server::bind(&cfg)
            .await
            .map_err(|e| Failure::Usage(e.to_string()))?;
        let addr = server
            .local_addr()
            .map_err(|e| Failure::Io(std::io::Error::other(e.to_string())))?;
        crate::process::init_logging();
        eprintln!("citestream ext-proc listening on {addr}");
        let reload = server.reload_task(Reloader::new(cfg.clone(), load));
        let stop = async move {
            use citestream_host::reload::Signal;
            loop {
                match signals.recv().await {
                    Some(Signal::Reload) => reload(),
                    _ => return,
                }
            }
        };
        server
            .run(stop)
            .await
            .map_err(|e| Failure::Io(std::io::Error::other(e.to_string())))
    })
}

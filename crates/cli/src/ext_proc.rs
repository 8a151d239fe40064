//! `citestream ext-proc [--config FILE] [--listen ADDR] [--metrics-listen ADDR]`:
//! the Envoy external processor of `citestream-ext-proc` (docs/envoy.md).
//!
//! Loads the config as `citestream serve` does (`--listen` overrides
//! `server.listen` and `CITESTREAM_LISTEN`, `--metrics-listen` overrides
//! `ext_proc.metrics_listen`; `[upstream]` is not used: Envoy routes the
//! request), binds both ports, prints one banner line on standard output
//! in the shape of `serve`'s (`citestream ext-proc: listening on
//! grpc://ADDR (metrics: http://ADDR/metrics | off, search: …, quota: …,
//! auth: …)`), logs JSON lines on standard output, and serves until
//! SIGTERM (after `server.drain_delay` of `NOT_SERVING`, still serving)
//! or SIGINT (at once), then lets open streams finish; SIGHUP reloads the
//! config file (the log level too). Exit status 2 for a
//! usage or config error (an address that cannot be bound too), 1 when
//! the server fails while running.

use std::io::Write;

use citestream_ext_proc::Server;

use crate::process::Failure;
use crate::process::ServerArgs;
use citestream_host::reload::{Reloader, Signal};

/// The flags of `ext-proc`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExtProcArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The HTTP address of /metrics, /healthz and /readyz, over
    /// `ext_proc.metrics_listen` (default 127.0.0.1:9464; "" turns it off).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
}

pub(crate) fn run(args: ExtProcArgs) -> Result<(), Failure> {
    let mut cfg = args.server.load()?;
    if let Some(addr) = &args.metrics_listen {
        cfg.set_metrics_listen(addr)
            .map_err(|e| Failure::Usage(e.to_string()))?;
    }
    let telemetry = crate::process::telemetry(&cfg)?;
    let result = crate::process::runtime()?.block_on(async {
        let mut signals = crate::process::signals();
        let server = Server::bind(&cfg)
            .await
            .map_err(|e| Failure::Usage(e.to_string()))?;
        let addr = server
            .local_addr()
            .map_err(|e| Failure::Io(std::io::Error::other(e.to_string())))?;
        let metrics = match server.metrics_addr() {
            Ok(Some(m)) => format!("http://{m}/metrics"),
            Ok(None) => "off".to_owned(),
            Err(e) => return Err(Failure::Io(std::io::Error::other(e.to_string()))),
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "citestream ext-proc: listening on grpc://{addr} (metrics: {metrics}, {})",
            crate::process::banner_details(&cfg),
        );
        let _ = out.flush();
        drop(out);
        let set_level = telemetry.level_control();
        let reload = server
            .reload_task(Reloader::new(cfg.clone(), args.server.loader()), move |c| {
                set_level(c.log.level)
            });
        let stop = async move {
            loop {
                match signals.recv().await {
                    Some(Signal::Reload) => reload(),
                    Some(s) => return s,
                    None => return Signal::Interrupt,
                }
            }
        };
        server
            .run(stop)
            .await
            .map_err(|e| Failure::Io(std::io::Error::other(e.to_string())))
    });
    telemetry.shutdown();
    result
}

//! `citestream ext-proc [--config FILE] [--listen ADDR]`:
//! the Envoy external processor of `citestream-ext-proc`.
//!
//! Loads the config as `citestream serve` does (`--listen` overrides
//! `server.listen` and `CITESTREAM_LISTEN`; `[upstream]` is not used: Envoy
//! routes the request), binds, prints `citestream ext-proc listening on
//! ADDR` on standard error, logs one JSON line per grounded request on
//! standard output, and serves until SIGTERM or SIGINT, then lets open
//! streams finish. Exit status 2 for a usage or config error, 1 when the
//! server fails.

use citestream_ext_proc::Server;

use crate::Failure;
use crate::process::ServerArgs;

/// The flags of `ext-proc`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExtProcArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(args: ExtProcArgs) -> Result<(), Failure> {
    let cfg = args.server.load()?;
    let telemetry = crate::process::telemetry(&cfg)?;
    let result = crate::process::runtime()?.block_on(async {
        let server = Server::bind(&cfg)
            .await
            .map_err(|e| Failure::Usage(e.to_string()))?;
        let addr = server
            .local_addr()
            .map_err(|e| Failure::Io(std::io::Error::other(e.to_string())))?;
        eprintln!("citestream ext-proc listening on {addr}");
        server
            .run(crate::process::shutdown_signal())
            .await
            .map_err(|e| Failure::Io(std::io::Error::other(e.to_string())))
    });
    telemetry.shutdown();
    result
}

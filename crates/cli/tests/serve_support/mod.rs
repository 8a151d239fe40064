//! Starting `citestream serve` in a test: on a free loopback port, with a
//! clean environment (no `CITESTREAM_*` overrides, no `RUST_LOG`), its
//! banner read.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

/// A started `serve`: the process, its standard output after the banner,
/// the banner's three lines, and the address it listens on.
#[derive(Debug)]
pub struct Started {
    pub child: Child,
    pub out: BufReader<ChildStdout>,
    pub banner: String,
    pub addr: String,
}

/// `citestream serve --listen 127.0.0.1:0 ARGS` with `env` set.
pub fn start(args: &[&str], env: &[(&str, &str)]) -> Started {
    let mut c = Command::new(env!("CARGO_BIN_EXE_citestream"));
    c.args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("CITESTREAM_LISTEN")
        .env_remove("CITESTREAM_UPSTREAM_URL")
        .env_remove("CITESTREAM_REDIS_URL")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    for _ in 0..3 {
        out.read_line(&mut banner).unwrap();
    }
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();
    Started {
        child,
        out,
        banner,
        addr,
    }
}

//! `citestream serve` as a process: start-up errors (one line naming the
//! key, exit 2), the banner, health, and SIGTERM (exit 0).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdout, Command};

mod serve_support;

use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_citestream"))
}

fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("citestream-cli-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn start_error(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = bin();
    c.arg("serve").args(args).env_remove("CITESTREAM_LISTEN");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

#[test]
fn start_up_errors_are_one_line_naming_the_key_with_status_2() {
    let p = config_file(
        "unknown.toml",
        "[server]\nlisten = \"127.0.0.1:0\"\ngrace = \"1s\"\n",
    );
    let e = start_error(&["--config", p.to_str().unwrap()], &[]);
    assert!(
        e.contains("server.grace") && e.contains("unknown field"),
        "{e}"
    );
    let p = config_file(
        "duration.toml",
        "[server]\nshutdown_grace = \"30 parsecs\"\n",
    );
    let e = start_error(&["--config", p.to_str().unwrap()], &[]);
    assert!(e.contains("server.shutdown_grace"), "{e}");
    let p = config_file(
        "var.toml",
        "[upstream]\napi_key = \"${CITESTREAM_TEST_UNSET_VAR}\"\n",
    );
    let e = start_error(&["--config", p.to_str().unwrap()], &[]);
    assert!(e.contains("CITESTREAM_TEST_UNSET_VAR"), "{e}");
    let e = start_error(&["--listen", "nowhere"], &[]);
    assert!(e.contains("--listen"), "{e}");
    let e = start_error(&[], &[("CITESTREAM_LISTEN", "x:y")]);
    assert!(e.contains("CITESTREAM_LISTEN"), "{e}");
    let e = start_error(&["--config", "/nonexistent/c.toml"], &[]);
    assert!(e.contains("/nonexistent/c.toml"), "{e}");
    let e = start_error(&["--bogus"], &[]);
    assert!(e.contains("--bogus"), "{e}");
}

#[test]
fn embedded_defaults_start_answer_and_exit_0_on_sigterm() {
    let serve_support::Started {
        mut child,
        mut out,
        banner,
        addr,
    } = serve_support::start(&[], &[]);
    assert!(banner.contains("upstream: demo"), "{banner}");
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    assert!(banner.contains(&format!("workers: {cores})")), "{banner}");
    assert!(
        banner.contains(&format!("curl -s http://{addr}/v1/chat/completions")),
        "{banner}"
    );

    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = r#"{"model":"citestream-demo","web_search":true,"messages":[{"role":"user","content":"What is the capital of Portugal?"}]}"#;
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("x-citestream-search: injected"), "{resp}");
    assert!(resp.contains("\"sources\":[{\"index\":1"), "{resp}");
    assert!(resp.contains("\"url_citation\""), "{resp}");

    let mut log = String::new();
    out.read_line(&mut log).unwrap();
    let v: serde_json::Value = serde_json::from_str(&log).unwrap();
    assert_eq!(v["path"], "/v1/chat/completions");
    assert_eq!(v["search"], "injected");

    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

fn start(args: &[&str], env: &[(&str, &str)]) -> (Child, BufReader<ChildStdout>, String) {
    let s = serve_support::start(args, env);
    (s.child, s.out, s.addr)
}

fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}

/// SIGTERM, then every log line the process wrote, parsed.
fn stop(
    mut child: std::process::Child,
    mut out: BufReader<std::process::ChildStdout>,
) -> Vec<serde_json::Value> {
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    rest.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

#[test]
fn log_level_comes_from_the_config_and_rust_log_overrides_it() {
    let warn = config_file("warn.toml", "[log]\nlevel = \"warn\"\n");
    let warn = warn.to_str().unwrap();
    // level = "warn": a 404 under /v1/ and the drain lines are info: nothing.
    let (child, out, addr) = start(&["--config", warn], &[]);
    assert!(get(&addr, "/v1/nothing-here").starts_with("HTTP/1.1 "));
    let lines = stop(child, out);
    assert!(lines.is_empty(), "{lines:?}");
    // RUST_LOG=info wins over the file: the request line and the drain lines.
    let (child, out, addr) = start(&["--config", warn], &[("RUST_LOG", "info")]);
    assert!(get(&addr, "/v1/nothing-here").starts_with("HTTP/1.1 "));
    let lines = stop(child, out);
    assert!(
        lines
            .iter()
            .all(|l| l["level"] == "INFO" || l["level"] == "WARN"),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l["path"] == "/v1/nothing-here"),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l["message"] == "draining"),
        "{lines:?}"
    );
    // A bad level or RUST_LOG is a start-up error naming it.
    let bad = config_file("badlevel.toml", "[log]\nlevel = \"loud\"\n");
    let e = start_error(&["--config", bad.to_str().unwrap()], &[]);
    assert!(e.contains("log.level"), "{e}");
    let e = start_error(&[], &[("RUST_LOG", "citestream=[")]);
    assert!(e.contains("RUST_LOG"), "{e}");
    let bad = config_file("otlp.toml", "[log]\notlp_endpoint = \"localhost:4318\"\n");
    let e = start_error(&["--config", bad.to_str().unwrap()], &[]);
    assert!(e.contains("log.otlp_endpoint"), "{e}");
}

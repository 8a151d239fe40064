//! `citestream events` (docs/reference/cli.md): one JSON line per dispatched
//! event, the same at every `--chunk-size`, from a FILE or standard input;
//! exit status 2 and a one-line message for bad usage.
//!
//! The binary exists only with the `cli` feature.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::sse_ref::{self, RefEvent};

const BIN: &str = env!("CARGO_BIN_EXE_citestream");

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/upstream")
}

fn fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        .collect();
    v.sort();
    assert!(v.len() >= 30, "fixtures missing");
    v
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run citestream");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let input = input.to_vec();
        // Write from another thread so a large output cannot dead-lock us.
        std::thread::spawn(move || pipe.write_all(&input).unwrap());
    }
    child.wait_with_output().unwrap()
}

/// Parses the output: every line a JSON object with exactly the string
/// members `type`, `data` and `id`, in that order and in the documented
/// `{"type": …, "data": …, "id": …}` layout (docs/reference/cli.md).
fn parse_output(out: &Output) -> Vec<RefEvent> {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::str::from_utf8(&out.stdout).expect("output is UTF-8");
    assert!(text.is_empty() || text.ends_with('\n'));
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect(line);
            let obj = v.as_object().expect(line);
            assert_eq!(obj.len(), 3, "{line}");
            let field = |k: &str| obj[k].as_str().expect(line).to_string();
            let ev = (field("type"), field("data"), field("id"));
            let canonical = format!(
                "{{\"type\": {}, \"data\": {}, \"id\": {}}}",
                serde_json::to_string(&ev.0).unwrap(),
                serde_json::to_string(&ev.1).unwrap(),
                serde_json::to_string(&ev.2).unwrap()
            );
            assert_eq!(line, canonical);
            ev
        })
        .collect()
}

#[test]
fn every_fixture_prints_the_reference_events_at_every_chunk_size() {
    for path in fixtures() {
        let input = std::fs::read(&path).unwrap();
        let want = sse_ref::parse(&input, None);
        assert!(!want.is_empty());
        let file = path.to_str().unwrap();
        let default = run(&["events", file], None);
        assert_eq!(parse_output(&default), want, "{file}");
        for size in ["1", "7", "4096"] {
            let out = run(&["events", "--chunk-size", size, file], None);
            assert_eq!(out.stdout, default.stdout, "{file} --chunk-size {size}");
            assert!(out.status.success() && out.stderr.is_empty());
        }
    }
}

#[test]
fn standard_input_gives_the_same_output() {
    for name in [
        "anthropic_basic_ping.sse",
        "openai_gpt41nano_text_usage.sse",
    ] {
        let path = fixture_dir().join(name);
        let input = std::fs::read(&path).unwrap();
        let from_file = run(&["events", path.to_str().unwrap()], None);
        let from_stdin = run(&["events"], Some(&input));
        let dash = run(&["events", "--chunk-size=3", "-"], Some(&input));
        assert_eq!(parse_output(&from_stdin), sse_ref::parse(&input, None));
        assert_eq!(from_stdin.stdout, from_file.stdout, "{name}");
        assert_eq!(dash.stdout, from_file.stdout, "{name}");
    }
}

#[test]
fn anthropic_event_types_are_printed() {
    let path = fixture_dir().join("anthropic_basic_ping.sse");
    let out = parse_output(&run(&["events", path.to_str().unwrap()], None));
    let types: Vec<&str> = out.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(types.first(), Some(&"message_start"));
    assert!(types.contains(&"ping"));
    // The recorded body ends `event: message_stop\ndata: {...}\n` without
    // the blank line, so `message_stop` is not dispatched.
    assert_eq!(types.last(), Some(&"message_delta"));
    assert!(!types.contains(&"message_stop"));
}

#[test]
fn last_event_id_seeds_the_id() {
    let input = b"data: a\n\nid: 2\ndata: b\n\nid\ndata: c\n\n";
    for args in [
        &["events", "--last-event-id", "7"][..],
        &["events", "--last-event-id=7"],
        &["events", "--chunk-size", "1", "--last-event-id", "7"],
    ] {
        let out = parse_output(&run(args, Some(input)));
        let ids: Vec<&str> = out.iter().map(|e| e.2.as_str()).collect();
        assert_eq!(ids, ["7", "2", ""], "{args:?}");
        assert_eq!(out, sse_ref::parse(input, Some("7")));
    }
    let out = parse_output(&run(&["events"], Some(input)));
    assert_eq!(out[0].2, "");
}

#[test]
fn odd_bytes_are_decoded_with_replacement_and_escaped() {
    let input =
        b"\xEF\xBB\xBFevent: \xC3\ndata: \xFF\0\"\\\r\rdata: \xE2\x82\xAC\t\n\n: c\n\ndata: cut";
    for size in ["1", "2", "1000"] {
        let out = run(&["events", "--chunk-size", size], Some(input));
        let events = parse_output(&out);
        assert_eq!(
            events,
            [
                (
                    "\u{FFFD}".to_string(),
                    "\u{FFFD}\0\"\\".to_string(),
                    String::new()
                ),
                (
                    "message".to_string(),
                    "\u{20AC}\t".to_string(),
                    String::new()
                ),
            ],
            "--chunk-size {size}"
        );
        assert_eq!(events, sse_ref::parse(input, None));
    }
}

#[test]
fn empty_input_prints_nothing() {
    for input in [&b""[..], b"data: unterminated", b": only a comment\n\n"] {
        let out = run(&["events"], Some(input));
        assert!(out.status.success());
        assert!(
            out.stdout.is_empty(),
            "{:?}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// Exit status 2, nothing on standard output, one line on standard error.
fn assert_usage_error(args: &[&str]) {
    let out = run(args, Some(b"data: x\n\n"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
    assert!(
        stderr.ends_with('\n') && stderr.matches('\n').count() == 1 && stderr.trim().len() > 10,
        "{args:?}: stderr is not one line: {stderr:?}"
    );
}

#[test]
fn usage_unknown_option() {
    assert_usage_error(&["events", "--bogus"]);
    assert_usage_error(&["events", "--bogus=1"]);
}

#[test]
fn usage_chunk_size_zero() {
    assert_usage_error(&["events", "--chunk-size", "0"]);
    assert_usage_error(&["events", "--chunk-size=0"]);
}

#[test]
fn usage_chunk_size_not_a_number() {
    assert_usage_error(&["events", "--chunk-size", "x"]);
    assert_usage_error(&["events", "--chunk-size", "-1"]);
    assert_usage_error(&["events", "--chunk-size", "1.5"]);
    assert_usage_error(&["events", "--chunk-size", ""]);
}

#[test]
fn usage_missing_value() {
    assert_usage_error(&["events", "--chunk-size"]);
    assert_usage_error(&["events", "--last-event-id"]);
}

#[test]
fn usage_two_files() {
    let a = fixture_dir().join("anthropic_basic_ping.sse");
    let a = a.to_str().unwrap();
    assert_usage_error(&["events", a, a]);
}

#[test]
fn usage_missing_file() {
    let missing = fixture_dir().join("no_such_stream.sse");
    assert_usage_error(&["events", missing.to_str().unwrap()]);
}

#[test]
fn usage_no_or_unknown_command() {
    assert_usage_error(&[]);
    assert_usage_error(&["evnets"]);
}

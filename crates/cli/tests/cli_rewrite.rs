//! `citestream rewrite` as other tools drive it (docs/reference/cli.md): output,
//! chunking invariance, body detection, and exit codes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_citestream");
/// The workspace root: fixtures and examples live there.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(ROOT)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn rewrite(extra: &[&str], file: &str) -> Output {
    let mut args = vec!["rewrite", "--sources", "examples/lisbon/sources.json"];
    args.extend_from_slice(extra);
    args.push(file);
    run(&args, None)
}

#[test]
fn lisbon_stream_carries_the_seed_annotations() {
    let out = rewrite(&[], "examples/lisbon/upstream.sse");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    let ann = events
        .iter()
        .position(|e| e.contains("\"annotations\""))
        .unwrap();
    assert!(
        events[ann + 1].contains("\"finish_reason\":\"stop\""),
        "annotations right before the finish chunk"
    );
    assert!(events[ann].contains(r#""start_index":66,"end_index":69"#));
    assert!(events[ann].contains(r#""start_index":137,"end_index":140"#));
    assert_eq!(text.matches("\"sources\":").count(), 1);
    assert!(
        events[ann + 1].contains("https://news.example/portugal/weather-week"),
        "uncited source listed"
    );
    assert_eq!(events.last().unwrap(), &"data: [DONE]");
}

#[test]
fn output_does_not_depend_on_chunking() {
    let whole = rewrite(&[], "examples/lisbon/upstream.sse").stdout;
    for n in ["1", "2", "7", "4096"] {
        let out = rewrite(&["--chunk-size", n], "examples/lisbon/upstream.sse");
        assert!(out.status.success());
        assert_eq!(out.stdout, whole, "--chunk-size {n}");
    }
    let fixture = "tests/fixtures/upstream/openai_gpt4o_n3_interleaved_choices.sse";
    let whole = rewrite(&["--n", "3", "--dialect", "both"], fixture).stdout;
    let bytewise = rewrite(
        &["--n", "3", "--dialect", "both", "--chunk-size", "1"],
        fixture,
    )
    .stdout;
    assert_eq!(bytewise, whole);
    assert_eq!(
        String::from_utf8_lossy(&whole)
            .matches("\"citations\":")
            .count(),
        1
    );
}

#[test]
fn whole_body_is_detected_after_leading_whitespace() {
    let body = std::fs::read(format!("{ROOT}/examples/lisbon/upstream.json")).unwrap();
    let mut padded = b" \n\t".to_vec();
    padded.extend_from_slice(&body);
    for chunk in [None, Some("1"), Some("3")] {
        let mut args = vec![
            "rewrite",
            "--sources",
            "examples/lisbon/sources.json",
            "--offsets",
            "utf16",
        ];
        if let Some(c) = chunk {
            args.extend_from_slice(&["--chunk-size", c]);
        }
        let out = run(&args, Some(&padded));
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let a = &v["choices"][0]["message"]["annotations"];
        assert_eq!(a[0]["url_citation"]["start_index"], 66);
        assert_eq!(a[1]["url_citation"]["end_index"], 140);
        assert_eq!(v["sources"].as_array().unwrap().len(), 3);
    }
}

#[test]
fn messages_endpoint_adds_sources_to_message_delta_only() {
    let out = rewrite(
        &["--endpoint", "messages", "--dialect", "citations"],
        "tests/fixtures/upstream/anthropic_basic_ping.sse",
    );
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let upstream = std::fs::read_to_string(format!(
        "{ROOT}/tests/fixtures/upstream/anthropic_basic_ping.sse"
    ))
    .unwrap();
    for (got, want) in text.split("\n\n").zip(upstream.split("\n\n")) {
        if want.starts_with("event: message_delta") {
            assert!(got.starts_with("event: message_delta\n"));
            assert!(got.contains("\"citations\":[{\"cited_text\":"));
        } else {
            assert_eq!(got, want);
        }
    }
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let cases: &[&[&str]] = &[
        &["rewrite", "examples/lisbon/upstream.sse"],
        &[
            "rewrite",
            "--sources",
            "nope.json",
            "examples/lisbon/upstream.sse",
        ],
        &[
            "rewrite",
            "--sources",
            "examples/lisbon/upstream.json",
            "examples/lisbon/upstream.sse",
        ],
        &[
            "rewrite",
            "--sources",
            "examples/lisbon/sources.json",
            "--dialect",
            "x",
        ],
        &[
            "rewrite",
            "--sources",
            "examples/lisbon/sources.json",
            "--endpoint",
            "embeddings",
        ],
        &[
            "rewrite",
            "--sources",
            "examples/lisbon/sources.json",
            "--offsets",
            "words",
        ],
        &[
            "rewrite",
            "--sources",
            "examples/lisbon/sources.json",
            "--n",
            "0",
        ],
        &[
            "rewrite",
            "--sources",
            "examples/lisbon/sources.json",
            "--chunk-size",
            "-3",
        ],
        &[
            "rewrite",
            "--sources",
            "examples/lisbon/sources.json",
            "--bogus",
            "1",
        ],
        &[
            "rewrite",
            "--sources",
            "examples/lisbon/sources.json",
            "a",
            "b",
        ],
        &["rewrite", "--sources"],
        &["frobnicate"],
        &[],
    ];
    for args in cases {
        let out = run(args, Some(b""));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn sources_file_must_be_an_array_of_objects() {
    let dir = std::env::temp_dir().join(format!("citestream-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for bad in ["{}", "[1,2]", "[{\"title\": 5}]", "not json"] {
        let p = dir.join("s.json");
        std::fs::write(&p, bad).unwrap();
        let out = run(
            &[
                "rewrite",
                "--sources",
                p.to_str().unwrap(),
                "examples/lisbon/upstream.sse",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

//! `citestream search [--config FILE] QUERY`: the bundled corpus from any
//! directory, a config file's provider, and exit codes.

use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_citestream");

/// Runs the binary in the system temp dir (no project files around it).
fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(std::env::temp_dir())
        .env_remove("CITESTREAM_LISTEN")
        .env_remove("CITESTREAM_UPSTREAM_URL")
        .env_remove("CITESTREAM_REDIS_URL")
        .output()
        .unwrap()
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!(
        "citestream-cli-search-{}-{name}",
        std::process::id()
    ));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn bundled_corpus_answers_the_lisbon_question() {
    let out = run(&["search", "weather in Lisbon this weekend"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sources = v.as_array().unwrap();
    assert!(!sources.is_empty() && sources.len() <= 5);
    assert!(
        sources
            .iter()
            .any(|s| s["title"] == "Portugal - The World Factbook"
                && s["text"].as_str().unwrap().contains("Capital: Lisbon"))
    );
    for s in sources {
        assert!(s["url"].is_string());
        // Absent fields are left out, never null.
        assert!(s.as_object().unwrap().values().all(Value::is_string));
    }
}

#[test]
fn config_file_selects_the_provider() {
    let sources = temp_file(
        "sources.json",
        r#"[{"title":"Fixed","url":"https://example.org/fixed","text":"always this"}]"#,
    );
    let config = temp_file(
        "static.toml",
        &format!(
            "[search]\nprovider = \"static\"\nmax_results = 1\n[search.static]\npath = {:?}\n",
            sources.display().to_string()
        ),
    );
    let out = run(&["search", "--config", config.to_str().unwrap(), "anything"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!([{"title":"Fixed","url":"https://example.org/fixed","text":"always this"}])
    );
    let _ = std::fs::remove_file(sources);
    let _ = std::fs::remove_file(config);
}

#[test]
fn errors_and_exit_codes() {
    // No query: usage error.
    let out = run(&["search"]);
    assert_eq!(out.status.code(), Some(2));
    // A provider that cannot start: exit 2, one line naming the key.
    let config = temp_file("bad.toml", "[search]\nprovider = \"http\"\n");
    let out = run(&["search", "--config", config.to_str().unwrap(), "q"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("search.http.url"), "{err}");
    // A failed search (nothing listens on the port): exit 1, the reason on stderr.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(&config, format!("[search]\nprovider = \"searxng\"\n[search.searxng]\nurl = \"http://127.0.0.1:{port}\"\n")).unwrap();
    let out = run(&["search", "--config", config.to_str().unwrap(), "q"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("search failed (transport)"), "{err}");
    assert_eq!(err.lines().count(), 1, "the failure is printed once: {err}");
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_file(config);
}

#[test]
fn a_conversation_file_is_searched_by_the_query_formed_from_it() {
    let conv = temp_file(
        "conv.json",
        r#"{"model":"m","messages":[{"role":"user","content":"Tell me about Portugal"},{"role":"assistant","content":"Portugal is in Europe."},{"role":"user","content":"What is its capital?"}]}"#,
    );
    let out = run(&["search", "--conversation", conv.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The question refers back: the earlier turns' subject is carried.
    assert_eq!(err.trim(), "query: What is its capital? Portugal");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|s| s["text"].as_str().unwrap().contains("capital: Lisbon")),
        "{v}"
    );
    // QUERY and --conversation together, or an unreadable file: exit 2.
    let out = run(&["search", "--conversation", conv.to_str().unwrap(), "q"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["search", "--conversation", "/nonexistent/conv.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    let _ = std::fs::remove_file(conv);
}

//! The command line itself: `--help` on every command (usage and a
//! sentence per flag, exit 0), `--version`, `hash-key`, and the exit
//! status and one-line message of usage errors.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_citestream");

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("CITESTREAM_LISTEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// Every command with the flags its help must describe.
const COMMANDS: &[(&str, &[&str])] = &[
    ("events", &["--chunk-size", "--last-event-id", "[FILE]"]),
    (
        "rewrite",
        &[
            "--sources",
            "--endpoint",
            "--dialect",
            "--offsets",
            "--n",
            "--chunk-size",
            "[FILE]",
        ],
    ),
    ("search", &["--config", "--conversation", "[QUERY]"]),
    ("serve", &["--config", "--listen"]),
    ("ext-proc", &["--config", "--listen", "--metrics-listen"]),
    ("hash-key", &[]),
];

#[test]
fn every_command_has_help_with_a_sentence_per_flag() {
    for &(cmd, flags) in COMMANDS {
        for form in [&[cmd, "--help"][..], &[cmd, "-h"], &["help", cmd]] {
            let out = run(form, b"");
            let help = String::from_utf8(out.stdout).unwrap();
            assert_eq!(out.status.code(), Some(0), "{form:?}: {help}");
            assert!(out.stderr.is_empty(), "{form:?}");
            assert!(
                help.contains(&format!("Usage: citestream {cmd}")),
                "{form:?}: {help}"
            );
            for flag in flags {
                // The flag's line carries a description after it.
                let line = help
                    .lines()
                    .find(|l| l.trim_start().starts_with(flag))
                    .unwrap_or_else(|| panic!("{cmd}: no line for {flag} in {help}"));
                let described = line.trim_start()[flag.len()..]
                    .split_once("  ")
                    .is_some_and(|(_, d)| d.trim().split(' ').count() >= 3);
                assert!(described, "{cmd}: {flag} has no sentence: {line:?}");
            }
        }
    }
    let out = run(&["--help"], b"");
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    for &(cmd, _) in COMMANDS {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(cmd)),
            "{cmd} missing from {help}"
        );
    }
}

#[test]
fn version_prints_the_package_version() {
    for flag in ["--version", "-V"] {
        let out = run(&[flag], b"");
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("citestream {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn hash_key_prints_the_stored_form_that_auth_accepts() {
    let want = citestream_host::auth::hash_key("sk-test-key");
    assert!(want.starts_with("sha256:") && want.len() == 7 + 64);
    // Surrounding whitespace is not part of the key (as in a header).
    for input in [&b"sk-test-key"[..], b"sk-test-key\n", b"  sk-test-key\r\n"] {
        let out = run(&["hash-key"], input);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{want}\n"));
    }
    // The printed form is what `[[accounts]] keys` takes: a config with it
    // authenticates the key.
    let toml = format!("[auth]\nmode = \"keys\"\n[[accounts]]\nid = \"a\"\nkeys = [\"{want}\"]\n");
    let cfg = citestream_host::config::Config::from_toml_with_env(&toml, &|_| None).unwrap();
    let accounts = citestream_host::auth::Accounts::from_config(&cfg).unwrap();
    let account = accounts
        .authenticate(Some(b"Bearer sk-test-key"), None)
        .unwrap();
    assert_eq!(account.id(), "a");
    for bad in [&b""[..], b" \n", b"\xff\xfe"] {
        let out = run(&["hash-key"], bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(out.stdout.is_empty());
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    }
}

#[test]
fn usage_errors_are_one_line_with_status_2_pointing_at_the_help() {
    let cases: &[(&[&str], &str, &str)] = &[
        (&[], "missing command", "citestream --help"),
        (&["frobnicate"], "frobnicate", "citestream --help"),
        (&["serve", "--bogus"], "--bogus", "citestream serve --help"),
        (&["search"], "QUERY", "citestream search --help"),
        (
            &["rewrite", "--sources", "s.json", "--endpoint", "nope"],
            "possible values: chat, messages",
            "citestream rewrite --help",
        ),
        (
            &["rewrite", "--sources", "s.json", "--dialect", "nope"],
            "possible values: sources, citations, both",
            "citestream rewrite --help",
        ),
        (
            &["events", "--chunk-size", "0"],
            "--chunk-size",
            "citestream events --help",
        ),
        (
            &["hash-key", "extra"],
            "extra",
            "citestream hash-key --help",
        ),
    ];
    for &(args, names, hint) in cases {
        let out = run(args, b"");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("citestream: "), "{args:?}: {err}");
        assert!(err.contains(names) && err.contains(hint), "{args:?}: {err}");
    }
}

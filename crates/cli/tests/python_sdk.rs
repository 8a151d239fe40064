//! The official Python SDKs (`openai`, `anthropic`) as real clients of
//! rewritten responses.
//!
//! Each test runs one script from `tests/python/` with the interpreter of a
//! virtualenv that this file creates under the cargo target dir and fills
//! from PyPI with `tests/python/requirements.txt`. The scripts rewrite the
//! upstream fixtures with the `citestream` binary, serve the bytes from a
//! loopback HTTP server and read them with the SDK clients.
//!
//! The virtualenv is built once per `requirements.txt` content and Python
//! build: in a private temporary directory, then renamed into place
//! atomically, so parallel tests (threads here, or processes under
//! nextest) never see a half-built one. A missing `python3`, `venv` or
//! `pip`, or a failed install, fails the tests: they never skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// The workspace root: fixtures and examples live there.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const REQUIREMENTS: &str = include_str!("python/requirements.txt");

/// The interpreter used to create the virtualenv: `$CITESTREAM_TEST_PYTHON`
/// or `python3` from `PATH`.
fn base_python() -> String {
    std::env::var("CITESTREAM_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// 64-bit FNV-1a, to key the virtualenv directory (stable across Rust
/// versions, unlike `DefaultHasher`).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn venv_interpreter(venv: &Path) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    }
}

fn describe(out: &Output) -> String {
    let tail = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    format!(
        "{}\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
        out.status,
        tail(&out.stdout),
        tail(&out.stderr)
    )
}

fn run(cmd: &mut Command, what: &str) -> Result<Output, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: could not run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!("{what} failed ({cmd:?}): {}", describe(&out)))
    }
}

/// Creates (or finds) the virtualenv and returns its interpreter.
fn setup_venv() -> Result<PathBuf, String> {
    let python = base_python();
    // Who the base interpreter is: a venv links to it, so a different
    // Python gets a different venv.
    let ident = run(
        Command::new(&python).args([
            "-c",
            "import sys; print(sys.version); print(sys.executable); import venv, ensurepip",
        ]),
        "checking the Python interpreter",
    )
    .map_err(|e| {
        format!(
            "the Python SDK tests need Python 3 with the venv and ensurepip modules \
             (Debian: apt-get install python3 python3-venv; or set CITESTREAM_TEST_PYTHON): {e}"
        )
    })?;
    let key = fnv1a(&[REQUIREMENTS.as_bytes(), &ident.stdout]);
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python-sdk");
    let venv = root.join(format!("venv-{key:016x}"));
    let ready = venv.join(".citestream-ready");
    if ready.is_file() {
        return Ok(venv_interpreter(&venv));
    }
    std::fs::create_dir_all(&root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = root.join(format!("tmp-{}-{nanos}", std::process::id()));
    let result = build_venv(&python, &tmp).and_then(|()| {
        std::fs::write(tmp.join(".citestream-ready"), REQUIREMENTS)
            .map_err(|e| format!("writing the ready marker: {e}"))?;
        match std::fs::rename(&tmp, &venv) {
            Ok(()) => Ok(()),
            // Another process finished first: use its venv.
            Err(_) if ready.is_file() => Ok(()),
            Err(e) => Err(format!(
                "moving {} to {}: {e}",
                tmp.display(),
                venv.display()
            )),
        }
    });
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result.map(|()| venv_interpreter(&venv))
}

fn build_venv(python: &str, dir: &Path) -> Result<(), String> {
    eprintln!(
        "python_sdk: creating a virtualenv in {} and installing tests/python/requirements.txt from PyPI",
        dir.display()
    );
    run(
        Command::new(python).arg("-m").arg("venv").arg(dir),
        "creating the virtualenv (python3 -m venv)",
    )?;
    let requirements = Path::new(MANIFEST_DIR).join("tests/python/requirements.txt");
    let out = run(
        Command::new(venv_interpreter(dir))
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "--quiet",
                "-r",
            ])
            .arg(&requirements)
            .env("PIP_NO_INPUT", "1"),
        "pip install -r tests/python/requirements.txt",
    )?;
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// The virtualenv's interpreter; set up once per test binary.
fn venv_python() -> &'static Path {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match VENV.get_or_init(setup_venv) {
        Ok(p) => p,
        Err(e) => panic!("Python SDK test setup failed: {e}"),
    }
}

/// Runs `tests/python/<script>` with the venv's interpreter; fails the test
/// with the script's output when it exits non-zero.
fn run_script(script: &str) {
    let python = venv_python();
    let path = Path::new(MANIFEST_DIR).join("tests/python").join(script);
    let out = Command::new(python)
        .arg(&path)
        .current_dir(ROOT)
        .env("CITESTREAM_BIN", env!("CARGO_BIN_EXE_citestream"))
        .env("CITESTREAM_ROOT", ROOT)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        // The SDKs talk to 127.0.0.1 only: never through a proxy.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .output()
        .unwrap_or_else(|e| panic!("could not run {}: {e}", path.display()));
    // Shown by `cargo test -- --nocapture`, and for a failing test.
    println!("{}", String::from_utf8_lossy(&out.stdout));
    println!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "tests/python/{script} failed: {}",
        describe(&out)
    );
}

/// `openai` SDK: `chat.completions.create(stream=True)` and the
/// `chat.completions.stream()` helper on every rewritten chat fixture, the
/// Lisbon example in every dialect and offset unit, synthesized streams.
#[test]
fn openai_sdk_streams() {
    run_script("openai_streams.py");
}

/// `openai` SDK: non-streamed `chat.completion` bodies.
#[test]
fn openai_sdk_bodies() {
    run_script("openai_bodies.py");
}

/// `anthropic` SDK: `messages.create(stream=True)` and the
/// `messages.stream()` helper on every rewritten `anthropic_*` fixture.
#[test]
fn anthropic_sdk_streams() {
    run_script("anthropic_streams.py");
}

/// `anthropic` SDK: non-streamed `message` bodies and an error body.
#[test]
fn anthropic_sdk_bodies() {
    run_script("anthropic_bodies.py");
}

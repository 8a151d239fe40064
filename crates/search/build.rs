//! Embeds the bundled corpus in the crate: writes
//! `$OUT_DIR/bundled_corpus.rs`, a sorted list of `(name, include_str!(absolute
//! path))` pairs read by `src/local/bundled.rs`.
//!
//! Two parts:
//! * `corpus/data/**` (`.md`, `.txt`, `.jsonl`), named by their path under
//!   `corpus/data` (`factbook/portugal.md`);
//! * the project's documentation, `docs/*.md` at the repository root,
//!   embedded straight from there (no copy, so the index cannot go stale),
//!   named `docs/<file>.md`.
//!
//! Both folders are watched with `cargo:rerun-if-changed` (cargo scans a
//! watched folder for any change, so an added, edited or removed file
//! re-runs this script).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = manifest.join("corpus").join("data");
    let docs = manifest.join("..").join("..").join("docs");
    let docs = docs.canonicalize().unwrap_or(docs);
    println!("cargo:rerun-if-changed={}", data.display());
    println!("cargo:rerun-if-changed={}", docs.display());

    let mut entries = Vec::new();
    let mut files = Vec::new();
    collect(&data, &mut files);
    for f in files {
        let rel = f
            .strip_prefix(&data)
            .expect("under corpus/data")
            .to_string_lossy()
            .replace('\\', "/");
        entries.push((rel, f));
    }
    let docs_files = std::fs::read_dir(&docs).unwrap_or_else(|e| {
        panic!(
            "{}: the project's docs are part of the bundled corpus: {e}",
            docs.display()
        )
    });
    for e in docs_files.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_file() && name.ends_with(".md") && !name.starts_with('.') {
            entries.push((format!("docs/{name}"), p));
        }
    }
    entries.sort();

    let mut out = String::from(
        "/// The bundled corpus: (name, contents); names are paths under\n/// `corpus/data`, or `docs/<file>.md` for the project's docs.\npub(super) static FILES: &[(&str, &str)] = &[\n",
    );
    for (rel, f) in &entries {
        writeln!(
            out,
            "    ({rel:?}, include_str!({:?})),",
            f.display().to_string()
        )
        .expect("write to string");
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("bundled_corpus.rs");
    std::fs::write(dest, out).expect("write bundled_corpus.rs");
}

/// The `.md`, `.txt` and `.jsonl` files under `dir`, recursively.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "md" || x == "jsonl" || x == "txt")
        {
            out.push(p);
        }
    }
}

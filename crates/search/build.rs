//! Embeds the bundled corpus (`corpus/data/**`) in the crate: writes
//! `$OUT_DIR/bundled_corpus.rs`, a sorted list of `(relative path,
//! include_str!(absolute path))` pairs read by `src/local/bundled.rs`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join("data");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    let mut out = String::from(
        "/// The bundled corpus: (path under corpus/data, contents).\npub(super) static FILES: &[(&str, &str)] = &[\n",
    );
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let rel = f
            .strip_prefix(&root)
            .expect("under root")
            .to_string_lossy()
            .replace('\\', "/");
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

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            println!("cargo:rerun-if-changed={}", p.display());
            collect(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "md" || x == "jsonl" || x == "txt")
        {
            out.push(p);
        }
    }
}

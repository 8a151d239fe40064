//! The bundled corpus, embedded at build time by `build.rs` from
//! `crates/search/corpus/data/` (provenance and licence:
//! `crates/search/corpus/README.md`).

include!(concat!(env!("OUT_DIR"), "/bundled_corpus.rs"));

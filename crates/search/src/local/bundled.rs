//! The bundled corpus, embedded at build time by `build.rs`: the Factbook
//! profiles of `crates/search/corpus/data/` (provenance and licence:
//! `crates/search/corpus/README.md`) and the project's documentation,
//! `docs/*.md` at the repository root, read from there at build time.
//!
//! The docs carry no front matter; their metadata comes from here: the
//! title is the first `#` heading (as for any markdown file), the URL
//! `docs/<file>.md` (plus `#` and the heading's anchor per passage), the
//! author [`DOCS_AUTHOR`].

use crate::Source;

include!(concat!(env!("OUT_DIR"), "/bundled_corpus.rs"));

/// The author of the project's docs passages.
pub(super) const DOCS_AUTHOR: &str = "citestream contributors";

/// The passages of every bundled file, in name order.
pub(super) fn passages() -> Vec<Source> {
    let mut passages = Vec::new();
    for (name, text) in FILES {
        let start = passages.len();
        if name.starts_with("docs/") {
            super::parse::document(&mut passages, name, name, text);
            for p in &mut passages[start..] {
                p.author.get_or_insert_with(|| DOCS_AUTHOR.to_owned());
            }
        } else {
            super::parse::document(&mut passages, name, &format!("bundled:{name}"), text);
        }
    }
    passages
}

//! The `local` provider: BM25 over a folder of documents, or over the
//! bundled corpus embedded in the binary (docs/search.md).
//!
//! The index is built once, in memory, when the provider is made
//! ([`LocalIndex::from_dir`], [`LocalIndex::bundled`]); searching is
//! synchronous and allocation-light. Tokenizing (stemming, English stop
//! words) and the BM25 term weights are the `bm25` crate's `Embedder`; the
//! inverted index, idf and top-k selection are [`score`]'s (the crate's
//! scores, bit for bit, without its `Scorer`'s per-query cost). This module
//! turns files into passages ([`parse`]) and passages back into
//! [`Source`]s.
//!
//! Each passage is indexed as its title, heading and text together, so a
//! country's name in the title counts for every passage about it.
//!
//! A passage whose file names no `url` gets `url_base` (default
//! [`DEFAULT_URL_BASE`], `search.local.url_base`) + the file's path
//! relative to the folder (`/`-separated; space, `#`, `%` and `?`
//! escaped) + `#` + its heading's anchor: no path of the server's
//! filesystem reaches a client.
//!
//! Files: see [`parse`] for the formats. Files with other extensions and
//! hidden files (`.name`) are ignored; a file that cannot be read (no
//! permission, not UTF-8, a dangling link) is skipped with a `warn` log
//! naming it. A folder with no passages at all is a start-up error.
//!
//! Scale (BENCHMARKS.md, release build, 2-vCPU VM at load average about 1,
//! 2026-12-01): the bundled corpus (1,318 passages) builds in about
//! 0.15–0.23 s with 8 MiB and answers in 7–11 µs p50 / 23–31 µs p99; a
//! generated 100 MB folder (96,383 passages) takes about 13–14 s and
//! 419 MiB to build and answers in 37–39 µs p50 / 0.31–0.36 ms p99 per
//! query. Building (the crate's tokenizer runs over every passage twice:
//! once to fit the average length, once to embed) is the cost at that size:
//! it is start-up time, so the index suits folders of up to about 100 MB.

mod bundled;
mod parse;
mod score;

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use bm25::{Embedder, EmbedderBuilder, Language};

use crate::config::DEFAULT_URL_BASE;
use crate::{BoxFuture, FormedQuery, Provider, SearchError, SetupError, Source};

/// A BM25 index over passages.
pub struct LocalIndex {
    passages: Vec<Source>,
    embedder: Embedder<u32>,
    postings: score::Postings,
    /// The lowercase words of the distinct passage titles: how many titles
    /// have each.
    title_words: crate::query::WordCounts,
    /// A word in at most this many distinct titles names a subject.
    title_limit: u32,
}

impl fmt::Debug for LocalIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalIndex")
            .field("passages", &self.passages.len())
            .finish_non_exhaustive()
    }
}

impl LocalIndex {
    /// The index over the bundled corpus (CIA World Factbook passages and
    /// the project's `docs/`; see `crates/search/corpus/README.md`).
    #[must_use]
    pub fn bundled() -> LocalIndex {
        LocalIndex::new(bundled::passages())
    }

    /// The index over the documents under `dir` (recursively), with the
    /// default `url_base` ([`DEFAULT_URL_BASE`]).
    ///
    /// # Errors
    ///
    /// A [`SetupError`] when `dir` cannot be listed or yields no passages.
    pub fn from_dir(dir: &Path) -> Result<LocalIndex, SetupError> {
        LocalIndex::from_dir_with_url_base(dir, DEFAULT_URL_BASE)
    }

    /// The index over the documents under `dir` (recursively); a file
    /// without a `url` of its own is published as `url_base` + its path
    /// relative to `dir` (see the module docs).
    ///
    /// # Errors
    ///
    /// A [`SetupError`] when `dir` cannot be listed or yields no passages.
    pub fn from_dir_with_url_base(dir: &Path, url_base: &str) -> Result<LocalIndex, SetupError> {
        let shown = dir.display();
        let mut files = Vec::new();
        walk(dir, &mut files).map_err(|e| {
            SetupError::new(format!(
                "search.local.path {shown}: cannot read the folder: {e}"
            ))
        })?;
        files.sort();
        let mut passages = Vec::new();
        for file in &files {
            let name = file.display().to_string();
            let text = match std::fs::read_to_string(file) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(file = %name, error = %e, "local search: skipping unreadable file");
                    continue;
                }
            };
            // `walk` yields `dir`-joined paths; the fallback is the name alone.
            let relative = file
                .strip_prefix(dir)
                .unwrap_or_else(|_| Path::new(file.file_name().unwrap_or_default()));
            let url = file_url(url_base, relative);
            parse::document(&mut passages, &name, &url, &text);
        }
        if passages.is_empty() {
            return Err(SetupError::new(format!(
                "search.local.path {shown}: no passages found (the folder has no readable .md, .markdown, .txt or .jsonl documents with text)"
            )));
        }
        Ok(LocalIndex::new(passages))
    }

    /// The index over `passages` as given (each one's `title`, `heading`
    /// and `text` are searched).
    #[must_use]
    pub fn new(passages: Vec<Source>) -> LocalIndex {
        let texts: Vec<String> = passages.iter().map(indexed_text).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let embedder = EmbedderBuilder::<u32>::with_fit_to_corpus(Language::English, &refs).build();
        let postings = score::Postings::new(refs.iter().map(|t| embedder.embed(t)));
        let titles: HashSet<&str> = passages.iter().filter_map(|p| p.title.as_deref()).collect();
        let title_words = crate::query::word_counts(titles.iter().copied());
        let title_limit = u32::try_from(titles.len() / 20).unwrap_or(u32::MAX).max(2);
        LocalIndex {
            passages,
            embedder,
            postings,
            title_words,
            title_limit,
        }
    }

    /// The number of passages indexed.
    #[must_use]
    pub fn len(&self) -> usize {
        self.passages.len()
    }

    /// The passages indexed, in index order.
    #[must_use]
    pub fn passages(&self) -> &[Source] {
        &self.passages
    }

    /// True when no passage is indexed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.passages.is_empty()
    }

    /// The `limit` best passages for `query`, best first (only passages
    /// sharing at least one term with the query; equal scores in index
    /// order).
    #[must_use]
    pub fn search(&self, query: &str, limit: usize) -> Vec<Source> {
        let q = self.embedder.embed(query);
        self.postings
            .top(&q, limit)
            .into_iter()
            .filter_map(|h| self.passages.get(h.doc as usize).cloned())
            .collect()
    }

    /// How strongly `word` (lowercase) names a subject of the index (see
    /// [`Provider::subject`]): 0.9 for a word of the passage titles that
    /// few titles share (at most one in twenty, or two: a country's name, a
    /// document's subject), else 0 (a rare word no title has, such as
    /// "tropical" or "practiced", is a detail, not a subject). One hash
    /// lookup.
    #[must_use]
    pub fn subject(&self, word: &str) -> f32 {
        match self.title_words.get(word) {
            Some(&n) if n <= self.title_limit => 0.9,
            _ => 0.0,
        }
    }
}

impl Provider for LocalIndex {
    fn name(&self) -> &'static str {
        "local"
    }

    fn search<'a>(
        &'a self,
        query: &'a FormedQuery,
        max_results: usize,
    ) -> BoxFuture<'a, Result<Vec<Source>, SearchError>> {
        Box::pin(std::future::ready(Ok(LocalIndex::search(
            self,
            query.text(),
            max_results,
        ))))
    }

    fn subject(&self, word: &str) -> Option<f32> {
        Some(LocalIndex::subject(self, word))
    }
}

/// What is indexed for a passage: its title twice (a document's subject,
/// e.g. the country, weighs more than a passing mention), heading, text.
fn indexed_text(s: &Source) -> String {
    let parts = [&s.title, &s.title, &s.heading, &s.text];
    let mut t = String::new();
    for p in parts.into_iter().flatten() {
        t.push_str(p);
        t.push('\n');
    }
    t
}

const EXTENSIONS: [&str; 4] = ["md", "markdown", "txt", "jsonl"];

/// Collects the document files under `dir`; unreadable subfolders are
/// skipped with a warning, an unreadable `dir` is an error.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        // `metadata` follows links; a dangling link fails here and is
        // reported when read, like any unreadable file.
        if path.metadata().is_ok_and(|m| m.is_dir()) {
            if let Err(e) = walk(&path, out) {
                tracing::warn!(folder = %path.display(), error = %e, "local search: skipping unreadable folder");
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
        {
            out.push(path);
        }
    }
    Ok(())
}

/// `url_base` + `relative` (a path inside the folder), `/`-separated,
/// with spaces and `#`/`%`/`?` escaped.
fn file_url(url_base: &str, relative: &Path) -> String {
    let mut url = String::from(url_base);
    for (i, part) in relative.iter().enumerate() {
        if i > 0 {
            url.push('/');
        }
        for c in part.to_string_lossy().chars() {
            match c {
                ' ' => url.push_str("%20"),
                '#' => url.push_str("%23"),
                '%' => url.push_str("%25"),
                '?' => url.push_str("%3F"),
                c => url.push(c),
            }
        }
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_are_relative_to_the_folder() {
        let p = Path::new("sub dir").join("a#b%c?.md");
        assert_eq!(file_url("local:", &p), "local:sub%20dir/a%23b%25c%3F.md");
        assert_eq!(
            file_url("https://docs.example/kb/", Path::new("x.txt")),
            "https://docs.example/kb/x.txt"
        );
    }
}

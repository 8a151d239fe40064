//! BM25 scoring over per-token postings: the `bm25` crate's `Scorer`,
//! without its per-query cost.
//!
//! Contract: for a query embedding `q` and document embeddings `d_0 … d_{N-1}`
//! (both from the same `bm25::Embedder`), [`Postings::top`] returns the
//! `limit` best documents among those that share at least one token with `q`,
//! each with the score the crate's `Scorer::matches` gives it, bit for bit:
//!
//! ```text
//! score(d) = Σ over q's entries t, in q's order, of idf(t) · value(d, t)
//! idf(t)   = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))     (f32, df = documents containing t)
//! value    = the value of t's first entry in d (what the crate's `find` takes)
//! ```
//!
//! A token repeated in the query adds its term once per occurrence, as the
//! crate does; terms of tokens a document lacks (which add `+0.0`, a no-op)
//! are skipped. Results come best first, ties broken by the lower document
//! index (the crate leaves tie order to a hash set's iteration).
//!
//! The crate collects every matching document into a hash set, scores each
//! by a linear search of its token list, recomputes each idf from hash set
//! sizes per document, and sorts all matches. Here each token's postings
//! (document index and value, in document order) and idf are built once;
//! a query walks its tokens' postings together, document at a time (the
//! lists are merged by document index, so each document's terms are added
//! in query order), and keeps the best `limit` in a bounded heap. A query
//! allocates only per query token and per result, nothing per document.
//! (Measured at 100 MB against the alternatives: a dense per-query score
//! buffer of N floats and a hash map over touched documents were 3–4x
//! slower at p50; see BENCHMARKS.md.)
//!
//! The tests hold this to the crate's `Scorer` (used there only) on the
//! bundled corpus: the same matches and bit-identical scores.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use bm25::Embedding;

/// One document's entry in a token's postings.
#[derive(Clone, Copy, Debug)]
struct Posting {
    doc: u32,
    value: f32,
}

/// A token's postings (documents in index order) and precomputed idf.
#[derive(Debug)]
struct TokenPostings {
    idf: f32,
    docs: Box<[Posting]>,
}

/// The inverted index of a fixed set of document embeddings.
#[derive(Debug)]
pub(super) struct Postings {
    tokens: HashMap<u32, TokenPostings>,
}

/// A scored document; `Ord` puts the better first (score descending, then
/// document index ascending).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Hit {
    pub(super) doc: u32,
    pub(super) score: f32,
}

impl Eq for Hit {}

impl Ord for Hit {
    fn cmp(&self, other: &Hit) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.doc.cmp(&other.doc))
    }
}

impl PartialOrd for Hit {
    fn partial_cmp(&self, other: &Hit) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Postings {
    /// The index of `docs`; document `i` is `docs`' `i`-th embedding.
    ///
    /// # Panics
    ///
    /// If there are more than `u32::MAX` documents.
    pub(super) fn new(docs: impl IntoIterator<Item = Embedding<u32>>) -> Postings {
        let mut lists: HashMap<u32, Vec<Posting>> = HashMap::new();
        let mut n = 0u32;
        for embedding in docs {
            let doc = n;
            n = n.checked_add(1).expect("at most u32::MAX documents");
            for t in embedding.iter() {
                let list = lists.entry(t.index).or_default();
                // Documents come in order: a list ending in this document
                // already has its first entry for this token.
                if list.last().is_none_or(|p| p.doc != doc) {
                    list.push(Posting {
                        doc,
                        value: t.value,
                    });
                }
            }
        }
        let tokens = lists
            .into_iter()
            .map(|(token, docs)| {
                // As the crate's `Scorer::idf`, operation for operation.
                let df = docs.len() as f32;
                let numerator = n as f32 - df + 0.5;
                let denominator = df + 0.5;
                let idf = (1f32 + (numerator / denominator)).ln();
                let docs = docs.into_boxed_slice();
                (token, TokenPostings { idf, docs })
            })
            .collect();
        Postings { tokens }
    }

    /// The `limit` best documents for `query`, best first (see the module
    /// docs for the score and the tie order).
    #[must_use]
    pub(super) fn top(&self, query: &Embedding<u32>, limit: usize) -> Vec<Hit> {
        if limit == 0 {
            return Vec::new();
        }
        // One cursor per query entry (repeats included), in query order.
        let mut cursors: Vec<(&TokenPostings, usize)> = query
            .indices()
            .filter_map(|t| self.tokens.get(t))
            .map(|p| (p, 0))
            .collect();
        // Bounded max-heap of the `limit` best so far; its top is the worst.
        let mut best: BinaryHeap<Hit> = BinaryHeap::with_capacity(limit.min(1024) + 1);
        // The next document any cursor is at, until all are exhausted.
        while let Some(doc) = cursors
            .iter()
            .filter_map(|&(p, i)| p.docs.get(i).map(|x| x.doc))
            .min()
        {
            let mut score = 0f32;
            for (p, i) in &mut cursors {
                if let Some(x) = p.docs.get(*i).filter(|x| x.doc == doc) {
                    score += p.idf * x.value;
                    *i += 1;
                }
            }
            let hit = Hit { doc, score };
            if best.len() < limit {
                best.push(hit);
            } else if let Some(mut worst) = best.peek_mut()
                && hit < *worst
            {
                *worst = hit;
            }
        }
        best.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use bm25::{Embedding, Scorer, TokenEmbedding};

    use super::{Hit, Postings};
    use crate::local::{LocalIndex, indexed_text};

    fn emb(entries: &[(u32, f32)]) -> Embedding<u32> {
        Embedding(
            entries
                .iter()
                .map(|&(index, value)| TokenEmbedding { index, value })
                .collect(),
        )
    }

    /// Our hits for `query` (all of them) against the crate's `Scorer`
    /// over the same embeddings: the same documents, bit-identical scores,
    /// ordered by score descending then index ascending. Returns the
    /// number of matches.
    fn check(ours: &Postings, crate_scorer: &Scorer<usize, u32>, query: &Embedding<u32>) -> usize {
        let all = ours.top(query, usize::MAX);
        let theirs: HashMap<usize, f32> = crate_scorer
            .matches(query)
            .into_iter()
            .map(|m| (m.id, m.score))
            .collect();
        assert_eq!(all.len(), theirs.len(), "match count for {query:?}");
        for h in &all {
            let s = theirs
                .get(&(h.doc as usize))
                .unwrap_or_else(|| panic!("doc {} not a crate match", h.doc));
            assert_eq!(
                h.score.to_bits(),
                s.to_bits(),
                "doc {}: ours {} crate {s}",
                h.doc,
                h.score
            );
        }
        for w in all.windows(2) {
            assert!(
                w[0].score > w[1].score || (w[0].score == w[1].score && w[0].doc < w[1].doc),
                "order: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
        // A smaller limit is a prefix of the full order.
        for limit in [0, 1, 5, 17] {
            assert_eq!(ours.top(query, limit), all[..limit.min(all.len())]);
        }
        all.len()
    }

    /// The bench's questions (`benches/questions.txt`, one per line).
    const QUESTIONS: &str = include_str!("../../benches/questions.txt");

    /// Edge cases asked after the bench's questions.
    const QUERIES: &[&str] = &[
        // Single words, common and rare.
        "Lisbon",
        "population",
        "country",
        "volcano",
        "citestream",
        "SSE",
        "xyzzyqwv",
        // Stop words only, empty, punctuation.
        "the of and",
        "what is it that they are",
        "",
        "   ",
        "?!.,;",
        // Repeated words (the crate sums a term once per occurrence).
        "Lisbon Lisbon Lisbon",
        "weather Lisbon weather Portugal weather",
        "capital capital of the capital",
        // Unicode.
        "São Tomé and Príncipe",
        "Côte d'Ivoire cocoa",
        "Zürich Genève",
        "日本 東京",
        "Ελλάδα",
        "🎉 party",
        "naïve café résumé",
    ];

    #[test]
    fn scores_equal_the_crates_scorer_on_the_bundled_corpus() {
        let index = LocalIndex::bundled();
        let mut scorer = Scorer::<usize, u32>::new();
        for (i, p) in index.passages().iter().enumerate() {
            scorer.upsert(&i, index.embedder.embed(&indexed_text(p)));
        }
        let mut total = 0;
        for q in QUESTIONS.lines().chain(QUERIES.iter().copied()) {
            let query = index.embedder.embed(q);
            total += check(&index.postings, &scorer, &query);
            // `search` returns the passages of the first hits.
            let want: Vec<_> = index
                .postings
                .top(&query, 5)
                .iter()
                .map(|h| index.passages()[h.doc as usize].clone())
                .collect();
            assert_eq!(index.search(q, 5), want);
        }
        // The queries reach a good part of the corpus.
        assert!(total > index.len(), "{total} matches");
    }

    #[test]
    fn scores_equal_the_crates_scorer_on_hand_made_embeddings() {
        // Repeated tokens in documents (the first entry's value counts)
        // and in queries (summed once per occurrence).
        let docs = [
            emb(&[(1, 0.5), (2, 0.25), (1, 0.75)]),
            emb(&[(2, 1.0), (3, 0.125)]),
            emb(&[(3, 0.3), (3, 0.3), (1, 0.1)]),
            emb(&[]),
            emb(&[(4, 2.0)]),
        ];
        let ours = Postings::new(docs.iter().cloned());
        let mut scorer = Scorer::<usize, u32>::new();
        for (i, d) in docs.iter().enumerate() {
            scorer.upsert(&i, d.clone());
        }
        for q in [
            emb(&[(1, 1.0)]),
            emb(&[(1, 1.0), (1, 1.0)]),
            emb(&[(3, 1.0), (1, 1.0), (2, 1.0), (1, 1.0)]),
            emb(&[(5, 1.0)]),
            emb(&[]),
            emb(&[(4, 1.0), (2, 1.0)]),
        ] {
            check(&ours, &scorer, &q);
        }
    }

    #[test]
    fn equal_scores_come_in_index_order() {
        let docs = [
            emb(&[(7, 1.0)]),
            emb(&[(8, 1.0)]),
            emb(&[(7, 1.0)]),
            emb(&[(7, 1.0)]),
        ];
        let ours = Postings::new(docs);
        let hits = ours.top(&emb(&[(7, 1.0)]), 2);
        let docs: Vec<u32> = hits.iter().map(|h| h.doc).collect();
        assert_eq!(docs, [0, 2]);
        assert!(ours.top(&emb(&[(7, 1.0)]), 0).is_empty());
        assert!(ours.top(&emb(&[(9, 1.0)]), 5).is_empty());
    }

    #[test]
    fn hits_order_best_first() {
        let a = Hit { doc: 3, score: 2.0 };
        let b = Hit { doc: 1, score: 1.0 };
        let c = Hit { doc: 2, score: 1.0 };
        let mut v = vec![c, b, a];
        v.sort();
        assert_eq!(v, [a, b, c]);
    }
}

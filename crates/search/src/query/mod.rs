//! Query formation: what is searched for a conversation (`search.query`,
//! `search.max_query_chars`; docs/search.md, "What is searched").
//!
//! Formed once, here, for every host and every provider: [`crate::Search`]
//! forms the query ([`crate::Search::form`]) before it asks the provider,
//! so the gateway, the Envoy processor and the Python package search the
//! same text, and every remote provider is sent [`FormedQuery::text`].
//!
//! # Contract
//!
//! * **The question** is the end of the last user message: at most its
//!   last `max_query_chars` characters, cut at a word boundary (a partial
//!   first word is dropped; a message that is one longer word is cut at a
//!   character boundary), surrounding whitespace trimmed. Only that end is
//!   ever read, whatever the message's size: a 27 MiB message costs what a
//!   1000-character one does.
//! * `last`: the question alone.
//! * `context` (the default; no model call, microseconds):
//!   * A question that **names its own subject** (a word outside the
//!     bundled function and common word lists that is rare enough, or a
//!     capitalised word inside a sentence, or an all-caps word) and has no
//!     possessive pointing back ("its", "their") is searched as written:
//!     "What is the capital of Japan?" after talk of Portugal searches Japan
//!     only.
//!   * Otherwise — it refers back (a possessive "its", "their"; a noun
//!     phrase "the country", "that city" not followed by "of …"; or it
//!     names nothing and says "it", "they", "there") or is a fragment
//!     ("climate?", "And the exports?") — **terms are
//!     carried** from the earlier `user` and `assistant` turns, most
//!     recent first: the words of those turns that name a subject, each
//!     scored by its rarity × 0.85 per turn back × (1 for a user turn, 0.6
//!     for an assistant turn), repetitions in a turn adding half, summed
//!     over the turns. The best terms scoring at least half the best are
//!     carried, never more than the question has content words (two for a
//!     question with none, three at most), so they never outweigh the
//!     question's own words. Words the question has are not carried again.
//!   * `system`, `developer`, `tool` and any other turns give no terms.
//!   * The scan is bounded: the last 12 turns, the first 300 words of each,
//!     2000 words in all.
//! * `model`: a chat model writes the query (one non-streamed chat
//!   completion to `[search.query_model]`, bounded by
//!   `search.query_timeout`; see docs/search.md); on any failure the
//!   `context` query. [`crate::Search::form`] runs it.
//!
//! **Rarity** (how strongly a word names a subject) is the provider's
//! signal when it has one ([`crate::Provider::subject`]: the `local` index
//! says a word of its passage titles names a subject, "Peru", while a rare
//! word no title has, "tropical", does not); otherwise a word outside the
//! bundled lists counts as rare (0.7). A capitalised word inside a sentence, or an all-caps one,
//! is rare at least 0.8; a word names a subject from 0.5.
//!
//! The formed [`FormedQuery::text`] is the question followed by the carried
//! terms, space-separated (`"And what is its population? Peru"`): what
//! every provider is sent and hosts log. (For `local`, weighting the
//! carried terms lower in its BM25 score ranked worse on the conversation
//! test set than this one string: weight 0.5 → 62%/77% top-1/top-3, 0.75 →
//! 80%/92%, one string 92%/98%, measured with up to two carried terms per
//! question word; so the string it is.)
//!
//! # Example
//!
//! ```
//! use citestream_search::query::form;
//! use citestream_search::{QueryMode, SearchQuery};
//! use citestream::request::Turn;
//!
//! let turn = |role: &str, text: &str| Turn { role: role.into(), text: text.into() };
//! let query = SearchQuery {
//!     text: "And what is its population?".into(),
//!     context: vec![
//!         turn("user", "What is the capital of Peru?"),
//!         turn("assistant", "The capital of Peru is Lima [1]."),
//!     ],
//! };
//! // No provider signal: capitalised words name subjects.
//! let formed = form(&query, QueryMode::Context, 1000, &|_| None);
//! assert_eq!(formed.text(), "And what is its population? Peru");
//! assert_eq!(formed.carried(), ["Peru"]);
//! let last = form(&query, QueryMode::Last, 1000, &|_| None);
//! assert_eq!(last.text(), "And what is its population?");
//! ```

mod conversation;
mod model;
mod words;

pub use conversation::{ConversationError, conversation_query};

pub(crate) use model::{ModelError, QueryModel};

use crate::{SearchQuery, config::QueryMode};
use words::{Class, FastMap, Word, class, lowercase, lowercase_into, words};

/// Rarity of an unknown word without a provider signal.
const DEFAULT_RARITY: f32 = 0.7;
/// Rarity of a capitalised word inside a sentence, or an all-caps one, at
/// least.
const PROPER_RARITY: f32 = 0.8;
/// A word names a subject from this rarity.
const SUBJECT: f32 = 0.5;
/// Score kept per turn back.
const DECAY: f32 = 0.85;
/// Score factor of an assistant turn's words (a user turn's: 1).
const ASSISTANT: f32 = 0.6;
/// Scan bounds.
const MAX_TURNS: usize = 12;
const MAX_TURN_WORDS: usize = 300;
const MAX_WORDS: usize = 2000;

/// How a [`FormedQuery`] was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Formation {
    /// The question as written (`last`, or `context` for a question that
    /// names its subject, or a conversation with nothing to carry).
    Question,
    /// The question and terms carried from earlier turns (`context`).
    Carried,
    /// Written by the query model (`model`).
    Model,
}

impl Formation {
    /// A short lowercase label for logs (`question`, `carried`, `model`).
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Formation::Question => "question",
            Formation::Carried => "carried",
            Formation::Model => "model",
        }
    }
}

/// The query a provider is asked: see the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct FormedQuery {
    text: String,
    question_len: usize,
    carried: Vec<String>,
    formation: Formation,
}

impl FormedQuery {
    /// `text` as written, nothing carried.
    #[must_use]
    pub fn question(text: &str) -> FormedQuery {
        FormedQuery {
            text: text.to_owned(),
            question_len: text.len(),
            carried: Vec::new(),
            formation: Formation::Question,
        }
    }

    /// The text sent to the provider: the question, then the carried
    /// terms, space-separated.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// [`FormedQuery::text`]'s length in characters (for the log line).
    #[must_use]
    pub fn chars(&self) -> usize {
        self.text.chars().count()
    }

    /// The question's part of the text (for `model`, the model's query).
    #[must_use]
    pub fn own(&self) -> &str {
        &self.text[..self.question_len]
    }

    /// The carried terms, best first.
    #[must_use]
    pub fn carried(&self) -> &[String] {
        &self.carried
    }

    /// How it was made.
    #[must_use]
    pub fn formation(&self) -> Formation {
        self.formation
    }

    pub(crate) fn from_model(text: String) -> FormedQuery {
        FormedQuery {
            question_len: text.len(),
            text,
            carried: Vec::new(),
            formation: Formation::Model,
        }
    }
}

/// The last `max_chars` characters of `text`, cut at a word boundary and
/// trimmed. Reads only the end of `text` (about `4 × max_chars` bytes).
#[must_use]
pub fn question_end(text: &str, max_chars: usize) -> &str {
    let text = text.trim_end();
    if max_chars == 0 {
        return "";
    }
    let Some((start, _)) = text.char_indices().rev().nth(max_chars - 1) else {
        return text.trim_start();
    };
    if start == 0 {
        return text.trim_start();
    }
    let tail = &text[start..];
    let cut_inside_word =
        !text[..start].ends_with(char::is_whitespace) && !tail.starts_with(char::is_whitespace);
    let tail = if cut_inside_word {
        match tail.find(char::is_whitespace) {
            Some(i) => &tail[i..],
            None => tail, // one long word: keep the character cut
        }
    } else {
        tail
    };
    tail.trim_start()
}

/// Forms the query for `mode` `context` or `last` (a `model` host calls
/// this for its fallback). `rarity` gives a lowercase word's rarity in
/// `0..=1` when the provider has a signal (see the module docs).
#[must_use]
pub fn form(
    query: &SearchQuery,
    mode: QueryMode,
    max_chars: usize,
    rarity: &dyn Fn(&str) -> Option<f32>,
) -> FormedQuery {
    let question = question_end(&query.text, max_chars);
    if mode == QueryMode::Last {
        return FormedQuery::question(question);
    }
    let (own, own_words, needs_context) = analyse(question, rarity);
    if !needs_context {
        return FormedQuery::question(question);
    }
    // Never more carried terms than the question has content words (two
    // for a question with none: nothing to outweigh).
    let limit = if own_words == 0 { 2 } else { own_words.min(3) };
    let carried = carry(query, &own, limit, rarity);
    if carried.is_empty() {
        return FormedQuery::question(question);
    }
    let mut text = String::with_capacity(question.len() + 16 * carried.len());
    text.push_str(question);
    for t in &carried {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(t);
    }
    FormedQuery {
        text,
        question_len: question.len(),
        carried,
        formation: Formation::Carried,
    }
}

/// A word's rarity as a possible subject: `None` for function words and
/// anaphors, 0 for common words and numbers.
fn subject_rarity(
    w: Word<'_>,
    lower: &str,
    class: Class,
    rarity: &dyn Fn(&str) -> Option<f32>,
) -> Option<f32> {
    match class {
        Class::Function | Class::Anaphor { .. } => None,
        Class::Common => Some(0.0),
        Class::Other if w.numeric() => Some(0.0),
        Class::Other => Some(occurrence_rarity(
            w,
            rarity(lower).unwrap_or(DEFAULT_RARITY),
        )),
    }
}

/// The rarity of one occurrence of a word of rarity `base`: a capitalised
/// word inside a sentence, or an all-caps one, at least
/// [`PROPER_RARITY`].
fn occurrence_rarity(w: Word<'_>, base: f32) -> f32 {
    let proper = (w.capitalised() && !w.initial) || w.all_caps();
    if proper {
        base.max(PROPER_RARITY)
    } else {
        base
    }
}

/// The question's lowercase content words, their number, and whether it
/// needs context (a possessive anaphor, a referring noun phrase, or no
/// subject of its own).
fn analyse(question: &str, rarity: &dyn Fn(&str) -> Option<f32>) -> (Vec<String>, usize, bool) {
    let mut own = Vec::new();
    let mut content = 0;
    let mut named = false;
    let mut strong = false;
    let mut prev: Option<String> = None;
    let all: Vec<Word<'_>> = words(question).collect();
    for (i, &w) in all.iter().enumerate() {
        let lower = lowercase(w.text);
        let c = class(&lower);
        if let Class::Anaphor { strong: s } = c {
            strong |= s;
        }
        // "the country", "that city": a noun phrase pointing back, unless
        // a phrase naming it follows ("the country of …").
        if matches!(prev.as_deref(), Some("the" | "this" | "that"))
            && REFERRING_NOUNS.contains(&lower.as_ref())
        {
            let next = all.get(i + 1).map(|n| lowercase(n.text));
            if !next.as_deref().is_some_and(|n| NAMING_NEXT.contains(&n)) {
                strong = true;
            }
        }
        if let Some(r) = subject_rarity(w, &lower, c, rarity) {
            content += 1;
            named |= r >= SUBJECT;
            own.push(lower.clone().into_owned());
        }
        prev = Some(lower.into_owned());
    }
    (own, content, strong || !named)
}

/// Nouns that, after "the", "this" or "that", point back to the subject.
const REFERRING_NOUNS: &[&str] = &[
    "country",
    "nation",
    "city",
    "island",
    "islands",
    "region",
    "territory",
    "place",
    "state",
    "area",
    "capital",
    "kingdom",
    "republic",
];
/// Words after such a noun that name it instead ("the capital of Japan").
const NAMING_NEXT: &[&str] = &[
    "of", "in", "called", "named", "with", "that", "which", "where", "whose",
];

/// Lowercase words and a count each (see [`word_counts`]).
pub(crate) type WordCounts = FastMap<String, u32>;

/// For each lowercase word of `texts` (split as query formation splits
/// words), the number of texts that have it.
pub(crate) fn word_counts<'a>(texts: impl IntoIterator<Item = &'a str>) -> WordCounts {
    let mut counts = WordCounts::default();
    let mut lower = String::new();
    for text in texts {
        let mut seen: FastMap<String, ()> = FastMap::default();
        for w in words(text) {
            lowercase_into(w.text, &mut lower);
            if seen.insert(lower.clone(), ()).is_none() {
                *counts.entry(lower.clone()).or_default() += 1;
            }
        }
    }
    counts
}

/// A word of the earlier turns, seen once or more.
struct Seen {
    class: Class,
    /// The provider's (or the default) rarity; for [`Class::Other`] only.
    base: f32,
    /// The word as first written (a capitalised spelling wins).
    written: String,
    score: f32,
    /// First seen order, for ties.
    order: usize,
    /// The turn of the last occurrence, and the occurrences in it.
    turn: usize,
    in_turn: u32,
}

/// The terms to carry from the earlier turns (see the module docs).
fn carry(
    query: &SearchQuery,
    own: &[String],
    limit: usize,
    rarity: &dyn Fn(&str) -> Option<f32>,
) -> Vec<String> {
    let mut seen: FastMap<String, Seen> = FastMap::default();
    let mut lower = String::new();
    let mut budget = MAX_WORDS;
    let turns = query
        .context
        .iter()
        .rev()
        .filter(|t| t.role == "user" || t.role == "assistant")
        .take(MAX_TURNS);
    for (back, turn) in turns.enumerate() {
        if budget == 0 {
            break;
        }
        let role = if turn.role == "user" { 1.0 } else { ASSISTANT };
        let weight = role * DECAY.powi(i32::try_from(back).unwrap_or(i32::MAX));
        for w in words(&turn.text).take(MAX_TURN_WORDS.min(budget)) {
            budget -= 1;
            lowercase_into(w.text, &mut lower);
            let e = match seen.get_mut(lower.as_str()) {
                Some(e) => e,
                None => {
                    let class = class(&lower);
                    let base = if class == Class::Other && !w.numeric() {
                        rarity(&lower).unwrap_or(DEFAULT_RARITY)
                    } else {
                        0.0
                    };
                    let order = seen.len();
                    seen.entry(lower.clone()).or_insert(Seen {
                        class,
                        base,
                        written: w.text.to_owned(),
                        score: 0.0,
                        order,
                        turn: usize::MAX,
                        in_turn: 0,
                    })
                }
            };
            if e.class != Class::Other {
                continue;
            }
            let r = occurrence_rarity(w, e.base);
            if r < SUBJECT || own.contains(&lower) {
                continue;
            }
            if e.turn != back {
                e.turn = back;
                e.in_turn = 0;
            }
            // Repetitions in one turn: 1, 1.5, 2 at most.
            e.in_turn += 1;
            if e.in_turn > 3 {
                continue;
            }
            e.score += if e.in_turn == 1 { r } else { 0.5 * r } * weight;
            if w.capitalised() && !e.written.starts_with(char::is_uppercase) {
                w.text.clone_into(&mut e.written);
            }
        }
    }
    let mut ranked: Vec<Seen> = seen.into_values().filter(|e| e.score > 0.0).collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.order.cmp(&b.order)));
    let Some(best) = ranked.first().map(|r| r.score) else {
        return Vec::new();
    };
    ranked
        .into_iter()
        .take_while(|r| r.score >= 0.5 * best)
        .take(limit)
        .map(|r| r.written)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use citestream::request::Turn;

    fn conv(turns: &[(&str, &str)], q: &str) -> SearchQuery {
        SearchQuery {
            text: q.to_owned(),
            context: turns
                .iter()
                .map(|&(role, text)| Turn {
                    role: role.to_owned(),
                    text: text.to_owned(),
                })
                .collect(),
        }
    }

    fn formed(turns: &[(&str, &str)], q: &str) -> FormedQuery {
        form(&conv(turns, q), QueryMode::Context, 1000, &|_| None)
    }

    const PERU: &[(&str, &str)] = &[
        ("user", "What is the capital of Peru?"),
        ("assistant", "The capital of Peru is Lima [1]."),
    ];

    #[test]
    fn follow_ups_carry_the_subject() {
        let f = formed(PERU, "And what is its population?");
        assert_eq!(f.formation(), Formation::Carried);
        assert_eq!(f.carried(), ["Peru"]);
        assert_eq!(f.text(), "And what is its population? Peru");
        assert_eq!(f.own(), "And what is its population?");
        for q in [
            "climate?",
            "And the exports?",
            "What is the weather like there?",
            "How big is the country?",
        ] {
            let f = formed(PERU, q);
            assert_eq!(f.carried().first().map(String::as_str), Some("Peru"), "{q}");
        }
    }

    #[test]
    fn named_subjects_are_searched_as_written() {
        for q in [
            "What is the capital of Japan?",
            "And Japan?",
            "what about japan",
            "Is it cold in Norway?",
        ] {
            let f = formed(PERU, q);
            assert_eq!(f.formation(), Formation::Question, "{q}: {f:?}");
            assert_eq!(f.text(), q);
        }
        let last = form(
            &conv(PERU, "And its population?"),
            QueryMode::Last,
            1000,
            &|_| None,
        );
        assert_eq!(last.text(), "And its population?");
    }

    /// The worked examples of docs/search.md.
    #[test]
    fn the_docs_examples() {
        let f = formed(
            &[
                ("user", "What is the capital of Ruritania?"),
                ("assistant", "The capital of Ruritania is Strelsau [1]."),
            ],
            "And what is its anthem?",
        );
        assert_eq!(f.text(), "And what is its anthem? Ruritania");
        let f = formed(
            &[
                ("system", "You are a travel assistant for Freedonia."),
                ("user", "Tell me about Ruritania."),
                (
                    "assistant",
                    "Ruritania is a small kingdom in central Europe [1].",
                ),
            ],
            "What is the national dish of Syldavia?",
        );
        assert_eq!(f.text(), "What is the national dish of Syldavia?");
        assert_eq!(f.formation(), Formation::Question);
    }

    #[test]
    fn system_turns_give_no_terms() {
        let f = formed(
            &[
                ("system", "You are a guide to Norway."),
                ("developer", "Talk about Chile."),
            ],
            "What is its capital?",
        );
        assert_eq!(f.formation(), Formation::Question);
    }

    #[test]
    fn carried_terms_never_outweigh_the_question() {
        let turns = [(
            "user",
            "Tell me about Peru, Chile, Bolivia, Ecuador, Colombia and Brazil.",
        )];
        let f = formed(&turns, "population?");
        assert_eq!(f.carried(), ["Peru"]);
        let f = formed(
            &turns,
            "What about the population, the exports and the climate there?",
        );
        assert_eq!(f.carried().len(), 3);
        let f = formed(&turns, "What about them?");
        assert_eq!(f.carried().len(), 2);
    }

    #[test]
    fn the_question_is_the_end_of_the_message() {
        assert_eq!(question_end("  hello world  ", 100), "hello world");
        assert_eq!(question_end("hello wonderful world", 9), "world");
        assert_eq!(question_end("hello wonderful world", 6), "world");
        assert_eq!(question_end("hello wonderful world", 5), "world");
        assert_eq!(question_end("hello wonderful world", 4), "orld");
        assert_eq!(question_end("hello wonderful world", 15), "wonderful world");
        assert_eq!(question_end("hello wonderful world", 16), "wonderful world");
        assert_eq!(question_end("héllo wörld", 5), "wörld");
        assert_eq!(question_end("abc", 0), "");
        assert_eq!(question_end("", 10), "");
        let huge = "word ".repeat((27 << 20) / 5) + "the last question?";
        let q = question_end(&huge, 1000);
        assert!(q.ends_with("the last question?") && q.chars().count() <= 1000);
        assert!(q.starts_with("word "));
    }

    #[test]
    fn empty_and_odd_inputs() {
        let f = formed(&[], "");
        assert_eq!(f.text(), "");
        let f = formed(&[("user", "")], "?!");
        assert_eq!(f.text(), "?!");
        let f = formed(&[("assistant", "日本 東京")], "それは?");
        assert!(f.text().starts_with("それは?"));
    }
}

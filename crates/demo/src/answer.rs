//! Composing the demo model's answer, and its token counting.
//!
//! # Choosing sentences
//!
//! * **Terms** of a text: its maximal runs of alphanumeric characters,
//!   lowercased, without one-letter runs and a short English stop-word list
//!   ([`STOP_WORDS`]); a trailing `s` is dropped from terms longer than 3
//!   letters (not from `…ss`), so "forecasts" meets "forecast".
//! * Each source's text is split into paragraphs at blank lines and at
//!   Markdown list items (bullets removed); headings, fenced code blocks and
//!   table rows are dropped. Each paragraph is cleaned (whitespace runs become
//!   one space, backticks and `[digits]` removed, so the answer holds no
//!   code span and no marker but ours) and split into **sentences** after
//!   `.`, `!` or `?` followed by a space (a final `:` becomes `.`). A sentence longer than [`MAX_SENTENCE_CHARS`] is
//!   cut at a word boundary and ends with `…`.
//! * **Score** of a sentence = 2 × (question terms in the sentence) + (question
//!   terms in its source's title), each distinct term counted once: a
//!   sentence inherits some relevance from its source's title, so
//!   "Saturday: sunny." under "Lisbon weather: weekend outlook" answers
//!   "weather in Lisbon this weekend?".
//! * The answer is the [`MAX_SENTENCES`] best sentences with a score above
//!   zero (ties: lower source number first, then earlier sentence), at most
//!   [`MAX_PER_SOURCE`] per source, no sentence twice, in that order, each
//!   with its source's ` [n]` marker before its final punctuation
//!   ("Sunny [1].").
//! * Sources but no sentence scoring above zero: a sentence saying so, then
//!   source 1's first sentence with `[1]`.
//! * No sources: [`NO_SOURCES_ANSWER`], without any marker.
//!
//! # Tokens
//!
//! [`pieces`] splits a text into token-sized pieces whose concatenation is
//! the text: a piece is the whitespace before it plus either a run of at
//! most [`MAX_PIECE_CHARS`] alphanumeric characters or one other character
//! (`[`, `1` and `]` are three pieces, so markers arrive split across
//! chunks as they do from real models). Usage counts are numbers of pieces:
//! a rough stand-in for a real tokenizer (about one per word and one per
//! punctuation mark).

use std::collections::BTreeSet;

use super::prompt::Passage;

/// At most this many sentences in an answer.
pub(crate) const MAX_SENTENCES: usize = 3;
/// At most this many sentences from one source.
pub(crate) const MAX_PER_SOURCE: usize = 2;
/// Longer sentences are cut at a word boundary (characters).
pub(crate) const MAX_SENTENCE_CHARS: usize = 300;
/// The longest alphanumeric run in one token piece (characters).
pub(crate) const MAX_PIECE_CHARS: usize = 6;

/// The answer when the request carried no numbered sources.
pub(crate) const NO_SOURCES_ANSWER: &str = "I got no sources with this request, so I have \
    nothing to ground an answer in. I am citestream's built-in demo model: I only repeat what \
    the numbered sources of a web search say. Ask again with \"web_search\": true (and a \
    question the search can find something for).";

/// Lead-in when there are sources but none matches the question.
const NO_MATCH_LEAD: &str =
    "None of the sources I got matches the question closely. The first one says:";

/// Words that say nothing about what a question is about.
pub(crate) const STOP_WORDS: &[&str] = &[
    "about", "an", "and", "are", "as", "at", "be", "by", "can", "could", "did", "do", "does",
    "for", "from", "had", "has", "have", "how", "in", "is", "it", "its", "me", "my", "no", "not",
    "of", "on", "or", "please", "tell", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "those", "to", "was", "we", "were", "what", "when", "where", "which",
    "who", "why", "will", "with", "would", "you", "your",
];

/// The demo model's answer to `question` from `passages` (module docs).
pub(crate) fn compose(passages: &[Passage], question: &str) -> String {
    if passages.is_empty() {
        return NO_SOURCES_ANSWER.to_owned();
    }
    let q = terms(question);
    // (score, source position, sentence position, sentence)
    let mut ranked: Vec<(usize, usize, usize, String)> = Vec::new();
    for (si, p) in passages.iter().enumerate() {
        let in_title = terms(&p.title).intersection(&q).count();
        for (k, s) in sentences(&p.text).into_iter().enumerate() {
            let score = 2 * terms(&s).intersection(&q).count() + in_title;
            if score > 0 {
                ranked.push((score, si, k, s));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));

    let mut chosen: Vec<(usize, String)> = Vec::new();
    for (_, si, _, s) in ranked {
        let from_source = chosen.iter().filter(|c| c.0 == si).count();
        if from_source < MAX_PER_SOURCE && !chosen.iter().any(|c| c.1 == s) {
            chosen.push((si, s));
        }
        if chosen.len() == MAX_SENTENCES {
            break;
        }
    }
    if chosen.is_empty() {
        let first = passages
            .iter()
            .enumerate()
            .find_map(|(si, p)| sentences(&p.text).into_iter().next().map(|s| (si, s)));
        return match first {
            Some((si, s)) => format!("{NO_MATCH_LEAD} {}", cite(&s, passages[si].number)),
            None => format!(
                "None of the sources I got has any text; the first is titled \"{}\" [{}].",
                clean(&passages[0].title).trim(),
                passages[0].number
            ),
        };
    }
    let cited: Vec<String> = chosen
        .iter()
        .map(|(si, s)| cite(s, passages[*si].number))
        .collect();
    cited.join(" ")
}

/// Sentence-ending punctuation, kept after the marker.
const STOPS: &[char] = &['.', '!', '?', '…'];
/// Closing quotes and brackets that may follow the final punctuation.
const CLOSERS: &[char] = &['"', '\'', ')', ']', '”', '’', '»'];

/// `sentence` with ` [n]` before its final punctuation (`Sunny [1].`,
/// `(high 24 °C) [1].`, `"Go [1]!"`), or at its end when it has none.
fn cite(sentence: &str, n: u32) -> String {
    let mut body = sentence.trim_end_matches(STOPS);
    if body.len() == sentence.len() {
        let open = sentence.trim_end_matches(CLOSERS);
        let b = open.trim_end_matches(STOPS);
        if b.len() < open.len() {
            body = b;
        }
    }
    if body.trim().is_empty() || body.len() == sentence.len() {
        return format!("{sentence} [{n}]");
    }
    format!("{body} [{n}]{}", &sentence[body.len()..])
}

/// The distinct terms of `text` (module docs).
pub(crate) fn terms(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() > 1 && !STOP_WORDS.contains(&w.as_str()))
        .map(|mut w| {
            if w.chars().count() > 3 && w.ends_with('s') && !w.ends_with("ss") {
                w.pop();
            }
            w
        })
        .collect()
}

/// The cleaned sentences of a source text (module docs).
pub(crate) fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for para in paragraphs(text) {
        let clean = clean(&para);
        let mut start = 0;
        let bytes = clean.as_bytes();
        for (i, c) in clean.char_indices() {
            if matches!(c, '.' | '!' | '?') && bytes.get(i + 1) == Some(&b' ') {
                out.push(clean[start..=i].trim().to_owned());
                start = i + 1;
            }
        }
        out.push(clean[start..].trim().to_owned());
    }
    out.retain(|s| s.chars().any(char::is_alphanumeric));
    out.into_iter()
        .map(|mut s| {
            // A lead-in to a list or code block reads as a statement.
            if s.ends_with(':') {
                s.pop();
                s.push('.');
            }
            clip(&s)
        })
        .collect()
}

/// The paragraphs of `text`: runs of lines between blank lines, where a
/// Markdown list item also starts a paragraph of its own (its bullet
/// removed); headings, fenced code blocks (from a line starting with
/// ```` ``` ```` or `~~~` to the next such line) and table rows (lines
/// starting with `|`) are dropped.
fn paragraphs(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut in_fence = false;
    for line in text.lines() {
        let t = line.trim();
        let fence = t.starts_with("```") || t.starts_with("~~~");
        let block = block_start(t);
        if fence || in_fence || t.is_empty() || t.starts_with('|') || block.is_some() {
            in_fence ^= fence;
            if !out.last().is_some_and(String::is_empty) {
                out.push(String::new());
            }
            // Headings name a passage; they say nothing, so they go.
            if let (Some(rest), false) = (block, in_fence || fence || t.starts_with('#')) {
                out.push(format!("{rest}\n"));
            }
            continue;
        }
        if let Some(last) = out.last_mut() {
            last.push_str(t);
            last.push('\n');
        }
    }
    out
}

/// The text of a Markdown heading (`# …`) or list item (`- `, `* `, `+ `,
/// `1. `, `1) `) line without its marker; `None` for other lines.
fn block_start(line: &str) -> Option<&str> {
    let hashes = line.len() - line.trim_start_matches('#').len();
    if (1..=6).contains(&hashes) {
        return line[hashes..].strip_prefix(' ');
    }
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(bullet) {
            return Some(rest);
        }
    }
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    let after = &line[digits..];
    (digits > 0)
        .then(|| {
            after
                .strip_prefix(". ")
                .or_else(|| after.strip_prefix(") "))
        })
        .flatten()
}

/// Whitespace runs to one space; backticks and `[digits]` removed.
fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '[' {
            let digits = rest[1..].bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 && rest.as_bytes().get(1 + digits) == Some(&b']') {
                rest = &rest[digits + 2..];
                continue;
            }
        }
        if c.is_whitespace() {
            if !out.ends_with(' ') {
                out.push(' ');
            }
        } else if c != '`' {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Cuts a sentence over [`MAX_SENTENCE_CHARS`] at a word boundary.
fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_SENTENCE_CHARS) {
        None => s.to_owned(),
        Some((at, _)) => {
            let cut = s[..at].rfind(' ').filter(|&i| i > 0).unwrap_or(at);
            format!("{}…", s[..cut].trim_end())
        }
    }
}

/// Splits `text` into token-sized pieces (module docs); their
/// concatenation is `text`.
pub(crate) fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = text.char_indices().peekable();
    while let Some(&(_, c)) = it.peek() {
        // The whitespace before the piece.
        if c.is_whitespace() {
            it.next();
            continue;
        }
        let (_, first) = it.next().unwrap_or((0, c));
        if first.is_alphanumeric() {
            let mut len = 1;
            while let Some(&(_, d)) = it.peek() {
                if !d.is_alphanumeric() || len == MAX_PIECE_CHARS {
                    break;
                }
                len += 1;
                it.next();
            }
        }
        let end = it.peek().map_or(text.len(), |&(i, _)| i);
        out.push(&text[start..end]);
        start = end;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// The approximate token count of `text` (the number of [`pieces`]).
pub(crate) fn count_tokens(text: &str) -> u64 {
    u64::try_from(pieces(text).len()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(n: u32, title: &str, text: &str) -> Passage {
        Passage {
            number: n,
            title: title.into(),
            url: format!("https://{n}/"),
            text: text.into(),
        }
    }

    #[test]
    fn terms_and_stems() {
        let t: Vec<String> = terms("What's the weather in Lisbon this weekend? Forecasts, glass!")
            .into_iter()
            .collect();
        assert_eq!(t, ["forecast", "glass", "lisbon", "weather", "weekend"]);
    }

    #[test]
    fn sentences_are_cleaned_and_split() {
        let s = sentences(
            "First `code` here.[12] Second\nline!  Third? Fourth 3.5 m [x]\n\n```\nx [1]\n```\nHeading\n\nPara.",
        );
        assert_eq!(
            s,
            [
                "First code here.",
                "Second line!",
                "Third?",
                "Fourth 3.5 m [x]",
                "Heading",
                "Para."
            ]
        );
        let long = "word ".repeat(100);
        let s = sentences(&long);
        assert!(s[0].ends_with('…'));
        assert!(s[0].chars().count() <= MAX_SENTENCE_CHARS + 1);
    }

    #[test]
    fn markdown_blocks_are_sentences_of_their_own_headings_go() {
        let text = "# Title\nProse wrapped\nover lines\n- item one\n* item two\n12. third\n| a | b |\n## Sub\nEnd.";
        assert_eq!(
            sentences(text),
            [
                "Prose wrapped over lines",
                "item one",
                "item two",
                "third",
                "End."
            ]
        );
        assert_eq!(block_start("#hashtag"), None);
        assert_eq!(block_start("-5 degrees"), None);
        assert_eq!(block_start("2024 was"), None);
    }

    #[test]
    fn marker_before_final_punctuation() {
        assert_eq!(cite("Sunny.", 1), "Sunny [1].");
        assert_eq!(cite("He said \"go!\"", 2), "He said \"go [2]!\"");
        assert_eq!(cite("Time (UTC (0)).", 5), "Time (UTC (0)) [5].");
        assert_eq!(cite("(aside)", 6), "(aside) [6]");
        assert_eq!(cite("No stop", 3), "No stop [3]");
        assert_eq!(cite("...", 4), "... [4]");
    }

    #[test]
    fn best_sentences_with_their_markers() {
        let ps = [
            passage(1, "Cats", "Cats sleep a lot. Cats purr."),
            passage(
                2,
                "Dogs",
                "Dogs bark at night. Dogs sleep outside sometimes.",
            ),
            passage(3, "Fish", "Fish swim."),
        ];
        let a = compose(&ps, "Why do dogs sleep outside?");
        assert_eq!(
            a,
            "Dogs sleep outside sometimes [2]. Dogs bark at night [2]. Cats sleep a lot [1]."
        );
    }

    #[test]
    fn no_sources_and_no_match() {
        let a = compose(&[], "anything");
        assert_eq!(a, NO_SOURCES_ANSWER);
        assert!(!a.contains('['));
        let a = compose(&[passage(1, "T", "Alpha beta. Gamma.")], "zeta?");
        assert_eq!(a, format!("{NO_MATCH_LEAD} Alpha beta [1]."));
        let a = compose(&[passage(1, "T", "")], "zeta?");
        assert!(a.ends_with("\"T\" [1]."), "{a}");
    }

    #[test]
    fn pieces_cover_the_text() {
        let text = "  Sunny, high 24 °C [12].\nextraordinarily ok ";
        let p = pieces(text);
        assert_eq!(p.concat(), text);
        assert_eq!(
            p,
            [
                "  Sunny", ",", " high", " 24", " °", "C", " [", "12", "]", ".", "\nextrao",
                "rdinar", "ily", " ok", " "
            ]
        );
        assert_eq!(count_tokens(""), 0);
        assert!(pieces("").is_empty());
    }
}

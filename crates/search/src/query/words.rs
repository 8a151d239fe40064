//! Words of a turn and what they are: the tokenizer and the bundled word
//! lists of query formation ([`super`]).
//!
//! * [`words`] splits text into words (letters, digits and inner
//!   apostrophes; a possessive `'s` is dropped), each with whether it
//!   starts a sentence.
//! * [`class`] says what a word is: a function word (`function.txt`), an
//!   anaphor (`anaphor.txt`, strong or weak), a common content word
//!   (`common.txt`), or a word that may name a subject.
//!
//! The lists are small, bundled, and lowercase; they are read once into
//! hash sets.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

/// FNV-1a: short keys, no untrusted-key flooding concern worth SipHash's
/// cost here (the maps are bounded by the scan limits).
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A hash map with [`Fnv`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// One word of a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Word<'a> {
    /// The word as written, without a possessive `'s`.
    pub(super) text: &'a str,
    /// It starts the text or a sentence (after `.`, `?`, `!`, `:` or a
    /// line break), where a capital letter says nothing.
    pub(super) initial: bool,
}

impl Word<'_> {
    /// Starts with an uppercase letter, or is an all-caps word of two or
    /// more letters.
    pub(super) fn capitalised(&self) -> bool {
        self.text.chars().next().is_some_and(char::is_uppercase)
    }

    /// Letters and more than one uppercase letter, none lowercase (`SSE`,
    /// `API`, `FUJIMORI`).
    pub(super) fn all_caps(&self) -> bool {
        let mut upper = 0;
        for c in self.text.chars() {
            if c.is_lowercase() {
                return false;
            }
            if c.is_uppercase() {
                upper += 1;
            }
        }
        upper > 1
    }

    /// Digits only.
    pub(super) fn numeric(&self) -> bool {
        self.text.chars().all(|c| c.is_ascii_digit())
    }
}

fn is_apostrophe(c: char) -> bool {
    c == '\'' || c == '\u{2019}'
}

/// The words of `text`, in order.
pub(super) fn words(text: &str) -> impl Iterator<Item = Word<'_>> {
    let mut rest = text;
    let mut initial = true;
    std::iter::from_fn(move || {
        loop {
            // Skip to the next word character, noting sentence ends.
            let start = rest.find(|c: char| {
                if matches!(c, '.' | '?' | '!' | ':' | '\n') {
                    initial = true;
                }
                c.is_alphanumeric()
            })?;
            rest = &rest[start..];
            let end = rest
                .char_indices()
                .find(|&(i, c)| {
                    !(c.is_alphanumeric()
                        || (is_apostrophe(c)
                            && rest[i + c.len_utf8()..]
                                .chars()
                                .next()
                                .is_some_and(char::is_alphanumeric)))
                })
                .map_or(rest.len(), |(i, _)| i);
            let mut w = &rest[..end];
            rest = &rest[end..];
            for s in ["'s", "\u{2019}s", "'S"] {
                if let Some(stem) = w.strip_suffix(s) {
                    w = stem;
                }
            }
            if w.is_empty() {
                continue;
            }
            let word = Word { text: w, initial };
            initial = false;
            return Some(word);
        }
    })
}

/// What a word is for query formation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    /// Articles, prepositions, pronouns, auxiliaries, question words.
    Function,
    /// Refers back; `strong` (possessives) or weak.
    Anaphor { strong: bool },
    /// A content word that never names a subject (`population`, `big`).
    Common,
    /// Anything else: may name a subject.
    Other,
}

/// Every listed word and its class, in one map.
type Lists = FastMap<&'static str, Class>;

fn entries(text: &'static str) -> impl Iterator<Item = &'static str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(str::split_whitespace)
}

fn lists() -> &'static Lists {
    static LISTS: OnceLock<Lists> = OnceLock::new();
    LISTS.get_or_init(|| {
        let mut m = Lists::default();
        // Later lists do not override earlier ones: anaphors first.
        for (w, s) in include_str!("anaphor.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('\t'))
        {
            m.entry(w).or_insert(Class::Anaphor {
                strong: s.trim() == "strong",
            });
        }
        for w in entries(include_str!("function.txt")) {
            m.entry(w).or_insert(Class::Function);
        }
        for w in entries(include_str!("common.txt")) {
            m.entry(w).or_insert(Class::Common);
        }
        m
    })
}

/// The class of `lower` (a lowercase word).
pub(super) fn class(lower: &str) -> Class {
    let lower = lower.strip_suffix('\'').unwrap_or(lower);
    lists().get(lower).copied().unwrap_or(Class::Other)
}

/// `word` in lowercase (and `’` as `'`) into `out`.
pub(super) fn lowercase_into(word: &str, out: &mut String) {
    out.clear();
    if word.is_ascii() {
        out.push_str(word);
        out.make_ascii_lowercase();
    } else {
        for c in word.chars() {
            if c == '\u{2019}' {
                out.push('\'');
            } else {
                out.extend(c.to_lowercase());
            }
        }
    }
}

/// `word` in lowercase; borrowed when it already is.
pub(super) fn lowercase(word: &str) -> std::borrow::Cow<'_, str> {
    if word.chars().any(char::is_uppercase) {
        std::borrow::Cow::Owned(word.to_lowercase().replace('\u{2019}', "'"))
    } else if word.contains('\u{2019}') {
        std::borrow::Cow::Owned(word.replace('\u{2019}', "'"))
    } else {
        std::borrow::Cow::Borrowed(word)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(s: &str) -> Vec<(&str, bool)> {
        words(s).map(|w| (w.text, w.initial)).collect()
    }

    #[test]
    fn splits_words_and_sentences() {
        assert_eq!(
            texts("The capital of Peru is Lima [1]. It's Peru's   coast?no"),
            [
                ("The", true),
                ("capital", false),
                ("of", false),
                ("Peru", false),
                ("is", false),
                ("Lima", false),
                ("1", false),
                ("It", true),
                ("Peru", false),
                ("coast", false),
                ("no", true),
            ]
        );
        assert_eq!(
            texts("Côte d'Ivoire’s cocoa"),
            [("Côte", true), ("d'Ivoire", false), ("cocoa", false)]
        );
        assert_eq!(texts("'quoted' -- x'"), [("quoted", true), ("x", false)]);
        assert!(texts("").is_empty());
        assert!(texts(" ?! ").is_empty());
    }

    #[test]
    fn classes() {
        assert_eq!(class("its"), Class::Anaphor { strong: true });
        assert_eq!(class("there"), Class::Anaphor { strong: false });
        assert_eq!(class("what"), Class::Function);
        assert_eq!(class("population"), Class::Common);
        assert_eq!(class("peru"), Class::Other);
        assert_eq!(lowercase("It’s").as_ref(), "it's");
        assert_eq!(class(&lowercase("It’s")), Class::Anaphor { strong: false });
    }

    #[test]
    fn word_shapes() {
        let w = |t| Word {
            text: t,
            initial: false,
        };
        assert!(w("SSE").all_caps() && w("SSE").capitalised());
        assert!(!w("Peru").all_caps() && w("Peru").capitalised());
        assert!(!w("I").all_caps());
        assert!(w("1533").numeric() && !w("x1").numeric());
    }
}

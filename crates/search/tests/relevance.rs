//! Relevance of the `local` provider over the bundled corpus: questions
//! whose answering document is known (the Factbook profile, or the
//! project's `docs/`). Runs through [`Search`] with the default config, as
//! the gateway does.
//!
//! Each part's questions are measured where they cannot depend on the other
//! part's wording (docs/search.md, "The bundled corpus"): the Factbook
//! questions over the Factbook passages alone (prints recall@1 and
//! recall@3; asserts at most one miss in the top 3), the docs questions over the whole
//! bundled corpus (each answered in the top 3, ahead of the Factbook). What
//! the whole corpus must keep for the Factbook side, the example city
//! ranking first with no docs passage near it, has its own test below.

use citestream_search::{LocalIndex, Search, SearchConfig, SearchQuery, Source};

/// (question, the title of the document that answers it).
const QUESTIONS: &[(&str, &str)] = &[
    (
        "What is the capital of Portugal?",
        "Portugal - The World Factbook",
    ),
    (
        "What is the climate like in Norway?",
        "Norway - The World Factbook",
    ),
    (
        "Which languages are spoken in Switzerland?",
        "Switzerland - The World Factbook",
    ),
    (
        "What are the main industries of Japan?",
        "Japan - The World Factbook",
    ),
    (
        "How many people live in Brazil?",
        "Brazil - The World Factbook",
    ),
    (
        "When did Slovenia become independent?",
        "Slovenia - The World Factbook",
    ),
    (
        "Does Iceland have volcanoes?",
        "Iceland - The World Factbook",
    ),
    (
        "What is the terrain of Nepal like?",
        "Nepal - The World Factbook",
    ),
    ("What does Kenya export?", "Kenya - The World Factbook"),
    (
        "What religions are practiced in Indonesia?",
        "Indonesia - The World Factbook",
    ),
    (
        "Which city is the capital of Australia?",
        "Australia - The World Factbook",
    ),
    (
        "What's the weather like in Cairo?",
        "Egypt - The World Factbook",
    ),
    (
        "Which is the largest ocean on Earth?",
        "Pacific Ocean - The World Factbook",
    ),
    (
        "Is the Arctic Ocean covered by ice?",
        "Arctic Ocean - The World Factbook",
    ),
    (
        "What is the life expectancy in Monaco?",
        "Monaco - The World Factbook",
    ),
    (
        "Where is Madagascar located?",
        "Madagascar - The World Factbook",
    ),
    (
        "What is the national holiday of France?",
        "France - The World Factbook",
    ),
    (
        "What kind of government does Saudi Arabia have?",
        "Saudi Arabia - The World Factbook",
    ),
    (
        "What crops are grown in Ethiopia?",
        "Ethiopia - The World Factbook",
    ),
    (
        "Is Chile prone to earthquakes?",
        "Chile - The World Factbook",
    ),
    (
        "Is Ottawa the capital of Canada?",
        "Canada - The World Factbook",
    ),
    (
        "How cold does it get in Reykjavik?",
        "Iceland - The World Factbook",
    ),
    (
        "What are the biggest cities in Turkey?",
        "Turkey - The World Factbook",
    ),
    (
        "Give me a short history of Vietnam",
        "Vietnam - The World Factbook",
    ),
    (
        "How is the economy of Germany doing?",
        "Germany - The World Factbook",
    ),
    (
        "What languages do people speak in India?",
        "India - The World Factbook",
    ),
    ("What time zone is Lima in?", "Peru - The World Factbook"),
    ("Weather in Nairobi in July", "Kenya - The World Factbook"),
    (
        "What is Greenland's climate?",
        "Greenland - The World Factbook",
    ),
    (
        "When was the European Union founded?",
        "European Union - The World Factbook",
    ),
    (
        "What is the population of the whole world?",
        "World - The World Factbook",
    ),
    (
        "What are the ethnic groups of Malaysia?",
        "Malaysia - The World Factbook",
    ),
    (
        "What is the weather forecast for Lisbon this weekend?",
        "Portugal - The World Factbook",
    ),
    ("How do I hash an API key for citestream?", GATEWAY_DOC),
    (
        "Which header tells whether a search was injected?",
        GATEWAY_DOC,
    ),
    (
        "What does /readyz answer while the gateway is draining?",
        GATEWAY_DOC,
    ),
    (
        "How do I use a SearXNG instance as the search provider?",
        SEARCH_DOC,
    ),
    (
        "Which front matter keys does the local index read?",
        SEARCH_DOC,
    ),
    (
        "How do I run citestream as an Envoy external processor?",
        "Using citestream with Envoy",
    ),
    (
        "How do I add citestream to a LiteLLM proxy from Python?",
        "Using citestream from Python",
    ),
];

/// Titles of the project's docs (`docs/*.md`, their first heading).
const GATEWAY_DOC: &str = "Running the citestream gateway";
const SEARCH_DOC: &str = "Search providers and the local index";

async fn top3(search: &Search, q: &str) -> Vec<Source> {
    search
        .search(&SearchQuery {
            text: q.to_owned(),
            context: vec![],
        })
        .await
        .expect("local search does not fail")
        .into_iter()
        .take(3)
        .collect()
}

/// Whether a question's answer is one of the project's docs.
fn is_docs_title(title: &str) -> bool {
    !title.ends_with(" - The World Factbook")
}

/// The bundled corpus without the project's docs.
fn factbook_search() -> Search {
    let passages: Vec<Source> = LocalIndex::bundled()
        .passages()
        .iter()
        .filter(|s| !s.url.as_deref().unwrap_or("").starts_with("docs/"))
        .cloned()
        .collect();
    assert!(
        passages.len() > 1000,
        "{} Factbook passages",
        passages.len()
    );
    Search::with_provider(
        Box::new(LocalIndex::new(passages)),
        &SearchConfig::default(),
    )
    .unwrap()
}

#[tokio::test]
async fn recall_over_the_factbook() {
    let search = factbook_search();
    let questions: Vec<_> = QUESTIONS
        .iter()
        .filter(|(_, want)| !is_docs_title(want))
        .collect();
    let (mut at1, mut at3) = (0, 0);
    let mut misses = Vec::new();
    for (q, want) in &questions {
        let got = top3(&search, q).await;
        let titles: Vec<&str> = got.iter().filter_map(|s| s.title.as_deref()).collect();
        if titles.first() == Some(want) {
            at1 += 1;
        } else {
            println!("not first: {q:?}: want {want:?}, got {titles:?}");
        }
        if titles.contains(want) {
            at3 += 1;
        } else {
            misses.push(format!("{q:?}: want {want:?}, got {titles:?}"));
        }
    }
    let n = questions.len() as f64;
    let (r1, r3) = (f64::from(at1) / n, f64::from(at3) / n);
    println!(
        "questions: {}, recall@1: {r1:.3} ({at1}), recall@3: {r3:.3} ({at3})",
        questions.len()
    );
    for m in &misses {
        println!("miss: {m}");
    }
    assert!(questions.len() >= 30);
    // One miss at most (the bar the 40 questions of both parts had:
    // 39 of 40). Known: "How many people live in Brazil?" ranks Japan's
    // people passage (it names Brazilians) first without the docs' words
    // in the statistics; docs/search.md, "The bundled corpus".
    assert!(
        misses.len() <= 1,
        "recall@3 {r3:.3}: {} misses:\n{}",
        misses.len(),
        misses.join("\n")
    );
}

/// The questions about the project find its page in the top 3 of the
/// whole bundled corpus, as a user of the bundled corpus asks them.
#[tokio::test]
async fn docs_questions_over_the_bundled_corpus() {
    let search = Search::new(&SearchConfig::default()).unwrap();
    let questions: Vec<_> = QUESTIONS
        .iter()
        .filter(|(_, want)| is_docs_title(want))
        .collect();
    assert!(questions.len() >= 5);
    for (q, want) in questions {
        let got = top3(&search, q).await;
        let titles: Vec<&str> = got.iter().filter_map(|s| s.title.as_deref()).collect();
        assert!(
            titles.contains(want),
            "{q:?}: want {want:?}, got {titles:?}"
        );
    }
}

/// The seed's question, and the short form, find Portugal passages that
/// name Lisbon (the capital and its climate).
#[tokio::test]
async fn the_lisbon_questions_find_portugal() {
    let search = Search::new(&SearchConfig::default()).unwrap();
    for q in [
        "weather in Lisbon this weekend",
        "What is the weather forecast for Lisbon this weekend?",
    ] {
        let got = top3(&search, q).await;
        let hit = got.iter().find(|s| {
            s.title.as_deref() == Some("Portugal - The World Factbook")
                && s.heading.as_deref() == Some("Geography and climate")
        });
        let hit = hit.unwrap_or_else(|| panic!("{q}: {got:#?}"));
        let text = hit.text.as_deref().unwrap();
        assert!(
            text.contains("Capital: Lisbon") && text.contains("Climate"),
            "{text}"
        );
        assert_eq!(
            hit.url.as_deref(),
            Some(
                "https://www.cia.gov/the-world-factbook/countries/portugal/#geography-and-climate"
            )
        );
        assert_eq!(hit.year.as_deref(), Some("2015"));
        assert_eq!(hit.author.as_deref(), Some("Central Intelligence Agency"));
    }
}

/// The demo questions about the city are about the place, not about this
/// project: Portugal's Factbook profile is the first result, ahead of any
/// passage of the project's docs (which must never be about the example
/// city; docs/ is embedded in the corpus as it is).
#[tokio::test]
async fn city_questions_rank_the_factbook_first() {
    let search = Search::new(&SearchConfig::default()).unwrap();
    for q in [
        "What's the weather in Lisbon this weekend?",
        "What is Lisbon known for?",
        "weather in Lisbon this weekend",
    ] {
        let got = top3(&search, q).await;
        let first = got.first().unwrap_or_else(|| panic!("{q}: no results"));
        assert_eq!(
            first.title.as_deref(),
            Some("Portugal - The World Factbook"),
            "{q}: {got:#?}"
        );
        assert!(
            got.iter()
                .all(|s| !s.url.as_deref().unwrap_or("").starts_with("docs/")),
            "{q}: a docs passage in the top 3: {got:#?}"
        );
    }
}

/// The project's docs are in the bundled corpus with their metadata: the
/// title from the first heading, the URL `docs/<file>.md#<heading>`, the
/// author "citestream contributors".
#[tokio::test]
async fn docs_passages_carry_their_metadata() {
    let search = Search::new(&SearchConfig::default()).unwrap();
    let got = top3(&search, "How do I hash an API key for citestream?").await;
    let hit = got
        .iter()
        .find(|s| s.title.as_deref() == Some(GATEWAY_DOC))
        .unwrap_or_else(|| panic!("{got:#?}"));
    assert_eq!(
        hit.url.as_deref(),
        Some("docs/gateway.md#authentication-and-hashed-api-keys")
    );
    assert_eq!(hit.author.as_deref(), Some("citestream contributors"));
    assert_eq!(
        hit.heading.as_deref(),
        Some("Authentication and hashed API keys")
    );
    assert!(hit.text.as_deref().unwrap().contains("sha256sum"));
}

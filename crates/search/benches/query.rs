//! Query formation's cost (`search.query = "context"`): a 20-turn
//! conversation ending in a follow-up (the carrying path, the slowest),
//! formed with the `local` index's subject signal and with the corpus-free
//! one, beside `query = "last"` (the question alone) and the local search
//! that follows (the baseline formation must stay small against). Then a
//! 27 MiB last user message through the whole request side: the core's
//! request inspection, formation, and the local search.
//!
//! Run: `cargo bench -p citestream-search --bench query` (a few seconds).

use std::hint::black_box;
use std::time::{Duration, Instant};

use citestream::request::{Endpoint, Turn, inspect};
use citestream_search::query::form;
use citestream_search::{LocalIndex, QueryMode, SearchQuery};

/// Ten exchanges about ten countries, each answer in its own words (so
/// the per-call word cache sees what a real conversation gives it), ending
/// in a follow-up that does not name its subject.
fn conversation() -> SearchQuery {
    let exchanges = [
        (
            "What is the capital of Peru?",
            "The capital of Peru is Lima, a coastal city founded in 1535 by Francisco Pizarro [1]. It is the country's largest city and its political, cultural and financial centre.",
        ),
        (
            "And how is the climate there?",
            "Peru's climate varies from tropical in the east to dry desert in the west; it is temperate to frigid in the Andes [1]. The coast is cooled by the Humboldt Current.",
        ),
        (
            "What does Chile export?",
            "Chile exports copper, fruit, fish products, paper and pulp, chemicals and wine [1]. Copper alone is about half of the value of its exports.",
        ),
        (
            "Is Chile prone to earthquakes?",
            "Yes. Severe earthquakes are frequent in Chile; active volcanism and tsunamis are further hazards [1]. The 1960 Valdivia earthquake was the strongest ever recorded.",
        ),
        (
            "Tell me about Kenya's population.",
            "Kenya has about 45 million people; the population is young and growing quickly [1]. Nairobi and Mombasa are the largest urban areas.",
        ),
        (
            "Which languages do they speak in Kenya?",
            "English and Kiswahili are official in Kenya, and many indigenous languages are spoken [1].",
        ),
        (
            "What are Japan's main industries?",
            "Japan is among the world's largest and most technologically advanced producers of motor vehicles, electronic equipment, machine tools, steel and nonferrous metals, ships, chemicals and textiles [1].",
        ),
        (
            "Does Japan have volcanoes?",
            "Many dormant and some active volcanoes; about 1,500 seismic occurrences, mostly tremors, happen every year [1]. Tsunamis and typhoons also strike.",
        ),
        (
            "What is the government of Norway?",
            "Norway is a parliamentary constitutional monarchy; the king is the head of state and the prime minister leads the government [1].",
        ),
        (
            "What does Norway export?",
            "Norway exports petroleum and petroleum products, machinery and equipment, metals, chemicals, ships and fish [1]. Oil and gas are about half of its exports.",
        ),
    ];
    let mut context = Vec::new();
    for (q, a) in exchanges {
        for (role, text) in [("user", q), ("assistant", a)] {
            context.push(Turn {
                role: role.into(),
                text: text.into(),
            });
        }
    }
    SearchQuery {
        text: "And how many people live there?".into(),
        context,
    }
}

/// A named measurement.
type Row<'a> = (&'a str, Box<dyn Fn() + 'a>);

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() * 99 / 100])
}

fn measure(rounds: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..rounds / 10 {
        f();
    }
    let mut v = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        f();
        v.push(t.elapsed());
    }
    percentiles(v)
}

fn main() {
    let index = LocalIndex::bundled();
    let q = conversation();
    let local = |w: &str| Some(index.subject(w));
    let none = |_: &str| None;
    let formed = form(&q, QueryMode::Context, 1000, &local);
    println!("formed: {:?}", formed.text());
    println!();
    println!("20-turn conversation | p50 | p99");
    println!("---|---|---");
    let rows: [Row<'_>; 4] = [
        (
            "form, context, local subject signal",
            Box::new(|| {
                black_box(form(black_box(&q), QueryMode::Context, 1000, &local));
            }),
        ),
        (
            "form, context, corpus-free signal",
            Box::new(|| {
                black_box(form(black_box(&q), QueryMode::Context, 1000, &none));
            }),
        ),
        (
            "form, last (baseline)",
            Box::new(|| {
                black_box(form(black_box(&q), QueryMode::Last, 1000, &local));
            }),
        ),
        (
            "local search of the formed query (baseline)",
            Box::new(|| {
                black_box(index.search(black_box(formed.text()), 5));
            }),
        ),
    ];
    for (name, f) in rows {
        let (p50, p99) = measure(20_000, f);
        println!("{name} | {p50:.1?} | {p99:.1?}");
    }

    // A 27 MiB last user message, through the request side.
    let mut huge = "lorem ipsum dolor sit amet ".repeat((27 << 20) / 27);
    huge.push_str("and what is the capital of Peru?");
    let body = serde_json::to_vec(&serde_json::json!({
        "model": "m", "web_search": true,
        "messages": [{"role": "user", "content": huge}],
    }))
    .unwrap();
    println!();
    println!("27 MiB last user message | median of 5");
    println!("---|---");
    let (inspect_t, _) = measure(5, || {
        black_box(inspect(Endpoint::ChatCompletions, body.clone()).unwrap());
    });
    let query = inspect(Endpoint::ChatCompletions, body.clone())
        .unwrap()
        .query()
        .cloned()
        .unwrap();
    let (form_t, _) = measure(5, || {
        black_box(form(&query, QueryMode::Context, 1000, &local));
    });
    let f = form(&query, QueryMode::Context, 1000, &local);
    let (search_t, _) = measure(5, || {
        black_box(index.search(f.text(), 5));
    });
    let (whole_t, _) = measure(5, || {
        black_box(index.search(&query.text, 5));
    });
    println!("core request inspection (parse, extract) | {inspect_t:.1?}");
    println!("form (max_query_chars = 1000) | {form_t:.1?}");
    println!("local search of the formed query | {search_t:.1?}");
    println!("local search of the whole message (before: no max_query_chars) | {whole_t:.1?}");
}

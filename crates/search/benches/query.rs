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

fn conversation() -> SearchQuery {
    let subjects = [
        "Peru", "Chile", "Kenya", "Japan", "Norway", "Brazil", "Egypt", "Nepal", "Canada", "India",
    ];
    let mut context = Vec::new();
    for s in subjects {
        context.push(Turn {
            role: "user".into(),
            text: format!("What is the capital of {s}, and what is its climate like?"),
        });
        context.push(Turn {
            role: "assistant".into(),
            text: format!(
                "The capital of {s} is listed in its profile [1]. The climate varies by region: \
                 the coast is mild and humid, the interior is drier, and the mountains are cold \
                 for much of the year [1]. Most of the population lives in the cities, and the \
                 economy relies on services, agriculture and exports of raw materials [2]. The \
                 country borders several neighbours and has a long coastline [1]."
            ),
        });
    }
    SearchQuery {
        text: "And what does it export?".into(),
        context,
    }
}

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
    let local = |w: &str| Some(index.rarity(w));
    let none = |_: &str| None;
    let formed = form(&q, QueryMode::Context, 1000, &local);
    println!("formed: {:?}", formed.text());
    println!();
    println!("20-turn conversation | p50 | p99");
    println!("---|---|---");
    let rows: [(&str, Box<dyn Fn()>); 4] = [
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

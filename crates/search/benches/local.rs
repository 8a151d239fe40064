//! The `local` provider's costs: index build time and memory, and query
//! latency (p50/p99), on the bundled corpus and on a generated folder of
//! about 100 MB (`BENCH_MB` to change; written to a temp dir at bench time
//! and removed after). A naive baseline in the same run — scanning every
//! passage for the query's words, which is what a hand-written search
//! without an index does — gives the latency a ratio.
//!
//! Run: `cargo bench -p citestream-search --bench local`
//! (about a minute for the 100 MB part on 2 vCPUs).
//!
//! Memory is the process's resident set (Linux `/proc/self/status`
//! `VmRSS`) after the build minus before, with the input files' text
//! already read; it is a coarse figure (allocator slack included).

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use citestream_search::LocalIndex;

/// Questions asked of each index (a mix of country, topic and stop words),
/// one per line; the scorer's tests ask them too.
const QUESTIONS: &str = include_str!("questions.txt");

fn main() {
    let mb: usize = std::env::var("BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    println!(
        "corpus | passages | build | RSS added | query p50 | query p99 | naive scan p50 | naive p99 | p50 ratio (naive / index)"
    );
    println!("---|---|---|---|---|---|---|---|---");
    bench("bundled", LocalIndex::bundled, None, 200, 5);
    if mb > 0 {
        let dir = generate(mb);
        let d = dir.clone();
        bench(
            &format!("generated {mb} MB"),
            move || LocalIndex::from_dir(&d).expect("index"),
            Some(&dir),
            20,
            1,
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn bench(
    name: &str,
    build: impl Fn() -> LocalIndex,
    dir: Option<&PathBuf>,
    rounds: usize,
    naive_rounds: usize,
) {
    // Warm the page cache so the build measures indexing, not the disk.
    if let Some(d) = dir {
        for e in std::fs::read_dir(d).expect("dir").flatten() {
            black_box(std::fs::read(e.path()).ok());
        }
    }
    let before = rss_kib();
    let t = Instant::now();
    let index = build();
    let build_time = t.elapsed();
    let added = rss_kib().saturating_sub(before);

    let texts: Vec<String> = index_texts(&index);
    let mut lat = Vec::new();
    let mut naive = Vec::new();
    for round in 0..rounds {
        for q in QUESTIONS.lines() {
            let t = Instant::now();
            black_box(index.search(q, 5));
            lat.push(t.elapsed());
            // The naive scan is slow on large corpora: fewer samples.
            if round < naive_rounds {
                let t = Instant::now();
                black_box(naive_scan(&texts, q, 5));
                naive.push(t.elapsed());
            }
        }
    }
    let (p50, p99) = (pct(&mut lat, 50), pct(&mut lat, 99));
    let (n50, n99) = (pct(&mut naive, 50), pct(&mut naive, 99));
    println!(
        "{name} | {} | {build_time:.2?} | {:.1} MiB | {p50:.2?} | {p99:.2?} | {n50:.2?} | {n99:.2?} | {:.1}x",
        index.len(),
        added as f64 / 1024.0,
        n50.as_secs_f64() / p50.as_secs_f64().max(1e-9),
    );
}

/// The text the baseline scans: each passage's title, heading and text.
fn index_texts(index: &LocalIndex) -> Vec<String> {
    index
        .passages()
        .iter()
        .map(|s| {
            format!(
                "{} {} {}",
                s.title.as_deref().unwrap_or(""),
                s.heading.as_deref().unwrap_or(""),
                s.text.as_deref().unwrap_or("")
            )
        })
        .collect()
}

/// Scores every passage by how often it contains each query word (lowercased,
/// words of 3+ letters), keeps the best `k`.
fn naive_scan(texts: &[String], q: &str, k: usize) -> Vec<usize> {
    let words: Vec<String> = q
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 3)
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, usize)> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t = t.to_lowercase();
            (words.iter().map(|w| t.matches(w.as_str()).count()).sum(), i)
        })
        .filter(|(s, _)| *s > 0)
        .collect();
    scored.sort_unstable_by(|a, b| b.cmp(a));
    scored.into_iter().take(k).map(|(_, i)| i).collect()
}

fn pct(v: &mut [Duration], p: usize) -> Duration {
    v.sort_unstable();
    v[((v.len() - 1) * p) / 100]
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Writes about `mb` MB of markdown documents (5 sections of ~1 KB each)
/// whose words are drawn from the bundled corpus's own vocabulary with a
/// Zipf-like skew, so term statistics resemble real text.
fn generate(mb: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("citestream-search-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let index = LocalIndex::bundled();
    let mut vocab: Vec<String> = index
        .passages()
        .iter()
        .filter_map(|s| s.text.as_deref())
        .flat_map(|t| t.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    vocab.sort();
    vocab.dedup();
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let target = mb * 1_000_000;
    let (mut written, mut n) = (0, 0);
    while written < target {
        let mut doc = format!(
            "---\ntitle: Generated document {n}\nurl: https://example.invalid/doc/{n}\n---\n"
        );
        for s in 0..5 {
            doc.push_str(&format!("\n## Section {s}\n\n"));
            let mut len = 0;
            while len < 1000 {
                // Zipf-like: small indices far more often.
                let r = (next() % 1_000_000) as f64 / 1_000_000.0;
                let i = ((vocab.len() as f64).powf(r) as usize)
                    .saturating_sub(1)
                    .min(vocab.len() - 1);
                let w = &vocab[i];
                doc.push_str(w);
                doc.push(' ');
                len += w.len() + 1;
            }
            doc.push('\n');
        }
        written += doc.len();
        std::fs::write(dir.join(format!("doc{n:06}.md")), doc).expect("write");
        n += 1;
    }
    dir
}

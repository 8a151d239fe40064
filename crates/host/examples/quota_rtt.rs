//! Quota round trip (one reserve + its commit) on the Redis store, p50 and
//! p99, with 1 and 100 concurrent callers: `quota_rtt URL` for one server,
//! `quota_rtt --cluster SEED...` for a Redis Cluster. Bounded: 2,000
//! round trips per concurrency. Run by `tests/e2e/bench_cache.py`, which
//! starts the servers on loopback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use citestream::quota::{QuotaStore, SystemClock};
use citestream_host::store::{RedisConfig, RedisStore};

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let store = if args.first().map(String::as_str) == Some("--cluster") {
        RedisStore::cluster(&args[1..], RedisConfig::default(), SystemClock).expect("seed nodes")
    } else {
        let url = args
            .first()
            .expect("usage: quota_rtt URL | --cluster SEED...");
        RedisStore::with_config(
            redis::Client::open(url.as_str()).expect("URL"),
            RedisConfig::default(),
            SystemClock,
        )
    };
    let store = Arc::new(store);
    // Connect and load the scripts before measuring.
    let t = store.try_reserve("warm", 1_000_000).await.unwrap().unwrap();
    store.commit(&t).await.unwrap();
    for concurrency in [1usize, 100] {
        let total = 2_000;
        let per = total / concurrency;
        let tasks: Vec<_> = (0..concurrency)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let account = format!("bench-{concurrency}-{i}");
                    let mut times = Vec::with_capacity(per);
                    for _ in 0..per {
                        let t0 = Instant::now();
                        let t = store
                            .try_reserve(&account, u32::MAX)
                            .await
                            .unwrap()
                            .unwrap();
                        assert!(store.commit(&t).await.unwrap());
                        times.push(t0.elapsed());
                    }
                    times
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort();
        println!(
            "{} concurrency={concurrency} n={} p50={:.3}ms p99={:.3}ms",
            if store.is_cluster() {
                "cluster"
            } else {
                "single"
            },
            all.len(),
            pct(&all, 0.5),
            pct(&all, 0.99)
        );
    }
}

//! The search cache (`citestream_host::cache`) on the `http` provider
//! against a loopback backend that counts its requests: what the
//! end-to-end tests (tests/e2e/test_gateway_search_cache.py) cannot set up
//! exactly: a cancelled first search hands over to a waiting one, a cache
//! in an unreachable Redis is a miss and never a failure, and the entry
//! in Redis carries the TTL.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use citestream::quota::ManualClock;
use citestream::request::SearchQuery;
use citestream_host::cache::{CacheResult, SearchCache, Searched};
use citestream_host::config::Config;
use citestream_host::store::{SharedClock, Store};
use citestream_search::Search;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const ANSWER: &str = r#"[{"link":"https://en.wikipedia.org/wiki/Lisbon","title":"Lisbon","snippet":"Lisbon is the capital."}]"#;

/// A loopback `http`-provider backend answering `ANSWER` after `delay`;
/// the count of requests it received.
async fn backend(delay: Duration) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/search", l.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                if s.read(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                let r = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{ANSWER}",
                    ANSWER.len()
                );
                let _ = s.write_all(r.as_bytes()).await;
            });
        }
    });
    (url, count)
}

fn setup(url: &str, quota: &str) -> (Arc<Search>, Arc<SearchCache>, Store) {
    let toml = format!(
        "[search]\nprovider = \"http\"\ncache_ttl = \"60s\"\n[search.http]\nurl = \"{url}\"\n{quota}"
    );
    let cfg = Config::from_toml_with_env(&toml, &|_| None).unwrap();
    let store = Store::from_config(
        &cfg,
        SharedClock(Arc::new(ManualClock::new(4_102_444_799 - 3600))),
    )
    .unwrap();
    let search = Arc::new(Search::new(&cfg.search).unwrap());
    let cache = Arc::new(SearchCache::from_config(&cfg, &store).unwrap());
    (search, cache, store)
}

/// What the request side does: the cache around the provider call.
async fn ask(search: &Search, cache: &SearchCache, text: &str) -> Searched {
    let q = SearchQuery {
        text: text.into(),
        context: vec![],
    };
    let formed = search.form(&q).await;
    cache
        .search(search.provider_name(), formed.text(), || {
            search.search_formed(&formed)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_first_search_hands_over_to_a_waiting_one() {
    let (url, count) = backend(Duration::from_millis(400)).await;
    let (search, cache, _store) = setup(&url, "");
    let spawn = |search: Arc<Search>, cache: Arc<SearchCache>| {
        tokio::spawn(async move { ask(&search, &cache, "capital of Portugal").await })
    };
    let first = spawn(search.clone(), cache.clone());
    while count.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = spawn(search.clone(), cache.clone());
    tokio::time::sleep(Duration::from_millis(50)).await; // waiting on the first
    assert_eq!(count.load(Ordering::SeqCst), 1, "the second did not wait");
    first.abort();
    let got = second.await.unwrap();
    assert_eq!(got.result.unwrap().len(), 1);
    assert_eq!(got.cache, CacheResult::Miss); // it ran the search itself
    assert_eq!(count.load(Ordering::SeqCst), 2);
    // Stored: the next one is a hit.
    let third = ask(&search, &cache, "CAPITAL  of portugal").await;
    assert_eq!(third.cache, CacheResult::Hit);
    assert_eq!(count.load(Ordering::SeqCst), 2);
    assert_eq!(cache.entries(), 1);
}

#[tokio::test]
async fn a_cache_in_an_unreachable_redis_is_a_miss_never_a_failure() {
    let (url, count) = backend(Duration::ZERO).await;
    let closed = common::free_port();
    let (search, cache, _store) = setup(
        &url,
        &format!("[quota]\nstore = \"redis\"\nredis_url = \"redis://127.0.0.1:{closed}/\"\n"),
    );
    for n in 1..=2 {
        let got = ask(&search, &cache, "capital of Portugal").await;
        assert_eq!(got.result.unwrap().len(), 1);
        assert_eq!(got.cache, CacheResult::Miss);
        assert_eq!(count.load(Ordering::SeqCst), n);
    }
}

#[tokio::test]
async fn the_redis_entry_expires_with_the_ttl() {
    let (url, count) = backend(Duration::ZERO).await;
    let server = common::RedisServer::start();
    let (search, cache, _store) = setup(
        &url,
        &format!(
            "[quota]\nstore = \"redis\"\nredis_url = \"{}\"\n",
            server.url()
        ),
    );
    assert_eq!(ask(&search, &cache, "q").await.cache, CacheResult::Miss);
    assert_eq!(ask(&search, &cache, " Q ").await.cache, CacheResult::Hit);
    assert_eq!(count.load(Ordering::SeqCst), 1);
    let key = citestream_host::cache::cache_key("http", "q");
    let ttl: i64 = server.query(redis::cmd("PTTL").arg(&key));
    assert!(ttl > 55_000 && ttl <= 60_000, "{ttl}");
}

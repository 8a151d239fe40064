//! The Redis quota store against a real `redis-server` that each test
//! starts on a free loopback port (and kills when done): what only this
//! store does (replicas sharing one server, key expiry, leases, Redis going
//! away). The clauses every store shares are in `quota_contract.rs`.
//!
//! These tests need `redis-server` on PATH (Debian package `redis-server`;
//! `scripts/test.sh` installs it). Without it they FAIL: they are never
//! skipped.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use citestream::flow::{Flow, Outcome};
use citestream::quota::{ManualClock, QuotaErrorKind, QuotaStore, Usage, reserve, utc_day};
use citestream::request::{Endpoint, InjectOptions};
use citestream::sources::Source;
use citestream_host::store::{RedisConfig, RedisStore};
use common::RedisServer;

/// 2100-01-01 00:00:00 UTC minus one second: a day in the future, so keys
/// expiring at the end of the (fake) day are not already expired on the
/// server's real clock.
const LAST_SECOND: u64 = 4_102_444_799;

fn clock() -> ManualClock {
    ManualClock::new(LAST_SECOND - 3600)
}

async fn race(stores: Vec<RedisStore>, tasks: usize, limit: u32) -> usize {
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let store = stores[i % stores.len()].clone();
            tokio::spawn(async move {
                match reserve(&store, "acct", limit).await.unwrap() {
                    Some(r) => {
                        tokio::task::yield_now().await;
                        r.commit().await.unwrap()
                    }
                    None => false,
                }
            })
        })
        .collect();
    let mut n = 0;
    for h in handles {
        n += usize::from(h.await.unwrap());
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_sharing_one_redis_never_exceed_the_limit() {
    let server = RedisServer::start();
    let c = clock();
    // Two independent stores (own clients, own connections): two gateways.
    let a = server.store(c.clone());
    let b = server.store(c.clone());
    assert_eq!(race(vec![a.clone(), b.clone()], 64, 10).await, 10);
    assert_eq!(
        a.usage("acct", utc_day(LAST_SECOND))
            .await
            .unwrap()
            .committed,
        10
    );
    assert!(b.try_reserve("acct", 10).await.unwrap().is_none());
    assert!(a.try_reserve("acct", 10).await.unwrap().is_none());
}

#[tokio::test]
async fn rollover_at_midnight_utc_and_key_expiry() {
    let server = RedisServer::start();
    let c = ManualClock::new(LAST_SECOND);
    let mut cfg = RedisConfig::default();
    cfg.expiry_margin(Duration::from_secs(3600));
    let store = server.store_with(c.clone(), cfg);
    let day = utc_day(LAST_SECOND);
    let t1 = store.try_reserve("a", 2).await.unwrap().unwrap();
    let open = store.try_reserve("a", 2).await.unwrap().unwrap();
    assert!(store.commit(&t1).await.unwrap());
    assert!(
        store.try_reserve("a", 2).await.unwrap().is_none(),
        "used up at 23:59:59"
    );

    c.advance(1); // 00:00:00 UTC
    let t = store
        .try_reserve("a", 2)
        .await
        .unwrap()
        .expect("new day, new count");
    assert_eq!(t.day(), day + 1);
    // The reservation made before midnight commits into its own day.
    assert!(store.commit(&open).await.unwrap());
    assert_eq!(store.usage("a", day).await.unwrap().committed, 2);
    assert_eq!(
        store.usage("a", day + 1).await.unwrap(),
        Usage {
            committed: 0,
            reserved: 1
        }
    );

    // Keys expire at the end of their day plus the margin.
    let key = store.key("a", day);
    assert_eq!(key, "citestream:quota:2099-12-31:a");
    let exp: i64 = server.query(redis::cmd("EXPIRETIME").arg(&key));
    assert_eq!(exp as u64, (day + 1) * 86_400 + 3600);
    let exp2: i64 = server.query(redis::cmd("EXPIRETIME").arg(store.key("a", day + 1)));
    assert_eq!(exp2 as u64, (day + 2) * 86_400 + 3600);
}

#[tokio::test]
async fn abandoned_reservation_frees_its_slot_after_the_lease() {
    let server = RedisServer::start();
    let c = clock();
    let mut cfg = RedisConfig::default();
    cfg.lease(Duration::from_secs(30));
    let store = server.store_with(c.clone(), cfg);
    let t = store.try_reserve("a", 1).await.unwrap().unwrap();
    {
        // A dropped guard cannot release synchronously on Redis.
        let _r = citestream::quota::Reservation::new(&store, t.clone());
    }
    assert!(store.try_reserve("a", 1).await.unwrap().is_none());
    c.advance(29);
    assert!(
        store.try_reserve("a", 1).await.unwrap().is_none(),
        "lease still running"
    );
    c.advance(1);
    let t2 = store
        .try_reserve("a", 1)
        .await
        .unwrap()
        .expect("lease ran out");
    // The abandoned ticket no longer counts, even if it comes back.
    assert!(!store.commit(&t).await.unwrap());
    assert!(store.commit(&t2).await.unwrap());
    assert_eq!(
        store.usage("a", t.day()).await.unwrap(),
        Usage {
            committed: 1,
            reserved: 0
        }
    );
}

#[tokio::test]
async fn unreachable_redis_answers_without_search_and_reports() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again: nothing listens there
    let store = RedisStore::with_config(
        redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap(),
        RedisConfig::default(),
        clock(),
    );
    let start = Instant::now();
    let e = store.try_reserve("a", 10).await.unwrap_err();
    assert_eq!(e.kind(), QuotaErrorKind::Unavailable, "{e}");
    let body = r#"{"model":"m","web_search":true,"messages":[{"role":"user","content":"q"}]}"#;
    let flow = Flow::start(&store, "a", 10, Endpoint::ChatCompletions, body)
        .await
        .unwrap();
    assert!(flow.query().is_none());
    let p = flow
        .run(&InjectOptions::default(), |_| async {
            Ok::<_, String>(vec![Source {
                title: Some("t".into()),
                ..Default::default()
            }])
        })
        .await;
    assert_eq!(p.outcome, Outcome::QuotaUnavailable);
    assert!(p.plan.is_none());
    assert_eq!(p.errors.len(), 1);
    assert_eq!(p.errors[0].kind(), QuotaErrorKind::Unavailable);
    assert_eq!(
        &p.body[..],
        br#"{"model":"m","messages":[{"role":"user","content":"q"}]}"#
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "fails fast: {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn redis_going_away_mid_flight_is_reported_not_refused() {
    let server = RedisServer::start();
    let store = server.store(clock());
    let body = r#"{"model":"m","web_search":true,"messages":[{"role":"user","content":"q"}]}"#;
    let flow = Flow::start(&store, "a", 10, Endpoint::ChatCompletions, body)
        .await
        .unwrap();
    assert!(flow.query().is_some());
    drop(server); // Redis dies while the search runs.
    let p = flow
        .run(&InjectOptions::default(), |_| async {
            Ok::<_, String>(vec![Source {
                title: Some("t".into()),
                ..Default::default()
            }])
        })
        .await;
    // The slot was reserved, so the sources are used; the commit (when the
    // upstream answers 2xx) fails and is reported, never a refusal.
    assert_eq!(p.outcome, Outcome::Injected);
    assert!(p.plan.is_some());
    assert!(p.errors.is_empty(), "nothing asked of the store yet");
    let e = p
        .reservation
        .expect("the reservation goes on to the response side")
        .commit()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), QuotaErrorKind::Unavailable);
    // And a new request now gets no search, with the error reported.
    let flow = Flow::start(&store, "a", 10, Endpoint::ChatCompletions, body)
        .await
        .unwrap();
    assert_eq!(flow.outcome(), Some(Outcome::QuotaUnavailable));
    assert_eq!(flow.errors().len(), 1);
}

#[tokio::test]
async fn a_restarted_redis_is_used_again_by_the_next_operation() {
    // The connection the store holds breaks with the server; the next
    // operation makes a new one and is tried once more, so it succeeds
    // instead of reporting the store unavailable.
    let server = RedisServer::start();
    let port = server.port;
    let store = server.store(clock());
    let t = store.try_reserve("a", 10).await.unwrap().unwrap();
    assert!(store.commit(&t).await.unwrap());
    drop(server);
    let _again = RedisServer::start_on(port);
    let t = store
        .try_reserve("a", 10)
        .await
        .expect("reconnected and tried once more")
        .unwrap();
    assert!(store.commit(&t).await.unwrap());
    assert_eq!(
        store.usage("a", t.day()).await.unwrap(),
        Usage {
            committed: 1,
            reserved: 0
        }
    );
}

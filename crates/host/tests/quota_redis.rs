//! The Redis quota store against a real `redis-server` that each test
//! starts on a free loopback port (and kills when done): what only this
//! store does (replicas sharing one server, key expiry, leases, Redis going
//! away). The clauses every store shares are in `tests/quota_contract.rs`.
//!
//! These tests need `redis-server` on PATH (Debian package `redis-server`;
//! `.ci/run` installs it). Without it they FAIL: they are never skipped.
#![cfg(feature = "redis")]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use citestream::flow::{Flow, Outcome};
use citestream::quota::{
    ManualClock, QuotaErrorKind, QuotaStore, RedisConfig, RedisStore, Usage, reserve, utc_day,
};
use citestream::request::{Endpoint, InjectOptions};
use citestream::sources::Source;

/// 2100-01-01 00:00:00 UTC minus one second: a day in the future, so keys
/// expiring at the end of the (fake) day are not already expired on the
/// server's real clock.
const LAST_SECOND: u64 = 4_102_444_799;

/// A `redis-server` child process on 127.0.0.1, killed on drop.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start() -> RedisServer {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
            l.local_addr().unwrap().port()
        };
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args([
                "--protected-mode",
                "yes",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `redis-server` ({e}): these tests need it on PATH \
                     (Debian/Ubuntu: apt-get install -y redis-server); they are not skipped"
                )
            });
        let mut server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("redis-server exited at startup with {status}");
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on port {port} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn store(&self, clock: ManualClock) -> RedisStore {
        self.store_with(clock, RedisConfig::default())
    }

    fn store_with(&self, clock: ManualClock, config: RedisConfig) -> RedisStore {
        let client = redis::Client::open(self.url()).unwrap();
        RedisStore::with_config(client, config, clock)
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        let mut c = redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap();
        cmd.query(&mut c).unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_with_releases_commits_exactly_the_limit() {
    let server = RedisServer::start();
    let c = clock();
    let stores = [server.store(c.clone()), server.store(c.clone())];
    let committed = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..40)
        .map(|i| {
            let store = stores[i % 2].clone();
            let committed = committed.clone();
            tokio::spawn(async move {
                for _ in 0..2000 {
                    if let Some(r) = reserve(&store, "acct", 5).await.unwrap() {
                        if i % 2 == 0 {
                            assert!(r.commit().await.unwrap());
                            committed.fetch_add(1, Ordering::SeqCst);
                        } else {
                            assert!(r.release().await.unwrap());
                        }
                        return;
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(committed.load(Ordering::SeqCst), 5);
    let u = stores[0].usage("acct", utc_day(LAST_SECOND)).await.unwrap();
    assert_eq!(
        u,
        Usage {
            committed: 5,
            reserved: 0
        }
    );
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
    // The slot was reserved, so the sources are used; the failed commit is
    // reported.
    assert_eq!(p.outcome, Outcome::Injected);
    assert!(p.plan.is_some());
    assert_eq!(p.errors.len(), 1);
    // And a new request now gets no search, with the error reported.
    let flow = Flow::start(&store, "a", 10, Endpoint::ChatCompletions, body)
        .await
        .unwrap();
    assert_eq!(flow.outcome(), Some(Outcome::QuotaUnavailable));
    assert_eq!(flow.errors().len(), 1);
}

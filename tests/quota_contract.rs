//! The `QuotaStore` contract, written once and run against every store:
//! the in-memory store and the Redis store (a real `redis-server` that each
//! test starts on a free loopback port, as in `tests/quota_redis.rs`).
//!
//! What every store promises (SPEC section 4): concurrent reservations
//! never exceed the limit and exactly the limit commits; release frees the
//! slot; accounts count separately; commit and release are idempotent and
//! unknown tickets change nothing; a limit of 0 never reserves; days roll
//! over at midnight UTC and a reservation counts on the day it was made.
//! Store-specific behaviour (lease expiry, Redis going away, entry pruning)
//! stays in `tests/quota.rs` and `tests/quota_redis.rs`.

use std::sync::Arc;

use citestream::quota::{ManualClock, QuotaStore, Ticket, Usage, reserve, utc_day};

/// 2100-01-01 00:00:00 UTC minus one second: a day in the future, so Redis
/// keys expiring at the end of the (fake) day are not already expired on
/// the server's real clock.
const LAST_SECOND: u64 = 4_102_444_799;

const fn usage(committed: u32, reserved: u32) -> Usage {
    Usage {
        committed,
        reserved,
    }
}

/// 64 tasks race for a limit of 10 through the `reserve` guard.
async fn exactly_the_limit_commits<S: QuotaStore + 'static>(store: Arc<S>, _clock: ManualClock) {
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                match reserve(&*store, "acct", 10).await.unwrap() {
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
    for t in tasks {
        n += usize::from(t.await.unwrap());
    }
    assert_eq!(n, 10);
    let day = utc_day(LAST_SECOND);
    assert_eq!(store.usage("acct", day).await.unwrap(), usage(10, 0));
    assert!(store.try_reserve("acct", 10).await.unwrap().is_none());
}

async fn release_frees_the_slot<S: QuotaStore>(store: Arc<S>, _clock: ManualClock) {
    let t = store.try_reserve("a", 1).await.unwrap().unwrap();
    assert!(store.try_reserve("a", 1).await.unwrap().is_none());
    assert_eq!(store.usage("a", t.day()).await.unwrap(), usage(0, 1));
    assert!(store.release(&t).await.unwrap());
    assert_eq!(store.usage("a", t.day()).await.unwrap(), usage(0, 0));
    let t2 = store
        .try_reserve("a", 1)
        .await
        .unwrap()
        .expect("slot freed");
    assert!(store.commit(&t2).await.unwrap());
    assert!(store.try_reserve("a", 1).await.unwrap().is_none());
    // Accounts count separately.
    assert!(store.try_reserve("b", 1).await.unwrap().is_some());
}

async fn commit_and_release_are_idempotent<S: QuotaStore>(store: Arc<S>, _clock: ManualClock) {
    let t = store.try_reserve("a", 5).await.unwrap().unwrap();
    let day = t.day();
    assert!(store.commit(&t).await.unwrap());
    assert!(!store.commit(&t).await.unwrap());
    assert!(!store.release(&t).await.unwrap());
    assert_eq!(store.usage("a", day).await.unwrap(), usage(1, 0));

    let t = store.try_reserve("a", 5).await.unwrap().unwrap();
    assert!(store.release(&t).await.unwrap());
    assert!(!store.release(&t).await.unwrap());
    assert!(!store.commit(&t).await.unwrap());
    assert_eq!(store.usage("a", day).await.unwrap(), usage(1, 0));

    // Unknown tickets change nothing.
    for unknown in [
        Ticket::new("a", day, "999999"),
        Ticket::new("a", day, "not-a-number"),
        Ticket::new("zzz", day, "1"),
    ] {
        assert!(!store.commit(&unknown).await.unwrap());
        assert!(!store.release(&unknown).await.unwrap());
    }
    assert_eq!(store.usage("a", day).await.unwrap(), usage(1, 0));
}

async fn limit_zero_never_reserves<S: QuotaStore>(store: Arc<S>, _clock: ManualClock) {
    assert!(store.try_reserve("a", 0).await.unwrap().is_none());
    assert_eq!(
        store.usage("a", utc_day(LAST_SECOND)).await.unwrap(),
        usage(0, 0)
    );
}

async fn days_roll_over_at_midnight_utc<S: QuotaStore>(store: Arc<S>, clock: ManualClock) {
    clock.set(LAST_SECOND);
    let day = utc_day(LAST_SECOND);
    for _ in 0..3 {
        let t = store.try_reserve("a", 3).await.unwrap().unwrap();
        assert!(store.commit(&t).await.unwrap());
    }
    assert!(
        store.try_reserve("a", 3).await.unwrap().is_none(),
        "used up at 23:59:59"
    );
    // A reservation made at 23:59:59 and committed after midnight counts on
    // its own day.
    clock.set(LAST_SECOND - 1);
    store.try_reserve("b", 3).await.unwrap().unwrap();
    let open = store.try_reserve("b", 3).await.unwrap().unwrap();
    clock.advance(2); // 00:00:00 UTC
    assert!(store.commit(&open).await.unwrap());
    assert_eq!(store.usage("b", day).await.unwrap(), usage(1, 1));
    assert_eq!(store.usage("b", day + 1).await.unwrap(), usage(0, 0));

    let t = store
        .try_reserve("a", 3)
        .await
        .unwrap()
        .expect("new day, new count");
    assert_eq!(t.day(), day + 1);
    assert_eq!(store.usage("a", day).await.unwrap(), usage(3, 0));
    assert_eq!(store.usage("a", day + 1).await.unwrap(), usage(0, 1));
}

/// One `#[tokio::test]` per contract clause for a store built by `$make`
/// (an expression of type `(Arc<S>, ManualClock, guard)`; the guard keeps
/// whatever the store needs alive for the test).
macro_rules! contract {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;

            contract!(@tests $make;
                exactly_the_limit_commits,
                release_frees_the_slot,
                commit_and_release_are_idempotent,
                limit_zero_never_reserves,
                days_roll_over_at_midnight_utc,
            );
        }
    };
    (@tests $make:expr; $($clause:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $clause() {
                let (store, clock, _guard) = $make;
                super::$clause(store, clock).await;
            }
        )*
    };
}

contract!(memory, {
    let clock = ManualClock::new(LAST_SECOND - 3600);
    let store = citestream::quota::MemoryStore::with_clock(clock.clone());
    (Arc::new(store), clock, ())
});

#[cfg(feature = "redis")]
mod redis_server {
    //! A `redis-server` child process on 127.0.0.1, killed on drop. Without
    //! `redis-server` on PATH the Redis clauses FAIL: they are never skipped.

    use std::net::{TcpListener, TcpStream};
    use std::process::{Child, Command, Stdio};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use citestream::quota::{ManualClock, RedisStore};

    pub(crate) struct RedisServer {
        child: Child,
    }

    impl Drop for RedisServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// A fresh server and a store on it with a manual clock at `at`.
    pub(crate) fn start(at: u64) -> (Arc<RedisStore>, ManualClock, RedisServer) {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
            l.local_addr().unwrap().port()
        };
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
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
        let mut server = RedisServer { child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("redis-server exited at startup with {status}");
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on port {port} within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let clock = ManualClock::new(at);
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let store = RedisStore::with_config(client, Default::default(), clock.clone());
        (Arc::new(store), clock, server)
    }
}

#[cfg(feature = "redis")]
contract!(redis, redis_server::start(LAST_SECOND - 3600));

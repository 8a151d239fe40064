//! The `QuotaStore` contract, written once: what every store promises
//! (the quota rules of docs/gateway.md): concurrent reservations never
//! exceed the limit and exactly the limit commits, also when half of them
//! release; release frees the slot; accounts count separately; commit and
//! release are idempotent and unknown tickets change nothing; a limit of 0
//! never reserves; days roll over at midnight UTC and a reservation counts
//! on the day it was made.
//!
//! Included (`#[path]`) by the test file of each crate that has stores:
//! `tests/quota_contract.rs` runs it on the core's `MemoryStore`,
//! `crates/host/tests/quota_contract.rs` on the Redis store (one server and
//! a Cluster). The including file needs `tokio` and names this module
//! `clauses`; `contract!(name, make)` then writes one test per clause.
#![allow(dead_code, unused_macros)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use citestream::quota::{ManualClock, QuotaStore, Ticket, Usage, reserve, utc_day};

/// 2100-01-01 00:00:00 UTC minus one second: a day in the future, so Redis
/// keys expiring at the end of the (fake) day are not already expired on
/// the server's real clock.
pub(crate) const LAST_SECOND: u64 = 4_102_444_799;

const fn usage(committed: u32, reserved: u32) -> Usage {
    Usage {
        committed,
        reserved,
    }
}

/// 64 tasks race for a limit of 10 through the `reserve` guard.
pub(crate) async fn exactly_the_limit_commits<S: QuotaStore + 'static>(
    store: Arc<S>,
    _clock: ManualClock,
) {
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

pub(crate) async fn release_frees_the_slot<S: QuotaStore>(store: Arc<S>, _clock: ManualClock) {
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

pub(crate) async fn commit_and_release_are_idempotent<S: QuotaStore>(
    store: Arc<S>,
    _clock: ManualClock,
) {
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

pub(crate) async fn limit_zero_never_reserves<S: QuotaStore>(store: Arc<S>, _clock: ManualClock) {
    assert!(store.try_reserve("a", 0).await.unwrap().is_none());
    assert_eq!(
        store.usage("a", utc_day(LAST_SECOND)).await.unwrap(),
        usage(0, 0)
    );
}

pub(crate) async fn days_roll_over_at_midnight_utc<S: QuotaStore>(
    store: Arc<S>,
    clock: ManualClock,
) {
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

/// 40 tasks race for a limit of 5; half release what they got (their
/// search found nothing), so freed slots go to others and in the end
/// exactly the limit is committed, with nothing left reserved.
pub(crate) async fn racing_with_releases_commits_exactly_the_limit<S: QuotaStore + 'static>(
    store: Arc<S>,
    _clock: ManualClock,
) {
    let committed = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (store, committed) = (store.clone(), committed.clone());
            tokio::spawn(async move {
                for _ in 0..2000 {
                    if let Some(r) = reserve(&*store, "acct", 5).await.unwrap() {
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
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(committed.load(Ordering::SeqCst), 5);
    let day = utc_day(LAST_SECOND);
    assert_eq!(store.usage("acct", day).await.unwrap(), usage(5, 0));
}

/// One `#[tokio::test]` per contract clause for a store built by `$make`
/// (an expression of type `(Arc<S>, ManualClock, guard)`, starting at
/// `LAST_SECOND - 3600`; the guard keeps whatever the store needs alive
/// for the test).
macro_rules! contract {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;

            contract!(@tests $make;
                exactly_the_limit_commits,
                racing_with_releases_commits_exactly_the_limit,
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
                crate::clauses::$clause(store, clock).await;
            }
        )*
    };
}

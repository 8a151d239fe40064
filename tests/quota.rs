//! Daily search quota (SPEC section 4) with the in-memory store, and the
//! request flow that ties inspection, quota and injection together.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use citestream::flow::{Flow, Outcome};
use citestream::quota::{
    ManualClock, MemoryStore, QuotaError, QuotaErrorKind, QuotaStore, Ticket, Usage, reserve,
    utc_day,
};
use citestream::request::{Endpoint, InjectOptions};
use citestream::sources::Source;
use serde_json::Value;

/// 2026-11-30 23:59:59 UTC.
const LAST_SECOND: u64 = 1_796_083_199;

#[test]
fn sixty_four_threads_racing_for_ten_commit_exactly_ten() {
    let store = MemoryStore::new();
    let barrier = Arc::new(Barrier::new(64));
    let got = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..64)
        .map(|_| {
            let (store, barrier, got) = (store.clone(), barrier.clone(), got.clone());
            std::thread::spawn(move || {
                barrier.wait();
                if let Some(t) = store.reserve_now("acct", 10) {
                    got.fetch_add(1, Ordering::SeqCst);
                    std::thread::yield_now();
                    assert!(store.commit_now(&t));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(got.load(Ordering::SeqCst), 10);
    let today = utc_day(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    );
    assert_eq!(
        store.usage_now("acct", today),
        Usage {
            committed: 10,
            reserved: 0
        }
    );
    assert!(store.reserve_now("acct", 10).is_none());
}

#[test]
fn racing_with_releases_never_exceeds_the_limit() {
    // Half of the searches find nothing: the freed slots go to others, and
    // in the end exactly `limit` are committed.
    let store = MemoryStore::new();
    let barrier = Arc::new(Barrier::new(64));
    let handles: Vec<_> = (0..64)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut committed = false;
                for _ in 0..1000 {
                    if let Some(t) = store.reserve_now("acct", 10) {
                        if i % 2 == 0 {
                            assert!(store.commit_now(&t));
                            committed = true;
                        } else {
                            assert!(store.release_now(&t));
                        }
                        break;
                    }
                    std::thread::yield_now();
                }
                committed
            })
        })
        .collect();
    let n = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|&c| c)
        .count();
    assert_eq!(n, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_through_the_async_trait() {
    let store = Arc::new(MemoryStore::new());
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
}

#[test]
fn release_on_nothing_found_frees_the_slot() {
    let store = MemoryStore::with_clock(ManualClock::new(LAST_SECOND - 100));
    let day = utc_day(LAST_SECOND);
    let t = store.reserve_now("a", 1).unwrap();
    assert!(store.reserve_now("a", 1).is_none());
    assert_eq!(
        store.usage_now("a", day),
        Usage {
            committed: 0,
            reserved: 1
        }
    );
    assert!(store.release_now(&t));
    assert_eq!(store.usage_now("a", day), Usage::default());
    let t2 = store.reserve_now("a", 1).unwrap();
    assert!(store.commit_now(&t2));
    assert!(store.reserve_now("a", 1).is_none());
    // Accounts are counted separately.
    assert!(store.reserve_now("b", 1).is_some());
}

#[test]
fn idempotent_commit_and_release() {
    let store = MemoryStore::new();
    let t = store.reserve_now("a", 5).unwrap();
    let day = t.day();
    assert!(store.commit_now(&t));
    assert!(!store.commit_now(&t));
    assert!(!store.release_now(&t));
    assert_eq!(
        store.usage_now("a", day),
        Usage {
            committed: 1,
            reserved: 0
        }
    );

    let t = store.reserve_now("a", 5).unwrap();
    assert!(store.release_now(&t));
    assert!(!store.release_now(&t));
    assert!(!store.commit_now(&t));
    assert_eq!(
        store.usage_now("a", day),
        Usage {
            committed: 1,
            reserved: 0
        }
    );

    // Unknown tickets change nothing.
    assert!(!store.release_now(&Ticket::new("a", day, "999999")));
    assert!(!store.commit_now(&Ticket::new("a", day, "not-a-number")));
    assert!(!store.commit_now(&Ticket::new("zzz", day, "1")));
    assert_eq!(
        store.usage_now("a", day),
        Usage {
            committed: 1,
            reserved: 0
        }
    );
}

#[test]
fn limit_zero_never_reserves() {
    let store = MemoryStore::new();
    assert!(store.reserve_now("a", 0).is_none());
}

#[test]
fn rollover_at_midnight_utc() {
    let clock = ManualClock::new(LAST_SECOND);
    let store = MemoryStore::with_clock(clock.clone());
    let day = utc_day(LAST_SECOND);
    for _ in 0..3 {
        let t = store.reserve_now("a", 3).unwrap();
        assert!(store.commit_now(&t));
    }
    assert!(store.reserve_now("a", 3).is_none(), "used up at 23:59:59");
    clock.advance(1); // 00:00:00 UTC
    let t = store.reserve_now("a", 3).expect("new day, new count");
    assert_eq!(t.day(), day + 1);
    assert_eq!(store.usage_now("a", day).committed, 3);
    assert_eq!(store.usage_now("a", day + 1).reserved, 1);
    assert!(store.commit_now(&t));

    // A reservation made at 23:59:59 and committed after midnight counts
    // on its own day.
    clock.set(LAST_SECOND + 86_400);
    let open = store.reserve_now("a", 3).unwrap();
    clock.advance(1);
    assert!(store.commit_now(&open));
    assert_eq!(store.usage_now("a", day + 1).committed, 2);
    assert_eq!(store.usage_now("a", day + 2).committed, 0);

    // Old days are dropped once a later day is seen.
    assert!(store.entries() >= 2);
    clock.advance(3 * 86_400);
    let _ = store.reserve_now("a", 3).unwrap();
    assert_eq!(store.entries(), 1);
    assert_eq!(store.usage_now("a", day).committed, 0);
}

#[tokio::test]
async fn reservation_guard_releases_on_drop() {
    let store = MemoryStore::new();
    {
        let r = reserve(&store, "a", 1).await.unwrap().unwrap();
        let day = r.ticket().unwrap().day();
        assert_eq!(store.usage_now("a", day).reserved, 1);
        assert!(reserve(&store, "a", 1).await.unwrap().is_none());
    }
    let r = reserve(&store, "a", 1)
        .await
        .unwrap()
        .expect("dropped guard released the slot");
    let t = r.ticket().unwrap().clone();
    assert!(r.release().await.unwrap());
    assert!(!store.release(&t).await.unwrap());
    let r = reserve(&store, "a", 1).await.unwrap().unwrap();
    let t = r.ticket().unwrap().clone();
    assert!(r.commit().await.unwrap());
    assert_eq!(
        store.usage(t.account(), t.day()).await.unwrap(),
        Usage {
            committed: 1,
            reserved: 0
        }
    );
}

// ---------------------------------------------------------------- flow

const BODY: &str = r#"{"model":"m","web_search":true,"stream":true,"n":2,"messages":[{"role":"user","content":"q?"}]}"#;
const STRIPPED: &str =
    r#"{"model":"m","stream":true,"n":2,"messages":[{"role":"user","content":"q?"}]}"#;

fn one_source() -> Vec<Source> {
    vec![Source {
        title: Some("T".into()),
        url: Some("https://t/".into()),
        text: Some("x".into()),
        ..Default::default()
    }]
}

#[tokio::test]
async fn flow_found_injects_and_commits() {
    let store = MemoryStore::new();
    let flow = Flow::start(&store, "a", 1, Endpoint::ChatCompletions, BODY)
        .await
        .unwrap();
    assert_eq!(flow.query().unwrap().text, "q?");
    let p = flow
        .run(&InjectOptions::default(), |q| async move {
            assert_eq!(q.text, "q?");
            Ok::<_, String>(one_source())
        })
        .await;
    assert_eq!(p.outcome, Outcome::Injected);
    assert!(p.errors.is_empty());
    let plan = p.plan.unwrap();
    assert_eq!(plan.n, 2);
    assert!(plan.stream);
    assert_eq!(plan.endpoint, Endpoint::ChatCompletions);
    assert_eq!(plan.sources.len(), 1);
    let v: Value = serde_json::from_slice(&p.body).unwrap();
    assert!(v.get("web_search").is_none());
    assert!(
        v["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("[1] T")
    );
    // The search was counted: the day's one search is gone.
    let f2 = Flow::start(&store, "a", 1, Endpoint::ChatCompletions, BODY)
        .await
        .unwrap();
    assert!(f2.query().is_none());
    assert_eq!(f2.outcome(), Some(Outcome::QuotaExhausted));
}

#[tokio::test]
async fn flow_nothing_found_or_failed_passes_through_and_releases() {
    let store = MemoryStore::new();
    let flow = Flow::start(&store, "a", 1, Endpoint::ChatCompletions, BODY)
        .await
        .unwrap();
    let p = flow.finish(Vec::new(), &InjectOptions::default()).await;
    assert_eq!(p.outcome, Outcome::NothingFound);
    assert!(p.plan.is_none());
    assert_eq!(&p.body[..], STRIPPED.as_bytes());

    let flow = Flow::start(&store, "a", 1, Endpoint::ChatCompletions, BODY)
        .await
        .unwrap();
    assert!(flow.query().is_some(), "the slot was released");
    let p = flow
        .run(&InjectOptions::default(), |_| async {
            Err::<Vec<Source>, _>("timeout")
        })
        .await;
    assert_eq!(p.outcome, Outcome::SearchFailed);
    assert!(p.plan.is_none());
    assert_eq!(&p.body[..], STRIPPED.as_bytes());

    // Dropping a flow mid-search releases too.
    let flow = Flow::start(&store, "a", 1, Endpoint::ChatCompletions, BODY)
        .await
        .unwrap();
    drop(flow);
    let flow = Flow::start(&store, "a", 1, Endpoint::ChatCompletions, BODY)
        .await
        .unwrap();
    assert!(flow.query().is_some());
}

#[tokio::test]
async fn flow_quota_used_up_answers_without_search() {
    let store = MemoryStore::new();
    let called = AtomicUsize::new(0);
    let flow = Flow::start(&store, "a", 0, Endpoint::Messages, BODY)
        .await
        .unwrap();
    assert_eq!(flow.outcome(), Some(Outcome::QuotaExhausted));
    let p = flow
        .run(&InjectOptions::default(), |_| {
            called.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, String>(one_source()) }
        })
        .await;
    assert_eq!(called.load(Ordering::SeqCst), 0);
    assert_eq!(p.outcome, Outcome::QuotaExhausted);
    assert!(p.plan.is_none());
    assert_eq!(&p.body[..], STRIPPED.as_bytes());
}

#[tokio::test]
async fn flow_not_requested_and_no_query() {
    let store = MemoryStore::new();
    let plain = r#"{"model":"m","messages":[{"role":"user","content":"q"}]}"#;
    let flow = Flow::start(&store, "a", 5, Endpoint::ChatCompletions, plain)
        .await
        .unwrap();
    assert_eq!(flow.outcome(), Some(Outcome::NotRequested));
    let p = flow.finish(one_source(), &InjectOptions::default()).await;
    assert_eq!(p.outcome, Outcome::NotRequested);
    assert_eq!(&p.body[..], plain.as_bytes());
    assert!(p.plan.is_none());

    let noq = r#"{"web_search":true,"messages":[{"role":"assistant","content":"q"}]}"#;
    let flow = Flow::start(&store, "a", 5, Endpoint::ChatCompletions, noq)
        .await
        .unwrap();
    assert_eq!(flow.outcome(), Some(Outcome::NoQuery));
    let p = flow.fail().await;
    assert_eq!(p.outcome, Outcome::NoQuery);
    assert_eq!(
        &p.body[..],
        br#"{"messages":[{"role":"assistant","content":"q"}]}"#
    );
    // Nothing was reserved.
    let t = store.reserve_now("a", 5).unwrap();
    assert_eq!(
        store.usage_now("a", t.day()),
        Usage {
            committed: 0,
            reserved: 1
        }
    );
}

#[tokio::test]
async fn flow_bad_request_is_a_400() {
    let store = MemoryStore::new();
    let e = Flow::start(
        &store,
        "a",
        5,
        Endpoint::ChatCompletions,
        r#"{"web_search":"yes"}"#,
    )
    .await
    .unwrap_err();
    assert_eq!(e.status(), 400);
    let v: Value = serde_json::from_slice(&e.body()).unwrap();
    assert_eq!(v["error"]["param"], "web_search");
}

/// A store whose backend is down.
struct Down;

impl QuotaStore for Down {
    fn try_reserve(
        &self,
        _: &str,
        _: u32,
    ) -> impl Future<Output = Result<Option<Ticket>, QuotaError>> + Send {
        std::future::ready(Err(QuotaError::new(
            QuotaErrorKind::Unavailable,
            "connection refused",
        )))
    }
    fn commit(&self, _: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send {
        std::future::ready(Err(QuotaError::new(
            QuotaErrorKind::Unavailable,
            "connection refused",
        )))
    }
    fn release(&self, _: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send {
        std::future::ready(Err(QuotaError::new(
            QuotaErrorKind::Unavailable,
            "connection refused",
        )))
    }
    fn usage(&self, _: &str, _: u64) -> impl Future<Output = Result<Usage, QuotaError>> + Send {
        std::future::ready(Err(QuotaError::new(
            QuotaErrorKind::Unavailable,
            "connection refused",
        )))
    }
}

#[tokio::test]
async fn flow_store_down_answers_without_search_and_reports() {
    let flow = Flow::start(&Down, "a", 5, Endpoint::ChatCompletions, BODY)
        .await
        .unwrap();
    assert!(flow.query().is_none());
    assert_eq!(flow.outcome(), Some(Outcome::QuotaUnavailable));
    assert_eq!(flow.errors().len(), 1);
    let p = flow
        .run(&InjectOptions::default(), |_| async {
            Ok::<_, String>(one_source())
        })
        .await;
    assert_eq!(p.outcome, Outcome::QuotaUnavailable);
    assert!(p.plan.is_none());
    assert_eq!(p.errors[0].kind(), QuotaErrorKind::Unavailable);
    assert!(p.errors[0].to_string().contains("connection refused"));
    assert_eq!(&p.body[..], STRIPPED.as_bytes());
}

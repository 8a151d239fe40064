//! What only the in-memory quota store does (release on drop, pruning old
//! days; the clauses every store shares are `tests/quota_contract.rs`), and
//! the request flow that ties inspection, quota and injection together.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

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
fn old_days_are_dropped_once_a_later_day_is_seen() {
    let clock = ManualClock::new(LAST_SECOND);
    let store = MemoryStore::with_clock(clock.clone());
    let day = utc_day(LAST_SECOND);
    assert!(store.commit_now(&store.reserve_now("a", 3).unwrap()));
    clock.advance(1); // 00:00:00 UTC: yesterday is kept (late commits)
    assert!(store.commit_now(&store.reserve_now("a", 3).unwrap()));
    assert_eq!(store.entries(), 2);
    assert_eq!(store.usage_now("a", day).committed, 1);
    clock.advance(3 * 86_400);
    let _ = store.reserve_now("a", 3).unwrap();
    assert_eq!(store.entries(), 1);
    assert_eq!(store.usage_now("a", day).committed, 0);
    assert_eq!(store.usage_now("a", day + 1).committed, 0);
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

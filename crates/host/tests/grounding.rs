//! The request side through `Grounding`: outcomes and their headers, the
//! daily quota across midnight, search failures, and a cancelled request
//! giving its reservation back at once.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use citestream::flow::Outcome;
use citestream::quota::{Clock, ManualClock, QuotaStore, utc_day};
use citestream::request::Endpoint;
use citestream_host::config::Config;
use citestream_host::grounding::Grounding;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const MIDNIGHT: u64 = 1_796_083_200; // 2026-12-01T00:00:00Z

fn sources_file() -> String {
    let dir = std::env::temp_dir().join(format!("citestream-host-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("sources.json");
    let src = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/lisbon/sources.json"
    ))
    .unwrap();
    std::fs::write(&p, src).unwrap();
    p.display().to_string()
}

fn body(web_search: &str, text: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"model":"m","web_search":{web_search},"messages":[{{"role":"user","content":"{text}"}}]}}"#
    ))
}

/// A loopback backend for the `http` search provider: answers `answer`
/// after `delay`, and reports on `closed` when a client hung up before.
async fn search_backend(
    answer: &'static str,
    delay: Duration,
) -> (String, tokio::sync::mpsc::Receiver<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/search", l.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = s.read(&mut buf).await;
                let wait = tokio::time::sleep(delay);
                tokio::pin!(wait);
                tokio::select! {
                    () = &mut wait => {
                        let r = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}", answer.len());
                        let _ = s.write_all(r.as_bytes()).await;
                    }
                    n = s.read(&mut buf) => if matches!(n, Ok(0) | Err(_)) { let _ = tx.send(()).await; },
                }
            });
        }
    });
    (url, rx)
}

async fn grounding(extra: &str, clock: ManualClock) -> Grounding {
    let toml = format!(
        "[search]\nprovider = \"static\"\n[search.static]\npath = \"{}\"\n{extra}",
        sources_file()
    );
    let cfg = Config::from_toml_with_env(&toml, &|_| None).unwrap();
    Grounding::with_clock(&cfg, Arc::new(clock)).await.unwrap()
}

#[tokio::test]
async fn outcomes_headers_and_the_daily_quota_across_midnight() {
    let clock = ManualClock::new(MIDNIGHT - 10);
    let g = grounding("[plans.default]\nsearches_per_day = 3\n", clock.clone()).await;
    let h = http::HeaderMap::new();
    let r = g
        .prepare(Endpoint::ChatCompletions, &h, body("false", "q"))
        .await
        .unwrap();
    assert_eq!(
        (r.search_header(), r.remaining_header()),
        ("not-requested", None)
    );
    assert!(r.prepared.plan.is_none());
    let r = g
        .prepare(Endpoint::Messages, &h, body("true", ""))
        .await
        .unwrap();
    assert_eq!(
        (r.search_header(), r.remaining_header()),
        ("no-query", Some("3".into()))
    );
    for left in [2, 1, 0] {
        let r = g
            .prepare(Endpoint::ChatCompletions, &h, body("true", "Lisbon?"))
            .await
            .unwrap();
        assert_eq!(r.prepared.outcome, Outcome::Injected);
        assert_eq!(r.remaining, Some(left));
        assert_eq!(r.account, "anonymous");
        assert_eq!(r.prepared.plan.as_ref().unwrap().sources.len(), 3);
        // Still reserved (it counts as used) until the upstream answers 2xx.
        let day = utc_day(clock.unix_secs());
        let u = g.store().usage("anonymous", day).await.unwrap();
        assert_eq!((u.committed, u.reserved), (2 - left, 1));
        assert!(r.prepared.reservation.unwrap().commit().await.unwrap());
    }
    // A grounded request whose pending search is dropped (the upstream
    // failed, the client left) gives it back.
    clock.advance(1);
    let u0 = g
        .store()
        .usage("anonymous", utc_day(MIDNIGHT - 9))
        .await
        .unwrap();
    assert_eq!((u0.committed, u0.reserved), (3, 0));
    let r = g
        .prepare(Endpoint::ChatCompletions, &h, body("true", "Lisbon?"))
        .await
        .unwrap();
    assert_eq!(
        (r.search_header(), r.remaining),
        ("quota-exhausted", Some(0))
    );
    assert!(r.prepared.plan.is_none());
    assert!(!r.prepared.body.windows(10).any(|w| w == b"web_search"));
    clock.advance(10); // 00:00:00 UTC
    let r = g
        .prepare(Endpoint::ChatCompletions, &h, body("true", "Lisbon?"))
        .await
        .unwrap();
    assert_eq!((r.search_header(), r.remaining), ("injected", Some(2)));
    drop(r);
    let u = g
        .store()
        .usage("anonymous", utc_day(MIDNIGHT))
        .await
        .unwrap();
    assert_eq!((u.committed, u.reserved), (0, 0), "dropped: released");
    let m = g.metrics().render();
    assert!(m.contains("citestream_quota_exhausted_total 1"), "{m}");
    assert!(
        m.contains("citestream_searches_total{result=\"found\"} 4"),
        "{m}"
    );
}

#[tokio::test]
async fn bad_bodies_and_keys_are_rejected_in_the_endpoint_shape() {
    let key = citestream_host::auth::hash_key("sk-1");
    let g = grounding(
        &format!("[auth]\nmode = \"keys\"\n[[accounts]]\nid = \"acme\"\nkeys = [\"{key}\"]\n"),
        ManualClock::new(MIDNIGHT),
    )
    .await;
    let mut h = http::HeaderMap::new();
    let e = g
        .prepare(Endpoint::Messages, &h, body("true", "q"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), 401);
    assert!(
        e.body()
            .starts_with(br#"{"type":"error","error":{"type":"authentication_error""#)
    );
    h.insert("authorization", "Bearer sk-1".parse().unwrap());
    let e = g
        .prepare(
            Endpoint::ChatCompletions,
            &h,
            Bytes::from_static(br#"{"web_search":1}"#),
        )
        .await
        .unwrap_err();
    assert_eq!(e.status(), 400);
    let v: serde_json::Value = serde_json::from_slice(e.body()).unwrap();
    assert_eq!(v["error"]["param"], "web_search");
    let r = g
        .prepare(Endpoint::ChatCompletions, &h, body("true", "q"))
        .await
        .unwrap();
    assert_eq!(r.account, "acme");
}

#[tokio::test]
async fn failed_and_empty_searches_use_no_search() {
    let (url, _) = search_backend("[]", Duration::ZERO).await;
    let extra = format!("[search.http]\nurl = \"{url}\"\n");
    let toml =
        format!("[search]\nprovider = \"http\"\n{extra}[plans.default]\nsearches_per_day = 1\n");
    let cfg = Config::from_toml_with_env(&toml, &|_| None).unwrap();
    let g = Grounding::new(&cfg).await.unwrap();
    let h = http::HeaderMap::new();
    let r = g
        .prepare(Endpoint::ChatCompletions, &h, body("true", "q"))
        .await
        .unwrap();
    assert_eq!((r.search_header(), r.remaining), ("nothing-found", Some(1)));
    let (url, _) = search_backend("not json", Duration::ZERO).await;
    let toml = format!("[search]\nprovider = \"http\"\n[search.http]\nurl = \"{url}\"\n");
    let cfg = Config::from_toml_with_env(&toml, &|_| None).unwrap();
    let g = Grounding::new(&cfg).await.unwrap();
    let r = g
        .prepare(Endpoint::ChatCompletions, &h, body("true", "q"))
        .await
        .unwrap();
    assert_eq!((r.search_header(), r.remaining), ("failed", Some(100)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_cancels_its_search_and_gives_its_reservation_back() {
    let (url, mut closed) = search_backend("[]", Duration::from_secs(3600)).await;
    let toml = format!("[search]\nprovider = \"http\"\n[search.http]\nurl = \"{url}\"\n");
    let cfg = Config::from_toml_with_env(&toml, &|_| None).unwrap();
    let clock = ManualClock::new(MIDNIGHT);
    let g = Arc::new(Grounding::with_clock(&cfg, Arc::new(clock)).await.unwrap());
    let g2 = g.clone();
    let task = tokio::spawn(async move {
        let _ = g2
            .prepare(
                Endpoint::ChatCompletions,
                &http::HeaderMap::new(),
                body("true", "q"),
            )
            .await;
    });
    let day = utc_day(MIDNIGHT);
    // Wait until the search is under way (a slot is reserved).
    let mut reserved = false;
    for _ in 0..500 {
        if g.store().usage("anonymous", day).await.unwrap().reserved == 1 {
            reserved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(reserved);
    task.abort();
    let _ = task.await;
    let u = g.store().usage("anonymous", day).await.unwrap();
    assert_eq!((u.reserved, u.committed), (0, 0));
    let hung_up = tokio::time::timeout(Duration::from_secs(10), closed.recv()).await;
    assert!(
        matches!(hung_up, Ok(Some(()))),
        "the search request was not cancelled"
    );
}

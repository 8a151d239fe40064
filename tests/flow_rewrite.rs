//! The whole gateway flow: request in, sources injected, response rewritten
//! by the rewriter the plan configures; with the quota used up the response
//! passes through untouched.

use bytes::Bytes;
use citestream::flow::Flow;
use citestream::quota::MemoryStore;
use citestream::request::{Endpoint, InjectOptions};
use citestream::sources::Source;
use citestream::{RewriteOptions, StreamRewriter};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn lisbon_sources() -> Vec<Source> {
    let s = std::fs::read(format!("{ROOT}/examples/lisbon/sources.json")).unwrap();
    citestream::Sources::from_json(&s).unwrap().list().to_vec()
}

fn rewrite_all(rw: &mut dyn StreamRewriter, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in input.chunks(97) {
        rw.feed(Bytes::copy_from_slice(piece));
        while let Some(b) = rw.next_output() {
            out.extend_from_slice(&b);
        }
    }
    rw.finish();
    while let Some(b) = rw.next_output() {
        out.extend_from_slice(&b);
    }
    out
}

fn request() -> Vec<u8> {
    br#"{"model":"shannon-3","stream":true,"messages":[{"role":"user","content":"What is the weather forecast for Lisbon this weekend?"}],"web_search":true}"#.to_vec()
}

#[tokio::test]
async fn plan_drives_the_rewriter() {
    let store = MemoryStore::new();
    let flow = Flow::start(&store, "acct", 1, Endpoint::ChatCompletions, request())
        .await
        .unwrap();
    assert_eq!(
        flow.query().unwrap().text,
        "What is the weather forecast for Lisbon this weekend?"
    );
    let prepared = flow
        .finish(lisbon_sources(), &InjectOptions::default())
        .await;
    let forwarded: serde_json::Value = serde_json::from_slice(&prepared.body).unwrap();
    assert!(forwarded.get("web_search").is_none());
    assert!(
        forwarded
            .to_string()
            .contains("Lisbon weather: weekend outlook")
    );
    let plan = prepared.plan.expect("sources were injected");
    assert!(plan.stream);
    let upstream = std::fs::read(format!("{ROOT}/examples/lisbon/upstream.sse")).unwrap();
    let mut rw = plan.stream_rewriter(&RewriteOptions::new());
    let out = String::from_utf8(rewrite_all(&mut rw, &upstream)).unwrap();
    assert!(out.contains(r#""start_index":66,"end_index":69"#));
    assert!(out.contains(r#""start_index":137,"end_index":140"#));
    assert_eq!(out.matches("\"sources\":").count(), 1);
    let body = std::fs::read(format!("{ROOT}/examples/lisbon/upstream.json")).unwrap();
    let whole: serde_json::Value =
        serde_json::from_slice(&plan.rewrite_body(&body, &RewriteOptions::new())).unwrap();
    assert_eq!(whole["sources"].as_array().unwrap().len(), 3);

    // The day's single search is used: the next request is answered
    // without sources, and its response passes through untouched.
    let flow = Flow::start(&store, "acct", 1, Endpoint::ChatCompletions, request())
        .await
        .unwrap();
    let prepared = flow
        .finish(lisbon_sources(), &InjectOptions::default())
        .await;
    assert!(prepared.plan.is_none());
    let forwarded: serde_json::Value = serde_json::from_slice(&prepared.body).unwrap();
    assert!(forwarded.get("web_search").is_none());
    assert!(
        !forwarded
            .to_string()
            .contains("Lisbon weather: weekend outlook")
    );
}

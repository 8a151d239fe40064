//! Instructions one request's spans cost on the request's thread, for
//! `scripts/callgrind.sh`-style counting (valgrind callgrind, only the
//! `measured` function):
//!
//! ```text
//! cargo build --release -p citestream-host --example spans_callgrind
//! valgrind --tool=callgrind --toggle-collect='*spans_callgrind::measured*' \
//!     target/release/examples/spans_callgrind on 500
//! ```
//!
//! `off` (no `log.otlp_endpoint`) or `on` (a loopback collector in this
//! process that answers every export; the export thread's work is not on
//! the request thread: count it with `--toggle-collect='*export_loop*'`,
//! the records encoded as OTLP and posted); then the
//! number of requests (at most 500: 3,500 spans stay under the export
//! queue, none dropped). Each request opens the spans `citestream serve`
//! opens, with their fields, the way it does (a server span continuing a
//! client's `traceparent`, the trace context written into the upstream's
//! headers, futures polled more than once), so the instruction count per
//! request is the tracing cost per request (the spans are given the
//! target `citestream_host`: spans of other crates are not exported, so
//! not recorded). Prints `requests spans`.

#[path = "../tests/support/otlp.rs"]
mod otlp;

use citestream_host::config::Config;
use citestream_host::exchange::HeaderEdits;
use citestream_host::telemetry::{self, Instrument, Key, UpstreamSpan};
use otlp::{Collector, Mode};

/// One request's spans (see the module docs).
#[inline(never)]
fn request(client: &http::HeaderMap, up: &mut http::HeaderMap) {
    let req = telemetry::request_span("POST", "/v1/chat/completions", client);
    req.in_scope(|| {
        let auth = telemetry::span("auth");
        auth.in_scope(|| {});
        auth.record_str(Key::Account, "acct-0042");
        drop(auth);
        let reserve = telemetry::span("quota.reserve");
        reserve.record_str(Key::Account, "acct-0042");
        polled_twice(reserve);
        let search = telemetry::span("search");
        search.record_static(Key::Provider, "static");
        let s = search.clone();
        polled_twice(s);
        search.record_static(Key::Cache, "miss");
        search.record_int(Key::Results, 3);
        drop(search);
        // As the exchange opens it: its traceparent into the edits.
        let mut edits = HeaderEdits::default();
        let upstream = UpstreamSpan::open(&mut edits);
        edits.apply(up);
        if let Some(u) = &upstream {
            u.headers(200);
        }
        if let Some(u) = upstream {
            u.first_byte();
        }
        let response = telemetry::span("response");
        response.in_scope(|| polled_twice(telemetry::span("quota.commit")));
    });
    telemetry::record_reply(&req, 200, Some(&http::HeaderValue::from_static("injected")));
}

/// A future that is pending once, run in `span` to the end (two polls).
fn polled_twice(span: telemetry::Span) {
    let mut once = false;
    let fut = std::future::poll_fn(move |cx| {
        if once {
            std::task::Poll::Ready(())
        } else {
            once = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .instrument(span);
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    while fut.as_mut().poll(&mut cx).is_pending() {}
}

#[inline(never)]
fn measured(n: usize, client: &http::HeaderMap) -> usize {
    let mut up = http::HeaderMap::new();
    for _ in 0..n {
        request(client, &mut up);
    }
    up.len()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let on = match args.first().map(String::as_str) {
        Some("on") => true,
        Some("off") => false,
        _ => panic!("usage: spans_callgrind on|off [REQUESTS]"),
    };
    let n: usize = args.get(1).map_or(500, |s| s.parse().expect("REQUESTS"));
    assert!(n <= 500, "at most 500 requests (the export queue)");
    let endpoint = if on {
        Collector::start(Mode::Answer).endpoint()
    } else {
        String::new()
    };
    let cfg =
        Config::from_toml_with_env(&format!("[log]\notlp_endpoint = \"{endpoint}\"\n"), &|_| {
            None
        })
        .expect("config");
    let (sub, tel) = telemetry::subscriber(&cfg.log, None, std::io::sink).expect("subscriber");
    let mut client = http::HeaderMap::new();
    client.insert(
        "traceparent",
        http::HeaderValue::from_static("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    );
    let up = tracing::subscriber::with_default(sub, || {
        request(&client, &mut http::HeaderMap::new()); // warm-up
        measured(n, &client)
    });
    tel.shutdown(); // the last batch goes out
    println!("{n} {}", if on { n * 7 } else { 0 });
    let _ = up;
}

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
//! the records made OpenTelemetry spans and encoded); then the
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
use citestream_host::telemetry::{self, UpstreamSpan};
use otlp::{Collector, Mode};

/// One request's spans (see the module docs).
#[inline(never)]
fn request(client: &http::HeaderMap, up: &mut http::HeaderMap) {
    let req = telemetry::request_span("POST", "/v1/chat/completions", client);
    {
        let _r = req.enter();
        let auth = tracing::info_span!(target: "citestream_host", "auth", citestream.account = tracing::field::Empty);
        auth.in_scope(|| {});
        auth.record("citestream.account", "acct-0042");
        drop(auth);
        let reserve = tracing::info_span!(target: "citestream_host", "quota.reserve", citestream.account = "acct-0042");
        for _ in 0..2 {
            let _p = reserve.enter(); // two polls
        }
        drop(reserve);
        let search = tracing::info_span!(
            target: "citestream_host",
            "search",
            citestream.provider = "static",
            citestream.results = tracing::field::Empty,
            citestream.cache = tracing::field::Empty,
        );
        for _ in 0..2 {
            let _p = search.enter();
        }
        search.record("citestream.cache", "miss");
        search.record("citestream.results", 3_usize);
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
        let response = tracing::info_span!(target: "citestream_host", "response");
        let _p = response.enter();
        let commit = tracing::info_span!(target: "citestream_host", "quota.commit");
        for _ in 0..2 {
            let _c = commit.enter();
        }
    }
    telemetry::record_status(&req, 200);
    req.record("citestream.search", "injected");
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

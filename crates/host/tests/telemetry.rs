//! `citestream_host::telemetry` against a loopback OTLP/HTTP collector:
//! spans keep their parent/child structure, continue the client's W3C
//! trace, and the context sent upstream names the request span; a
//! collector that is down or stuck never blocks the code that makes spans.

#[path = "support/otlp.rs"]
mod otlp;

use citestream_host::config::{Config, LogConfig};
use citestream_host::exchange::HeaderEdits;
use citestream_host::telemetry::{self, Key, UpstreamSpan};
use otlp::{Collector, Mode, attr, hex};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn log_config(endpoint: &str) -> LogConfig {
    let cfg =
        Config::from_toml_with_env(&format!("[log]\notlp_endpoint = \"{endpoint}\"\n"), &|_| {
            None
        })
        .unwrap();
    cfg.log
}

/// One request's worth of spans, the way a host opens them; returns the
/// headers it would send upstream.
fn one_request(client: &http::HeaderMap) -> http::HeaderMap {
    let request = telemetry::request_span("POST", "/v1/chat/completions", client);
    request.in_scope(|| {
        let search = telemetry::span("search");
        search.record_static(Key::Provider, "local");
        search.in_scope(|| search.record_int(Key::Results, 3));
        // A `tracing` span (ours or another crate's) is not exported.
        let _ours = tracing::info_span!(target: "citestream_host", "not_a_trace_span").entered();
        let _other = tracing::info_span!(target: "hyper", "not_ours").entered();
        let mut edits = HeaderEdits::default();
        let upstream = UpstreamSpan::open(&mut edits);
        let mut headers = http::HeaderMap::new();
        edits.apply(&mut headers);
        drop(upstream);
        headers
    })
}

#[test]
fn spans_continue_the_clients_trace_with_their_structure() {
    let collector = Collector::start(Mode::Answer);
    let (sub, tel) =
        telemetry::subscriber(&log_config(&collector.endpoint()), None, std::io::sink).unwrap();
    assert!(tel.traces_on());
    let mut client = http::HeaderMap::new();
    client.insert(
        "traceparent",
        format!("00-{TRACE_ID}-{CLIENT_SPAN}-01").parse().unwrap(),
    );
    client.insert("tracestate", "vendor=x".parse().unwrap());
    let sent = tracing::subscriber::with_default(sub, || one_request(&client));
    tel.shutdown(); // flushes
    let spans = collector.wait_for(|s| s.len() >= 3);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(spans.len(), 3, "{names:?}");
    let by = |n: &str| spans.iter().find(|s| s.name == n).unwrap();
    let (request, search, upstream) = (by("request"), by("search"), by("upstream"));
    for s in &spans {
        assert_eq!(hex(&s.trace_id), TRACE_ID, "{}", s.name);
    }
    assert_eq!(hex(&request.parent_span_id), CLIENT_SPAN);
    assert_eq!(search.parent_span_id, request.span_id);
    assert_eq!(upstream.parent_span_id, request.span_id);
    assert_eq!(
        attr(search, "citestream.provider").as_deref(),
        Some("local")
    );
    assert_eq!(attr(search, "citestream.results").as_deref(), Some("3"));
    assert_eq!(
        attr(request, "url.path").as_deref(),
        Some("/v1/chat/completions")
    );
    // SPAN_KIND_SERVER, _INTERNAL, _CLIENT
    assert_eq!((request.kind, search.kind, upstream.kind), (2, 1, 3));
    assert_eq!(upstream.trace_state, "vendor=x");
    // Upstream gets the trace, with the upstream span as its parent.
    let tp = sent["traceparent"].to_str().unwrap();
    assert_eq!(tp, format!("00-{TRACE_ID}-{}-01", hex(&upstream.span_id)));
    assert_eq!(sent["tracestate"], "vendor=x");
}

#[test]
fn without_a_client_trace_a_new_one_starts() {
    let collector = Collector::start(Mode::Answer);
    let (sub, tel) =
        telemetry::subscriber(&log_config(&collector.endpoint()), None, std::io::sink).unwrap();
    let sent = tracing::subscriber::with_default(sub, || one_request(&http::HeaderMap::new()));
    tel.shutdown();
    let spans = collector.wait_for(|s| s.len() >= 3);
    let request = spans.iter().find(|s| s.name == "request").unwrap();
    assert!(request.parent_span_id.is_empty());
    assert_ne!(hex(&request.trace_id), "0".repeat(32));
    let tp = sent["traceparent"].to_str().unwrap();
    assert!(
        tp.starts_with(&format!("00-{}-", hex(&request.trace_id))),
        "{tp}"
    );
}

#[test]
fn traces_off_adds_nothing_and_keeps_the_clients_headers() {
    let (sub, tel) = telemetry::subscriber(&LogConfig::default(), None, std::io::sink).unwrap();
    assert!(!tel.traces_on());
    let mut client = http::HeaderMap::new();
    client.insert(
        "traceparent",
        format!("00-{TRACE_ID}-{CLIENT_SPAN}-01").parse().unwrap(),
    );
    let sent = tracing::subscriber::with_default(sub, || one_request(&client));
    assert!(sent.is_empty());
    tel.shutdown();
}

/// Many more spans than the queue holds, while the collector is down or
/// never answers: making them completes (a blocking export would hang
/// this test), and the process keeps going.
#[test]
fn a_collector_down_or_stuck_never_blocks_span_makers() {
    let stuck = Collector::start(Mode::Hang);
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    for endpoint in [stuck.endpoint(), down] {
        let (sub, tel) =
            telemetry::subscriber(&log_config(&endpoint), None, std::io::sink).unwrap();
        tracing::subscriber::with_default(sub, || {
            for _ in 0..3 * telemetry::QUEUE {
                one_request(&http::HeaderMap::new());
            }
        });
        drop(tel); // no flush wait
    }
    // The stuck one did get an export while the spans were being made.
    let t0 = std::time::Instant::now();
    while stuck.exports() == 0 && t0.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(stuck.exports() >= 1);
}

#[test]
fn rust_log_overrides_the_level_and_a_bad_one_is_named() {
    let e = telemetry::subscriber(&LogConfig::default(), Some("citestream=["), std::io::sink)
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("RUST_LOG: "), "{e}");
    let e = Config::from_toml_with_env(
        "[log]\notlp_endpoint = \"https://collector:4318\"\n",
        &|_| None,
    )
    .map(|c| telemetry::subscriber(&c.log, None, std::io::sink).map(drop));
    let e = e.unwrap().err().unwrap();
    assert!(e.to_string().starts_with("log.otlp_endpoint: "), "{e}");
}

#[test]
fn request_span_is_a_server_span_with_the_status_recorded() {
    let collector = Collector::start(Mode::Answer);
    let (sub, tel) =
        telemetry::subscriber(&log_config(&collector.endpoint()), None, std::io::sink).unwrap();
    let mut client = http::HeaderMap::new();
    client.insert(
        "traceparent",
        format!("00-{TRACE_ID}-{CLIENT_SPAN}-01").parse().unwrap(),
    );
    tracing::subscriber::with_default(sub, || {
        let span = telemetry::request_span("POST", "/v1/chat/completions", &client);
        telemetry::record_status(&span, 502);
    });
    tel.shutdown();
    let spans = collector.wait_for(|s| !s.is_empty());
    let request = &spans[0];
    assert_eq!(request.name, "request");
    assert_eq!(hex(&request.trace_id), TRACE_ID);
    assert_eq!(hex(&request.parent_span_id), CLIENT_SPAN);
    // SPAN_KIND_SERVER = 2; STATUS_CODE_ERROR = 2.
    assert_eq!(request.kind, 2);
    assert_eq!(request.status.as_ref().map(|s| s.code), Some(2));
    assert_eq!(
        attr(request, "http.response.status_code").as_deref(),
        Some("502")
    );
    assert_eq!(
        attr(request, "url.path").as_deref(),
        Some("/v1/chat/completions")
    );
    assert_eq!(
        attr(request, "http.request.method").as_deref(),
        Some("POST")
    );
}

#[test]
fn the_upstream_span_ends_at_its_first_byte_with_its_durations() {
    let collector = Collector::start(Mode::Answer);
    let (sub, tel) =
        telemetry::subscriber(&log_config(&collector.endpoint()), None, std::io::sink).unwrap();
    tracing::subscriber::with_default(sub, || {
        let request =
            telemetry::request_span("POST", "/v1/chat/completions", &http::HeaderMap::new());
        request.in_scope(|| {
            let upstream = UpstreamSpan::open(&mut HeaderEdits::default()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
            upstream.headers(200);
            std::thread::sleep(std::time::Duration::from_millis(20));
            upstream.first_byte();
        });
        // The request span lives on; the upstream one ended at its first byte.
        std::thread::sleep(std::time::Duration::from_millis(200));
    });
    tel.shutdown();
    let spans = collector.wait_for(|s| s.len() >= 2);
    let up = spans.iter().find(|s| s.name == "upstream").unwrap();
    let ms = |k: &str| attr(up, k).unwrap().parse::<f64>().unwrap();
    let (headers, first) = (ms("citestream.headers_ms"), ms("citestream.first_byte_ms"));
    assert!(
        headers >= 20.0 && first >= headers + 20.0,
        "{headers} {first}"
    );
    assert_eq!(
        attr(up, "http.response.status_code").as_deref(),
        Some("200")
    );
    #[allow(clippy::cast_precision_loss)]
    let lasted = (up.end_time_unix_nano - up.start_time_unix_nano) as f64 / 1e6;
    assert!((lasted - first).abs() < 1e-3, "{lasted} {first}");
    let request = spans.iter().find(|s| s.name == "request").unwrap();
    assert!(request.end_time_unix_nano >= up.end_time_unix_nano + 150_000_000);
}

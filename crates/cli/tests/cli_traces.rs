//! `citestream serve` with `log.otlp_endpoint`: each request is a trace
//! received by a loopback OTLP/HTTP collector (the official protobuf
//! types decode it), continuing the client's `traceparent`, with the
//! spans of the request as children of `request`, and the trace context
//! passed upstream. A collector that is down or never answers does not
//! stop requests from being answered.

#[path = "../../host/tests/support/otlp.rs"]
mod otlp;
mod serve_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use otlp::{Collector, Mode, attr, hex};

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

/// A loopback model server: answers every request with one chat
/// completion citing [1], and keeps each request's head.
fn upstream() -> (String, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", l.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut w = conn.try_clone().unwrap();
                let mut r = BufReader::new(conn);
                loop {
                    let mut head = String::new();
                    let mut len = 0;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap();
                        }
                        head.push_str(&line);
                    }
                    let mut body = vec![0; len];
                    r.read_exact(&mut body).unwrap();
                    seen.lock().unwrap().push(head);
                    let answer = r#"{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Lisbon [1]."},"finish_reason":"stop"}]}"#;
                    write!(
                        w,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                        answer.len()
                    )
                    .unwrap();
                }
            });
        }
    });
    (addr, heads)
}

fn serve(otlp: &str, upstream: &str) -> (Child, String) {
    let dir = std::env::temp_dir().join(format!("citestream-cli-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join(format!("{}.toml", otlp.replace([':', '/', '.'], "_")));
    std::fs::write(
        &cfg,
        format!("[upstream]\nbase_url = \"{upstream}\"\n[log]\notlp_endpoint = \"{otlp}\"\n"),
    )
    .unwrap();
    let serve_support::Started {
        child,
        mut out,
        addr,
        ..
    } = serve_support::start(&["--config", cfg.to_str().unwrap()], &[]);
    // Keep reading the log so the process never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, addr)
}

fn grounded(addr: &str, traceparent: Option<&str>) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = r#"{"model":"m","web_search":true,"messages":[{"role":"user","content":"What is the capital of Portugal?"}]}"#;
    let tp = traceparent.map_or(String::new(), |t| format!("traceparent: {t}\r\n"));
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{tp}connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}

fn stop(mut child: Child) {
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_request_is_one_trace_continuing_the_clients() {
    let collector = Collector::start(Mode::Answer);
    let (up, heads) = upstream();
    let (child, addr) = serve(&collector.endpoint(), &up);
    let resp = grounded(&addr, Some(&format!("00-{TRACE_ID}-{CLIENT_SPAN}-01")));
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("x-citestream-search: injected"), "{resp}");
    stop(child); // flushes the last spans
    let spans = collector.wait_for(|s| s.iter().any(|s| s.name == "request"));
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let by = |n: &str| {
        spans
            .iter()
            .find(|s| s.name == n)
            .unwrap_or_else(|| panic!("no {n} span in {names:?}"))
    };
    let request = by("request");
    assert_eq!(hex(&request.parent_span_id), CLIENT_SPAN);
    assert_eq!(
        attr(request, "http.response.status_code").as_deref(),
        Some("200")
    );
    let response = by("response");
    for s in &spans {
        assert_eq!(hex(&s.trace_id), TRACE_ID, "{}", s.name);
        match s.name.as_str() {
            "request" => {}
            // Settled on the upstream's 2xx, while the response is made.
            "quota.commit" => assert_eq!(s.parent_span_id, response.span_id),
            _ => assert_eq!(
                s.parent_span_id, request.span_id,
                "{} is not a child of request",
                s.name
            ),
        }
    }
    for n in [
        "auth",
        "quota.reserve",
        "search",
        "upstream",
        "quota.commit",
    ] {
        by(n);
    }
    assert!(spans.iter().all(|s| s.name != "quota.release"), "{names:?}");
    assert_eq!(
        attr(by("search"), "citestream.provider").as_deref(),
        Some("local")
    );
    let upstream_span = by("upstream");
    assert_eq!(upstream_span.kind, 3, "SPAN_KIND_CLIENT");
    let ms = |k: &str| -> f64 {
        attr(upstream_span, k)
            .unwrap_or_else(|| panic!("no {k}: {upstream_span:?}"))
            .parse()
            .unwrap()
    };
    // The time to the response head, then to the first body byte (where
    // the span ends).
    let (head, first) = (ms("citestream.headers_ms"), ms("citestream.first_byte_ms"));
    assert!(0.0 < head && head <= first, "{head} {first}");
    // The model server got the trace, its parent the upstream span.
    let heads = heads.lock().unwrap();
    let tp = heads[0]
        .lines()
        .find_map(|l| l.strip_prefix("traceparent: "))
        .unwrap_or_else(|| panic!("no traceparent upstream: {}", heads[0]));
    assert_eq!(
        tp,
        format!("00-{TRACE_ID}-{}-01", hex(&upstream_span.span_id))
    );
}

#[test]
fn a_collector_down_or_stuck_does_not_hold_requests() {
    let stuck = Collector::start(Mode::Hang);
    let down = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (up, heads) = upstream();
    for otlp in [stuck.endpoint(), down] {
        let (child, addr) = serve(&otlp, &up);
        for _ in 0..50 {
            let resp = grounded(&addr, None);
            assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        }
        // Let the batch go out (1 s delay) while serving more.
        std::thread::sleep(Duration::from_millis(1500));
        for _ in 0..10 {
            assert!(grounded(&addr, None).starts_with("HTTP/1.1 200"));
        }
        // SIGTERM still exits 0 (the export is abandoned after its deadline).
        stop(child);
    }
    assert!(stuck.exports() >= 1, "the stuck collector was never called");
    assert_eq!(heads.lock().unwrap().len(), 120);
}

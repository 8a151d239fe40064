//! A loopback OpenTelemetry collector for tests: an HTTP/1.1 server that
//! takes OTLP/HTTP protobuf exports (`POST /v1/traces`), decodes them with
//! the official `opentelemetry-proto` types, and keeps the spans. In
//! [`Mode::Hang`] it reads each export and never answers (a collector that
//! is stuck).

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
pub use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// How the collector answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// 200 to every export.
    Answer,
    /// Reads an export and never answers.
    Hang,
}

/// A running collector (its threads live as long as the test process).
#[derive(Debug, Clone)]
pub struct Collector {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    exports: Arc<AtomicUsize>,
}

impl Collector {
    /// Starts one on a free loopback port.
    pub fn start(mode: Mode) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = Collector {
            addr: listener.local_addr().unwrap(),
            spans: Arc::default(),
            exports: Arc::default(),
        };
        let shared = c.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let c = shared.clone();
                std::thread::spawn(move || c.serve(conn, mode));
            }
        });
        c
    }

    /// The base URL to put in `log.otlp_endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Export requests received so far (answered or not).
    pub fn exports(&self) -> usize {
        self.exports.load(Ordering::SeqCst)
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (30 s at most) until `done` holds for the spans received.
    pub fn wait_for(&self, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let t0 = Instant::now();
        loop {
            let spans = self.spans();
            if done(&spans) || t0.elapsed() > Duration::from_secs(30) {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn serve(&self, conn: TcpStream, mode: Mode) {
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        loop {
            let mut head = Vec::new();
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if line == "\r\n" {
                    break;
                }
                head.push(line.trim_end().to_owned());
            }
            assert!(
                head[0].starts_with("POST /v1/traces "),
                "not an OTLP trace export: {head:?}"
            );
            let header = |name: &str| {
                head.iter().find_map(|h| {
                    let (k, v) = h.split_once(':')?;
                    k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                })
            };
            assert_eq!(
                header("content-type").as_deref(),
                Some("application/x-protobuf"),
                "{head:?}"
            );
            let len: usize = header("content-length").unwrap().parse().unwrap();
            let mut body = vec![0; len];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            self.exports.fetch_add(1, Ordering::SeqCst);
            if mode == Mode::Hang {
                std::thread::sleep(Duration::from_secs(3600));
                return;
            }
            let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
            let mut spans = self.spans.lock().unwrap();
            for rs in req.resource_spans {
                for ss in rs.scope_spans {
                    spans.extend(ss.spans);
                }
            }
            drop(spans);
            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
            if w.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// A string attribute of `span`.
pub fn attr(span: &Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            Value::IntValue(i) => Some(i.to_string()),
            Value::BoolValue(b) => Some(b.to_string()),
            Value::DoubleValue(d) => Some(d.to_string()),
            _ => None,
        })
}

/// Lowercase hex of an id.
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

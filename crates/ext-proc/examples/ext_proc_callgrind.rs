//! The per-event work of an `ext_proc` processor, in process, for
//! instruction counts under `valgrind --tool=callgrind` (see
//! `crates/ext-proc/benches/callgrind.sh`): `citestream ext-proc`'s
//! service against the do-nothing one (`citestream_ext_proc::noop`), each
//! driven the same way.
//!
//! ```text
//! ext_proc_callgrind <processor> <mode> <search> [events]
//!   processor: citestream | noop
//!   mode:      streamed | full-duplex    (the filter's response_body_mode)
//!   search:    on | off                  (the request's web_search)
//!   events:    chat.completion.chunk events, one per body message (default 2000)
//! ```
//!
//! One exchange: request headers, the request body (static search) and the
//! response headers (`200`, `text/event-stream`) are answered first, outside
//! the measured part. `measured` then hands each body message to the service
//! as tonic's server would, gRPC-framed bytes through tonic's own
//! `Streaming` decoder, polls the service's answer stream until it has
//! nothing more for that message, and encodes each answer with prost (what
//! tonic's encoder does). All of it runs on a current-thread runtime in one
//! poll per message, so the counts repeat exactly. What the harness adds
//! (the inbox, the framing, the encode buffer) is the same for both
//! processors.
//!
//! Prints `<events> <answers> <answer bytes>`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;

use bytes::{BufMut, Bytes, BytesMut};
use citestream_ext_proc::grpc::Streams;
use citestream_ext_proc::noop::Noop;
use citestream_ext_proc::pb::{
    BodySendMode, HttpBody, ProcessingRequest, ProcessingResponse, ProtocolConfiguration,
    processing_request::Request,
};
use citestream_ext_proc::{MAX_MESSAGE, Processor, http_headers};
use citestream_host::config::Config;
use citestream_host::grounding::Grounding;
use futures_core::Stream;
use hyper::body::Frame;
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, Streaming};

type Answers = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

/// The request body tonic's decoder reads: the messages put in it, then
/// pending (never ends; no waker: the harness polls).
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<VecDeque<Bytes>>>);

impl Inbox {
    fn put(&self, b: Bytes) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(b);
    }
}

impl hyper::body::Body for Inbox {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
        {
            Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            None => Poll::Pending,
        }
    }
}

const SOURCES: &str = r#"[{"title":"Lisbon","url":"https://en.wikipedia.org/wiki/Lisbon","text":"Lisbon is the capital of Portugal."}]"#;

fn usage(msg: &str) -> ! {
    eprintln!("ext_proc_callgrind: {msg}");
    eprintln!(
        "usage: ext_proc_callgrind <citestream|noop> <streamed|full-duplex> <on|off> [events]"
    );
    std::process::exit(2)
}

/// One gRPC message as it comes off the wire: uncompressed flag, length,
/// the protobuf.
fn framed(m: &ProcessingRequest) -> Bytes {
    let len = m.encoded_len();
    let mut b = BytesMut::with_capacity(5 + len);
    b.put_u8(0);
    b.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    m.encode(&mut b).unwrap_or_else(|e| usage(&e.to_string()));
    b.freeze()
}

fn body_message(body: Vec<u8>, end_of_stream: bool) -> Bytes {
    framed(&ProcessingRequest {
        request: Some(Request::ResponseBody(HttpBody {
            body: body.into(),
            end_of_stream,
        })),
        ..Default::default()
    })
}

/// Every answer the service has now (one poll each), encoded into `enc`.
fn answers_now(answers: &mut Answers, enc: &mut BytesMut) -> (usize, usize) {
    let (mut n, mut bytes) = (0, 0);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    while let Poll::Ready(Some(a)) = answers.as_mut().poll_next(&mut cx) {
        let Ok(a) = a else {
            usage("the service answered with an error")
        };
        enc.clear();
        if a.encode(enc).is_err() {
            usage("encode failed");
        }
        n += 1;
        bytes += enc.len();
    }
    (n, bytes)
}

#[inline(never)]
fn measured(tx: &Inbox, answers: &mut Answers, messages: &[Bytes]) -> (usize, usize) {
    let mut enc = BytesMut::with_capacity(1 << 16);
    let (mut n, mut bytes) = (0, 0);
    for m in messages {
        tx.put(m.clone());
        let (a, b) = answers_now(answers, &mut enc);
        n += a;
        bytes += b;
    }
    (n, bytes)
}

async fn grounding() -> Arc<Grounding> {
    let dir = std::env::temp_dir().join(format!("ext-proc-callgrind-{}", std::process::id()));
    let path = dir.join("sources.json");
    if std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, SOURCES))
        .is_err()
    {
        usage("cannot write the sources file");
    }
    let toml = format!(
        "[search]\nprovider = \"static\"\n[search.static]\npath = {:?}\n[plans.default]\nsearches_per_day = 1000000\n",
        path.display().to_string()
    );
    let cfg =
        Config::from_toml_with_env(&toml, &|_| None).unwrap_or_else(|e| usage(&e.to_string()));
    let g = Grounding::new(&cfg)
        .await
        .unwrap_or_else(|e| usage(&e.to_string()));
    let _ = std::fs::remove_dir_all(&dir);
    Arc::new(g)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (processor, mode, search, events) = match &args[..] {
        [p, m, s] => (p.as_str(), m.as_str(), s.as_str(), 2000),
        [p, m, s, n] => match n.parse::<usize>() {
            Ok(n) if n > 0 => (p.as_str(), m.as_str(), s.as_str(), n),
            _ => usage(&format!("bad event count {n:?}")),
        },
        _ => usage("expected three or four arguments"),
    };
    let body_mode = match mode {
        "streamed" => BodySendMode::Streamed,
        "full-duplex" => BodySendMode::FullDuplexStreamed,
        other => usage(&format!("unknown mode {other:?}")),
    };
    let web_search = match search {
        "on" => true,
        "off" => false,
        other => usage(&format!("unknown search {other:?}")),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| usage(&e.to_string()));
    rt.block_on(async {
        let tx = Inbox::default();
        let body = tx.clone();
        let decoder = tonic_prost::ProstCodec::<ProcessingResponse, ProcessingRequest>::default().decoder();
        let inbound = Streaming::new_request(decoder, body, None, Some(MAX_MESSAGE));
        let mut answers: Answers = match processor {
            "citestream" => Box::pin(Processor::new(grounding().await).open(inbound)),
            "noop" => Box::pin(Noop.open(inbound)),
            other => usage(&format!("unknown processor {other:?}")),
        };
        let request_body = format!(
            r#"{{"model":"m","stream":true,"web_search":{web_search},"messages":[{{"role":"user","content":"Capital of Portugal?"}}]}}"#
        );
        let setup = [
            ProcessingRequest {
                request: Some(Request::RequestHeaders(http_headers(&[
                    (":method", "POST"),
                    (":path", "/v1/chat/completions"),
                    ("content-type", "application/json"),
                ], false))),
                protocol_config: Some(ProtocolConfiguration {
                    request_body_mode: BodySendMode::Buffered as i32,
                    response_body_mode: body_mode as i32,
                    ..Default::default()
                }),
                ..Default::default()
            },
            ProcessingRequest {
                request: Some(Request::RequestBody(HttpBody {
                    body: request_body.into(),
                    end_of_stream: true,
                })),
                ..Default::default()
            },
            ProcessingRequest {
                request: Some(Request::ResponseHeaders(http_headers(&[
                    (":status", "200"),
                    ("content-type", "text/event-stream"),
                ], false))),
                ..Default::default()
            },
        ];
        let mut enc = BytesMut::new();
        for m in &setup {
            tx.put(framed(m));
            // The request body waits for the search: let it run.
            let mut got = 0;
            for _ in 0..1000 {
                got += answers_now(&mut answers, &mut enc).0;
                if got > 0 {
                    break;
                }
                tokio::task::yield_now().await;
            }
            if got != 1 {
                usage("a set-up message was not answered once");
            }
        }
        let messages: Vec<Bytes> = (0..events)
            .map(|i| {
                let finish = if i + 1 == events { "\"stop\"" } else { "null" };
                let mut ev = format!(
                    r#"data: {{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":"tok{i}_ [1] "}},"finish_reason":{finish}}}]}}"#
                );
                ev.push_str("\n\n");
                if i + 1 == events {
                    ev.push_str("data: [DONE]\n\n");
                }
                body_message(ev.into_bytes(), i + 1 == events)
            })
            .collect();
        let (n, bytes) = measured(&tx, &mut answers, &messages);
        println!("{events} {n} {bytes}");
    });
}

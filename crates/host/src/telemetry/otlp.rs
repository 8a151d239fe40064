//! OTLP/HTTP export of ended spans: the protobuf encoding of
//! `ExportTraceServiceRequest` written straight from our records, and the
//! `POST` to the collector on the export thread.
//!
//! Contract:
//! * [`encode`] writes one `ExportTraceServiceRequest`
//!   (opentelemetry/proto/collector/trace/v1) with one `ResourceSpans`
//!   (`service.name = "citestream"`) holding one `ScopeSpans` (scope
//!   `citestream`) with the spans given, fields numbered as
//!   opentelemetry/proto/trace/v1/trace.proto numbers them. Encoding is
//!   one pass into a reused buffer (each length written after its
//!   message, in room left for it): no message types, no allocation per
//!   span or attribute. The unit tests decode the output
//!   with the official `opentelemetry-proto` types.
//! * [`Poster`] sends a body to `{endpoint}/v1/traces` over HTTP/1.1
//!   (hyper, as the gateway's upstream client), keeping the connection
//!   for the next batch; each export has a deadline, after which the
//!   connection is dropped and the batch with it.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use super::{Ended, KEYS, Key, Val};

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        #[allow(clippy::cast_possible_truncation)]
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    #[allow(clippy::cast_possible_truncation)]
    out.push(v as u8);
}

const fn varint_len(v: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

fn tag(out: &mut Vec<u8>, field: u8, wire: u8) {
    // Every field number here is below 16: one byte.
    out.push(field << 3 | wire);
}

fn bytes_field(out: &mut Vec<u8>, field: u8, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// The length of a `LEN` field holding `n` bytes (tag, length, bytes).
const fn len_field(n: usize) -> usize {
    1 + varint_len(n as u64) + n
}

/// An attribute's value as encoded in `AnyValue`.
#[derive(Clone, Copy)]
enum Any<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
}

impl Any<'_> {
    /// The encoded `AnyValue` message's length.
    fn len(self) -> usize {
        match self {
            Any::Str(s) => len_field(s.len()),
            #[allow(clippy::cast_sign_loss)]
            Any::Int(i) => 1 + varint_len(i as u64),
            Any::Float(_) => 9,
        }
    }

    fn write(self, out: &mut Vec<u8>) {
        match self {
            Any::Str(s) => bytes_field(out, 1, s.as_bytes()),
            Any::Int(i) => {
                tag(out, 3, VARINT);
                #[allow(clippy::cast_sign_loss)]
                varint(out, i as u64);
            }
            Any::Float(f) => {
                tag(out, 4, FIXED64);
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
    }
}

/// A `KeyValue`'s encoded length (without its own tag and length).
fn key_value_len(key: &str, v: Any<'_>) -> usize {
    len_field(key.len()) + len_field(v.len())
}

/// A `KeyValue` as field `field` of the message being written.
fn key_value(out: &mut Vec<u8>, field: u8, key: &str, v: Any<'_>) {
    let any = v.len();
    tag(out, field, LEN);
    varint(out, key_value_len(key, v) as u64);
    bytes_field(out, 1, key.as_bytes());
    tag(out, 2, LEN);
    varint(out, any as u64);
    v.write(out);
}

/// Starts a length-delimited field `field` at the end of `out`: its tag,
/// then `room` bytes for its length, which [`close_field`] writes once
/// the field's bytes follow.
fn open_field(out: &mut Vec<u8>, field: u8, room: usize) -> (usize, usize) {
    tag(out, field, LEN);
    let at = out.len();
    out.resize(at + room, 0);
    (at, room)
}

/// Writes the length of the field [`open_field`] started, moving its
/// bytes when the length takes fewer or more bytes than the room left.
fn close_field(out: &mut Vec<u8>, (at, room): (usize, usize)) {
    let mut n = (out.len() - at - room) as u64;
    let mut buf = [0u8; 10];
    let mut k = 0;
    while n >= 0x80 {
        #[allow(clippy::cast_possible_truncation)]
        let low = n as u8;
        buf[k] = low | 0x80;
        n >>= 7;
        k += 1;
    }
    #[allow(clippy::cast_possible_truncation)]
    let last = n as u8;
    buf[k] = last;
    k += 1;
    if k < room {
        out.copy_within(at + room.., at + k);
        out.truncate(out.len() - (room - k));
    } else if k > room {
        out.splice(at + room..at + room, std::iter::repeat_n(0, k - room));
    }
    out[at..at + k].copy_from_slice(&buf[..k]);
}

/// One `Span` message's fields into `out`.
fn span(out: &mut Vec<u8>, e: &Ended) {
    let h = &e.head;
    bytes_field(out, 1, &h.trace_id.to_be_bytes());
    bytes_field(out, 2, &h.span_id.to_be_bytes());
    if let Some(s) = &h.state {
        bytes_field(out, 3, s.as_bytes());
    }
    if h.parent_id != 0 {
        bytes_field(out, 4, &h.parent_id.to_be_bytes());
    }
    bytes_field(out, 5, h.name.as_bytes());
    tag(out, 6, VARINT);
    varint(out, h.kind as u64);
    tag(out, 7, FIXED64);
    out.extend_from_slice(&h.start.to_le_bytes());
    tag(out, 8, FIXED64);
    out.extend_from_slice(&e.end.to_le_bytes());
    let text = &e.body.text;
    for (i, v) in e.body.vals.iter().enumerate().take(KEYS) {
        let any = match *v {
            Val::None => continue,
            Val::Int(n) => Any::Int(n),
            Val::Float(f) => Any::Float(f),
            Val::Static(s) => Any::Str(s),
            Val::Text(a, b) => Any::Str(text.get(a as usize..b as usize).unwrap_or_default()),
        };
        key_value(out, 9, Key::ALL[i].name(), any);
    }
    if e.body.error {
        // Status { code: STATUS_CODE_ERROR }
        bytes_field(out, 15, &[3 << 3 | VARINT, 2]);
    }
    // Flags: the W3C trace flags (sampled), and whether the parent is
    // remote (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK | _IS_REMOTE_MASK).
    let flags: u32 = 0x01 | 0x100 | if h.remote { 0x200 } else { 0 };
    varint(out, 16 << 3 | u64::from(FIXED32)); // field 16: a two-byte tag
    out.extend_from_slice(&flags.to_le_bytes());
}

/// The spans of one export, the request's body written into `out`
/// (cleared first, its allocation reused) in one pass: each message's
/// length is written after its bytes, in the room left for it (a span
/// below 16 KiB, an export below 2 MiB fit; others move).
pub(super) fn encode(out: &mut Vec<u8>, spans: &[Ended]) {
    const SERVICE: &str = "service.name";
    const NAME: &str = "citestream";
    out.clear();
    let resource_spans = open_field(out, 1, 3); // ExportTraceServiceRequest.resource_spans
    // ResourceSpans.resource: Resource { attributes: [service.name] }
    tag(out, 1, LEN);
    varint(
        out,
        len_field(key_value_len(SERVICE, Any::Str(NAME))) as u64,
    );
    key_value(out, 1, SERVICE, Any::Str(NAME));
    let scope_spans = open_field(out, 2, 3); // ResourceSpans.scope_spans
    // ScopeSpans.scope: InstrumentationScope { name }
    tag(out, 1, LEN);
    varint(out, len_field(NAME.len()) as u64);
    bytes_field(out, 1, NAME.as_bytes());
    for e in spans {
        let f = open_field(out, 2, 2); // ScopeSpans.spans
        span(out, e);
        close_field(out, f);
    }
    close_field(out, scope_spans);
    close_field(out, resource_spans);
}

/// The HTTP side of the export: one connection to the collector, kept.
#[derive(Debug)]
pub(super) struct Poster {
    rt: tokio::runtime::Runtime,
    /// `host:port` to connect to, and the `Host` header.
    authority: String,
    path: String,
    conn: Option<SendRequest<Full<Bytes>>>,
    timeout: Duration,
}

impl Poster {
    /// For `url` (`http://host[:port]/path`).
    pub(super) fn new(url: &str, timeout: Duration) -> Result<Poster, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("{url:?}: {e}"))?;
        let host = uri.host().ok_or_else(|| format!("{url:?}: no host"))?;
        let authority = format!("{host}:{}", uri.port_u16().unwrap_or(80));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the export runtime: {e}"))?;
        Ok(Poster {
            rt,
            authority,
            path: uri.path().to_owned(),
            conn: None,
            timeout,
        })
    }

    /// Sends `body` (an encoded export), within the deadline. A kept
    /// connection that fails is replaced once.
    pub(super) fn post(&mut self, body: Bytes) -> Result<(), String> {
        let Poster {
            rt,
            authority,
            path,
            conn,
            timeout,
        } = self;
        rt.block_on(async {
            let sent = tokio::time::timeout(*timeout, async {
                let reused = conn.is_some();
                match send(conn, authority, path, body.clone()).await {
                    Err(_) if reused => send(conn, authority, path, body).await,
                    r => r,
                }
            })
            .await;
            match sent {
                Ok(r) => r,
                Err(_) => {
                    *conn = None;
                    Err("the collector did not answer in time".to_owned())
                }
            }
        })
    }
}

async fn send(
    conn: &mut Option<SendRequest<Full<Bytes>>>,
    authority: &str,
    path: &str,
    body: Bytes,
) -> Result<(), String> {
    let r = try_send(conn, authority, path, body).await;
    if r.is_err() {
        *conn = None;
    }
    r
}

async fn try_send(
    conn: &mut Option<SendRequest<Full<Bytes>>>,
    authority: &str,
    path: &str,
    body: Bytes,
) -> Result<(), String> {
    let sender = match conn {
        Some(s) if !s.is_closed() => s,
        _ => {
            let tcp = tokio::net::TcpStream::connect(authority)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let _ = tcp.set_nodelay(true);
            let (s, c) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            tokio::spawn(async move {
                let _ = c.await;
            });
            conn.insert(s)
        }
    };
    sender.ready().await.map_err(|e| e.to_string())?;
    let req = Request::post(path)
        .header(header::HOST, authority)
        .header(header::CONTENT_TYPE, "application/x-protobuf")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    // Read the answer to the end, so the connection serves the next one.
    resp.into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("the collector answered {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{Body, Head, Kind};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message;

    fn ended(name: &'static str, parent: u64, error: bool) -> Ended {
        let mut body = Body::default();
        body.text.push_str("/v1/chat/completions");
        body.vals[Key::Path as usize] = Val::Text(0, 20);
        body.vals[Key::Method as usize] = Val::Static("POST");
        body.vals[Key::Status as usize] = Val::Int(502);
        body.vals[Key::HeadersMs as usize] = Val::Float(1.5);
        body.vals[Key::Results as usize] = Val::Int(-3);
        body.error = error;
        Ended {
            head: Head {
                name,
                kind: Kind::Server,
                trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
                span_id: 0x00f0_67aa_0ba9_02b7,
                parent_id: parent,
                remote: parent != 0,
                sampled: true,
                state: Some(http::HeaderValue::from_static("vendor=x")),
                start: 1_700_000_000_000_000_000,
            },
            body,
            end: 1_700_000_000_123_456_789,
        }
    }

    #[test]
    fn varint_lengths_match_the_encoding() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut b = Vec::new();
            varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
        }
    }

    #[test]
    fn the_official_types_decode_what_we_encode() {
        let spans = [
            ended("request", 0xb7ad_6b71_6920_3331, true),
            ended("auth", 0, false),
        ];
        let mut out = Vec::new();
        encode(&mut out, &spans);
        let req = ExportTraceServiceRequest::decode(out.as_slice()).unwrap();
        assert_eq!(req.resource_spans.len(), 1);
        let rs = &req.resource_spans[0];
        let res = rs.resource.as_ref().unwrap();
        assert_eq!(res.attributes[0].key, "service.name");
        assert_eq!(rs.scope_spans.len(), 1);
        assert_eq!(rs.scope_spans[0].scope.as_ref().unwrap().name, "citestream");
        let got = &rs.scope_spans[0].spans;
        assert_eq!(got.len(), 2);
        let s = &got[0];
        assert_eq!(s.name, "request");
        assert_eq!(
            s.trace_id,
            0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736u128.to_be_bytes()
        );
        assert_eq!(s.span_id, 0x00f0_67aa_0ba9_02b7u64.to_be_bytes());
        assert_eq!(s.parent_span_id, 0xb7ad_6b71_6920_3331u64.to_be_bytes());
        assert_eq!(s.trace_state, "vendor=x");
        assert_eq!(s.kind, 2);
        assert_eq!(s.start_time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(s.end_time_unix_nano, 1_700_000_000_123_456_789);
        assert_eq!(s.flags, 0x301);
        assert_eq!(s.status.as_ref().map(|st| st.code), Some(2));
        let attr = |k: &str| {
            s.attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.clone()?.value)
        };
        assert_eq!(
            attr("url.path"),
            Some(Value::StringValue("/v1/chat/completions".into()))
        );
        assert_eq!(
            attr("http.request.method"),
            Some(Value::StringValue("POST".into()))
        );
        assert_eq!(
            attr("http.response.status_code"),
            Some(Value::IntValue(502))
        );
        assert_eq!(attr("citestream.headers_ms"), Some(Value::DoubleValue(1.5)));
        assert_eq!(attr("citestream.results"), Some(Value::IntValue(-3)));
        assert_eq!(s.attributes.len(), 5);
        let a = &got[1];
        assert!(a.parent_span_id.is_empty());
        assert_eq!(a.flags, 0x101);
        assert_eq!(a.status, None);
        // No spans: still a well-formed request.
        encode(&mut out, &[]);
        let req = ExportTraceServiceRequest::decode(out.as_slice()).unwrap();
        assert!(req.resource_spans[0].scope_spans[0].spans.is_empty());
    }

    #[test]
    fn lengths_that_outgrow_their_room_still_decode() {
        // Spans over 16 KiB (a length of 3 bytes in a room of 2) and an
        // export over 2 MiB (4 bytes in a room of 3); and small ones.
        for (n, text) in [(1, 10), (3, 20_000), (10, 300_000), (600, 30)] {
            let path = "/".repeat(text);
            let spans: Vec<Ended> = (0..n)
                .map(|_| {
                    let mut e = ended("request", 0, false);
                    e.body.text = path.clone();
                    e.body.vals[Key::Path as usize] = Val::Text(0, u32::try_from(text).unwrap());
                    e
                })
                .collect();
            let mut out = Vec::new();
            encode(&mut out, &spans);
            let req = ExportTraceServiceRequest::decode(out.as_slice()).unwrap();
            let got = &req.resource_spans[0].scope_spans[0].spans;
            assert_eq!(got.len(), n);
            for s in got {
                let p = s.attributes.iter().find(|kv| kv.key == "url.path").unwrap();
                assert_eq!(
                    p.value.clone().unwrap().value,
                    Some(Value::StringValue(path.clone()))
                );
                assert_eq!(s.end_time_unix_nano, 1_700_000_000_123_456_789);
            }
        }
    }
}

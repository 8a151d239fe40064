//! Wire compatibility of the crate's own ext_proc messages
//! (`citestream_ext_proc::pb`) with Envoy's protos, as `envoy-types`
//! generates them: every message and field the processors use, in the
//! shapes Envoy sends and the processors answer, encoded with one and
//! decoded with the other, both ways. What Envoy sends that the crate does
//! not declare (attributes, metadata, flow control, `value` and
//! `raw_value` both) must decode without error and be skipped.

use std::collections::HashMap;

use bytes::Bytes;
use citestream_ext_proc::pb as ours;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3 as filter;
use envoy_types::pb::envoy::service::ext_proc::v3 as theirs;
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use prost::Message;

fn encode(m: &impl Message) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

/// `e` and `o` mean the same: each decodes from the other's bytes to
/// the other (`e_seen`: what of `e` survives the trip through ours, when
/// `e` carries fields ours leaves out).
fn both_ways<E, O>(e: &E, e_seen: &E, o: &O)
where
    E: Message + Default + PartialEq + std::fmt::Debug,
    O: Message + Default + PartialEq + std::fmt::Debug,
{
    let got = O::decode(encode(e)).expect("ours decodes Envoy's");
    assert_eq!(&got, o, "Envoy's -> ours");
    let back = E::decode(encode(o)).expect("Envoy's decodes ours");
    assert_eq!(&back, e_seen, "ours -> Envoy's");
    // And ours re-encodes to what it decoded.
    assert_eq!(&O::decode(encode(&got)).unwrap(), o);
}

fn same<E, O>(e: &E, o: &O)
where
    E: Message + Default + PartialEq + std::fmt::Debug,
    O: Message + Default + PartialEq + std::fmt::Debug,
{
    both_ways(e, e, o);
}

fn attributes() -> HashMap<String, Struct> {
    let mut fields = HashMap::new();
    fields.insert(
        "request.path".to_owned(),
        Value {
            kind: Some(Kind::StringValue("/v1/chat/completions".into())),
        },
    );
    let mut m = HashMap::new();
    m.insert("envoy.filters.http.ext_proc".to_owned(), Struct { fields });
    m
}

fn metadata() -> core::Metadata {
    let mut filter_metadata = HashMap::new();
    let mut fields = HashMap::new();
    fields.insert(
        "k".to_owned(),
        Value {
            kind: Some(Kind::NumberValue(7.0)),
        },
    );
    filter_metadata.insert("ns".to_owned(), Struct { fields });
    core::Metadata {
        filter_metadata,
        ..Default::default()
    }
}

/// Envoy's header map: `raw_value` as current Envoy sends it, plus one
/// header in `value` as older builds did.
fn their_headers(pairs: &[(&str, &str)]) -> core::HeaderMap {
    let mut headers: Vec<core::HeaderValue> = pairs
        .iter()
        .map(|(k, v)| core::HeaderValue {
            key: (*k).into(),
            raw_value: v.as_bytes().to_vec(),
            ..Default::default()
        })
        .collect();
    headers.push(core::HeaderValue {
        key: "x-old".into(),
        value: "text".into(),
        ..Default::default()
    });
    core::HeaderMap { headers }
}

fn our_headers(pairs: &[(&str, &str)]) -> ours::HeaderMap {
    let mut headers: Vec<ours::HeaderValue> = pairs
        .iter()
        .map(|(k, v)| ours::HeaderValue {
            key: (*k).into(),
            raw_value: Bytes::copy_from_slice(v.as_bytes()),
            value: String::new(),
        })
        .collect();
    headers.push(ours::HeaderValue {
        key: "x-old".into(),
        value: "text".into(),
        raw_value: Bytes::new(),
    });
    ours::HeaderMap { headers }
}

const REQUEST: &[(&str, &str)] = &[
    (":method", "POST"),
    (":path", "/v1/chat/completions?x=1"),
    (":authority", "gw.example"),
    ("content-type", "application/json"),
    ("authorization", "Bearer sk-\u{1}raw"),
    (
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    ),
];
const RESPONSE: &[(&str, &str)] = &[(":status", "200"), ("content-type", "text/event-stream")];

/// Every request shape Envoy sends, with the fields ours skips set.
#[test]
fn requests_from_envoy() {
    use ours::processing_request::Request as O;
    use theirs::processing_request::Request as E;
    let their_pc = theirs::ProtocolConfiguration {
        request_body_mode: filter::processing_mode::BodySendMode::Buffered as i32,
        response_body_mode: filter::processing_mode::BodySendMode::FullDuplexStreamed as i32,
        send_body_without_waiting_for_header_response: true,
    };
    let our_pc = ours::ProtocolConfiguration {
        request_body_mode: ours::BodySendMode::Buffered as i32,
        response_body_mode: ours::BodySendMode::FullDuplexStreamed as i32,
        send_body_without_waiting_for_header_response: true,
    };
    let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
    let cases: Vec<(E, O)> = vec![
        (
            E::RequestHeaders(theirs::HttpHeaders {
                headers: Some(their_headers(REQUEST)),
                attributes: attributes(),
                end_of_stream: false,
            }),
            O::RequestHeaders(ours::HttpHeaders {
                headers: Some(our_headers(REQUEST)),
                end_of_stream: false,
            }),
        ),
        (
            E::RequestHeaders(theirs::HttpHeaders {
                headers: Some(their_headers(&[
                    (":method", "GET"),
                    (":path", "/v1/models"),
                ])),
                attributes: HashMap::new(),
                end_of_stream: true,
            }),
            O::RequestHeaders(ours::HttpHeaders {
                headers: Some(our_headers(&[(":method", "GET"), (":path", "/v1/models")])),
                end_of_stream: true,
            }),
        ),
        (
            E::RequestBody(theirs::HttpBody {
                body: br#"{"model":"m","web_search":true}"#.to_vec(),
                end_of_stream: true,
                ..Default::default()
            }),
            O::RequestBody(ours::HttpBody {
                body: Bytes::from_static(br#"{"model":"m","web_search":true}"#),
                end_of_stream: true,
            }),
        ),
        (
            E::ResponseHeaders(theirs::HttpHeaders {
                headers: Some(their_headers(RESPONSE)),
                attributes: attributes(),
                end_of_stream: false,
            }),
            O::ResponseHeaders(ours::HttpHeaders {
                headers: Some(our_headers(RESPONSE)),
                end_of_stream: false,
            }),
        ),
        (
            E::ResponseBody(theirs::HttpBody {
                body: body.to_vec(),
                end_of_stream: false,
                ..Default::default()
            }),
            O::ResponseBody(ours::HttpBody {
                body: Bytes::from_static(body),
                end_of_stream: false,
            }),
        ),
        (
            E::ResponseBody(theirs::HttpBody {
                body: Vec::new(),
                end_of_stream: true,
                ..Default::default()
            }),
            O::ResponseBody(ours::HttpBody {
                body: Bytes::new(),
                end_of_stream: true,
            }),
        ),
        (
            E::RequestTrailers(theirs::HttpTrailers {
                trailers: Some(their_headers(&[("x-t", "1")])),
            }),
            O::RequestTrailers(ours::HttpTrailers {
                trailers: Some(our_headers(&[("x-t", "1")])),
            }),
        ),
        (
            E::ResponseTrailers(theirs::HttpTrailers {
                trailers: Some(their_headers(&[("grpc-status", "0")])),
            }),
            O::ResponseTrailers(ours::HttpTrailers {
                trailers: Some(our_headers(&[("grpc-status", "0")])),
            }),
        ),
    ];
    for (first, (e, o)) in cases.into_iter().enumerate() {
        for observability_mode in [false, true] {
            let first = first == 0;
            let e_full = theirs::ProcessingRequest {
                request: Some(e.clone()),
                metadata_context: Some(metadata()),
                attributes: attributes(),
                observability_mode,
                protocol_config: first.then_some(their_pc),
                flow_control_init: Some(theirs::processing_request::FlowControlInit {
                    initial_window_downstream_to_sidestream: 65_536,
                    ..Default::default()
                }),
                client_window_update: None,
            };
            let o = ours::ProcessingRequest {
                request: Some(o.clone()),
                observability_mode,
                protocol_config: first.then_some(our_pc),
            };
            // What ours keeps of Envoy's message.
            let mut e_seen = theirs::ProcessingRequest {
                request: Some(e.clone()),
                observability_mode,
                protocol_config: first.then_some(their_pc),
                ..Default::default()
            };
            if let Some(E::RequestHeaders(h) | E::ResponseHeaders(h)) = &mut e_seen.request {
                h.attributes.clear();
            }
            both_ways(&e_full, &e_seen, &o);
        }
    }
}

/// Every answer the processors send, and Envoy's reading of it.
#[test]
fn answers_to_envoy() {
    use ours::processing_response::Response as O;
    use theirs::processing_response::Response as E;
    let their_mutation = theirs::HeaderMutation {
        set_headers: vec![
            core::HeaderValueOption {
                header: Some(core::HeaderValue {
                    key: "x-citestream-search".into(),
                    raw_value: b"injected".to_vec(),
                    ..Default::default()
                }),
                append_action: core::header_value_option::HeaderAppendAction::OverwriteIfExistsOrAdd
                    as i32,
                ..Default::default()
            },
            core::HeaderValueOption {
                header: Some(core::HeaderValue {
                    key: "x-raw".into(),
                    raw_value: vec![0xff, 0x00, b'a'],
                    ..Default::default()
                }),
                append_action: core::header_value_option::HeaderAppendAction::AddIfAbsent as i32,
                ..Default::default()
            },
        ],
        remove_headers: vec!["content-length".into()],
    };
    let our_mutation = ours::HeaderMutation {
        set_headers: vec![
            ours::HeaderValueOption {
                header: Some(ours::HeaderValue {
                    key: "x-citestream-search".into(),
                    raw_value: Bytes::from_static(b"injected"),
                    value: String::new(),
                }),
                append_action: ours::HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
            },
            ours::HeaderValueOption {
                header: Some(ours::HeaderValue {
                    key: "x-raw".into(),
                    raw_value: Bytes::from_static(&[0xff, 0x00, b'a']),
                    value: String::new(),
                }),
                append_action: ours::HeaderAppendAction::AddIfAbsent as i32,
            },
        ],
        remove_headers: vec!["content-length".into()],
    };
    let their_common = |h: bool, b: Option<theirs::body_mutation::Mutation>| {
        Some(theirs::CommonResponse {
            header_mutation: h.then(|| their_mutation.clone()),
            body_mutation: b.map(|m| theirs::BodyMutation { mutation: Some(m) }),
            ..Default::default()
        })
    };
    let our_common = |h: bool, b: Option<ours::body_mutation::Mutation>| {
        Some(ours::CommonResponse {
            header_mutation: h.then(|| our_mutation.clone()),
            body_mutation: b.map(|m| ours::BodyMutation { mutation: Some(m) }),
        })
    };
    use ours::body_mutation::Mutation as OM;
    use theirs::body_mutation::Mutation as EM;
    let piece = b"data: {\"x\":1}\n\n";
    let cases: Vec<(E, O)> = vec![
        (
            E::RequestHeaders(theirs::HeadersResponse { response: None }),
            O::RequestHeaders(ours::HeadersResponse { response: None }),
        ),
        (
            E::RequestHeaders(theirs::HeadersResponse {
                response: their_common(true, None),
            }),
            O::RequestHeaders(ours::HeadersResponse {
                response: our_common(true, None),
            }),
        ),
        (
            E::ResponseHeaders(theirs::HeadersResponse {
                response: their_common(true, None),
            }),
            O::ResponseHeaders(ours::HeadersResponse {
                response: our_common(true, None),
            }),
        ),
        (
            E::RequestBody(theirs::BodyResponse {
                response: their_common(true, Some(EM::Body(b"{\"model\":\"m\"}".to_vec()))),
            }),
            O::RequestBody(ours::BodyResponse {
                response: our_common(
                    true,
                    Some(OM::Body(Bytes::from_static(b"{\"model\":\"m\"}"))),
                ),
            }),
        ),
        (
            E::ResponseBody(theirs::BodyResponse { response: None }),
            O::ResponseBody(ours::BodyResponse { response: None }),
        ),
        (
            E::ResponseBody(theirs::BodyResponse {
                response: their_common(false, Some(EM::Body(piece.to_vec()))),
            }),
            O::ResponseBody(ours::BodyResponse {
                response: our_common(false, Some(OM::Body(Bytes::from_static(piece)))),
            }),
        ),
        (
            E::ResponseBody(theirs::BodyResponse {
                response: their_common(false, Some(EM::ClearBody(true))),
            }),
            O::ResponseBody(ours::BodyResponse {
                response: our_common(false, Some(OM::ClearBody(true))),
            }),
        ),
        (
            E::ResponseBody(theirs::BodyResponse {
                response: their_common(
                    false,
                    Some(EM::StreamedResponse(theirs::StreamedBodyResponse {
                        body: piece.to_vec(),
                        end_of_stream: false,
                        ..Default::default()
                    })),
                ),
            }),
            O::ResponseBody(ours::BodyResponse {
                response: our_common(
                    false,
                    Some(OM::StreamedResponse(ours::StreamedBodyResponse {
                        body: Bytes::from_static(piece),
                        end_of_stream: false,
                    })),
                ),
            }),
        ),
        (
            E::ResponseBody(theirs::BodyResponse {
                response: their_common(
                    false,
                    Some(EM::StreamedResponse(theirs::StreamedBodyResponse {
                        body: Vec::new(),
                        end_of_stream: true,
                        ..Default::default()
                    })),
                ),
            }),
            O::ResponseBody(ours::BodyResponse {
                response: our_common(
                    false,
                    Some(OM::StreamedResponse(ours::StreamedBodyResponse {
                        body: Bytes::new(),
                        end_of_stream: true,
                    })),
                ),
            }),
        ),
        (
            E::RequestTrailers(theirs::TrailersResponse::default()),
            O::RequestTrailers(ours::TrailersResponse::default()),
        ),
        (
            E::ResponseTrailers(theirs::TrailersResponse {
                header_mutation: Some(their_mutation.clone()),
            }),
            O::ResponseTrailers(ours::TrailersResponse {
                header_mutation: Some(our_mutation.clone()),
            }),
        ),
        (
            E::ImmediateResponse(theirs::ImmediateResponse {
                status: Some(HttpStatus { code: 401 }),
                headers: Some(their_mutation.clone()),
                body: br#"{"error":{"code":"invalid_api_key"}}"#.to_vec(),
                grpc_status: None,
                details: "citestream_unauthorized".into(),
            }),
            O::ImmediateResponse(ours::ImmediateResponse {
                status: Some(ours::HttpStatus { code: 401 }),
                headers: Some(our_mutation.clone()),
                body: Bytes::from_static(br#"{"error":{"code":"invalid_api_key"}}"#),
                details: "citestream_unauthorized".into(),
            }),
        ),
    ];
    let their_mode = filter::ProcessingMode {
        request_body_mode: filter::processing_mode::BodySendMode::None as i32,
        response_header_mode: filter::processing_mode::HeaderSendMode::Skip as i32,
        response_body_mode: filter::processing_mode::BodySendMode::None as i32,
        request_trailer_mode: filter::processing_mode::HeaderSendMode::Send as i32,
        ..Default::default()
    };
    let our_mode = ours::ProcessingMode {
        request_body_mode: ours::BodySendMode::None as i32,
        response_header_mode: ours::HeaderSendMode::Skip as i32,
        response_body_mode: ours::BodySendMode::None as i32,
        request_trailer_mode: ours::HeaderSendMode::Send as i32,
        ..Default::default()
    };
    for (e, o) in cases {
        for mode in [false, true] {
            let e = theirs::ProcessingResponse {
                response: Some(e.clone()),
                mode_override: mode.then_some(their_mode),
                ..Default::default()
            };
            let o = ours::ProcessingResponse {
                response: Some(o.clone()),
                mode_override: mode.then_some(our_mode),
            };
            same(&e, &o);
        }
    }
}

/// Every enum value ours names is Envoy's.
#[test]
fn enum_values() {
    use core::header_value_option::HeaderAppendAction as EA;
    use filter::processing_mode::{BodySendMode as EB, HeaderSendMode as EH};
    use ours::{BodySendMode as OB, HeaderAppendAction as OA, HeaderSendMode as OH};
    for (o, e) in [
        (OB::None, EB::None),
        (OB::Streamed, EB::Streamed),
        (OB::Buffered, EB::Buffered),
        (OB::BufferedPartial, EB::BufferedPartial),
        (OB::FullDuplexStreamed, EB::FullDuplexStreamed),
    ] {
        assert_eq!(o as i32, e as i32, "{o:?}");
    }
    for (o, e) in [
        (OH::Default, EH::Default),
        (OH::Send, EH::Send),
        (OH::Skip, EH::Skip),
    ] {
        assert_eq!(o as i32, e as i32, "{o:?}");
    }
    for (o, e) in [
        (OA::AppendIfExistsOrAdd, EA::AppendIfExistsOrAdd),
        (OA::AddIfAbsent, EA::AddIfAbsent),
        (OA::OverwriteIfExistsOrAdd, EA::OverwriteIfExistsOrAdd),
        (OA::OverwriteIfExists, EA::OverwriteIfExists),
    ] {
        assert_eq!(o as i32, e as i32, "{o:?}");
    }
}

/// An answer case ours does not declare (`streamed_immediate_response`)
/// decodes as "no answer", not an error; so does an empty message.
#[test]
fn undeclared_cases_decode_safely() {
    let e = theirs::ProcessingResponse {
        response: Some(
            theirs::processing_response::Response::StreamedImmediateResponse(
                theirs::StreamedImmediateResponse::default(),
            ),
        ),
        request_drain_requests: true,
        ..Default::default()
    };
    let o = ours::ProcessingResponse::decode(encode(&e)).unwrap();
    assert_eq!(o, ours::ProcessingResponse::default());
    let o = ours::ProcessingRequest::decode(Bytes::new()).unwrap();
    assert_eq!(o, ours::ProcessingRequest::default());
    // Truncated input is an error, not a panic.
    let whole = encode(&theirs::ProcessingRequest {
        request: Some(theirs::processing_request::Request::ResponseBody(
            theirs::HttpBody {
                body: vec![b'x'; 300],
                ..Default::default()
            },
        )),
        ..Default::default()
    });
    for cut in 1..whole.len() {
        let _ = ours::ProcessingRequest::decode(whole.slice(..cut));
    }
    assert!(ours::ProcessingRequest::decode(whole.slice(..whole.len() - 1)).is_err());
}

/// A decoded body is a slice of the received buffer, not a copy.
#[test]
fn bodies_decode_without_a_copy() {
    let e = theirs::ProcessingRequest {
        request: Some(theirs::processing_request::Request::ResponseBody(
            theirs::HttpBody {
                body: vec![b'x'; 200],
                end_of_stream: true,
                ..Default::default()
            },
        )),
        ..Default::default()
    };
    let frame = encode(&e);
    let o = ours::ProcessingRequest::decode(frame.clone()).unwrap();
    let Some(ours::processing_request::Request::ResponseBody(b)) = o.request else {
        panic!("{o:?}")
    };
    assert_eq!(b.body.len(), 200);
    let inside = frame.as_ptr_range();
    assert!(
        inside.contains(&b.body.as_ptr()),
        "the body points into the frame"
    );
}

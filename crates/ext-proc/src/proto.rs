//! Builders for the `envoy.service.ext_proc.v3` messages this processor
//! sends, and readers for the headers Envoy sends: the only module of the
//! processor that knows the shape of the protobuf types ([`crate::pb`]).
//! Body bytes go into the answers as the [`Bytes`] they are, not copied.
//!
//! Header values: Envoy (1.2x and later) sends them in `raw_value` and
//! leaves `value` empty; older builds used `value`. Readers take
//! `raw_value` when it is set, else `value`. Mutations are written with
//! `raw_value`, which every Envoy with `ext_proc` accepts.

use bytes::Bytes;
use citestream_host::exchange::{HeaderEdits, Reply};

use crate::pb::{
    BodyMutation, BodyResponse, CommonResponse, HeaderAppendAction, HeaderMap, HeaderMutation,
    HeaderValue, HeaderValueOption, HeadersResponse, HttpHeaders, HttpStatus, ImmediateResponse,
    ProcessingResponse, StreamedBodyResponse, TrailersResponse, body_mutation::Mutation,
    processing_response::Response,
};

/// Request headers as Envoy sent them: the pseudo-headers this processor
/// reads and the rest as an [`http::HeaderMap`] (what the host's auth
/// reads).
#[derive(Debug, Default)]
pub(crate) struct Headers {
    /// `:method`.
    pub(crate) method: String,
    /// `:path`, query string included.
    pub(crate) path: String,
    /// `:status` (response headers only; 0 when absent or not a number).
    pub(crate) status: u16,
    /// Every regular header. Names or values HTTP would refuse are left
    /// out (Envoy validated them already; nothing here reads them).
    pub(crate) map: http::HeaderMap,
}

impl Headers {
    /// Reads an Envoy header map.
    pub(crate) fn read(headers: Option<&HeaderMap>) -> Headers {
        let mut out = Headers::default();
        for h in headers.map(|m| m.headers.as_slice()).unwrap_or_default() {
            let value = if h.raw_value.is_empty() {
                h.value.as_bytes()
            } else {
                &h.raw_value[..]
            };
            match h.key.as_str() {
                ":method" => out.method = String::from_utf8_lossy(value).into_owned(),
                ":path" => out.path = String::from_utf8_lossy(value).into_owned(),
                ":status" => {
                    out.status = std::str::from_utf8(value)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                }
                k if k.starts_with(':') => {}
                k => {
                    if let (Ok(name), Ok(v)) = (
                        http::HeaderName::from_bytes(k.as_bytes()),
                        http::HeaderValue::from_bytes(value),
                    ) {
                        out.map.append(name, v);
                    }
                }
            }
        }
        out
    }
}

/// An `HttpHeaders` message as Envoy sends it: `pairs` in `raw_value`
/// (pseudo-headers such as `:path` included), for tests and benchmarks
/// that drive a processor without Envoy.
#[must_use]
pub fn http_headers(pairs: &[(&str, &str)], end_of_stream: bool) -> HttpHeaders {
    HttpHeaders {
        headers: Some(HeaderMap {
            headers: pairs
                .iter()
                .map(|(k, v)| HeaderValue {
                    key: (*k).to_owned(),
                    raw_value: Bytes::copy_from_slice(v.as_bytes()),
                    ..Default::default()
                })
                .collect(),
        }),
        end_of_stream,
    }
}

/// The one translation of the exchange's header edits into Envoy's
/// `HeaderMutation` (`None` when there is nothing to change). Sets replace
/// every value the header had (`OVERWRITE_IF_EXISTS_OR_ADD`); the edits
/// never set and remove one name, so Envoy's order of the two lists does
/// not matter.
pub(crate) fn mutation(edits: &HeaderEdits) -> Option<HeaderMutation> {
    if edits.is_empty() {
        return None;
    }
    Some(HeaderMutation {
        set_headers: edits
            .sets()
            .map(|(n, v)| HeaderValueOption {
                header: Some(HeaderValue {
                    key: n.as_str().to_owned(),
                    raw_value: Bytes::copy_from_slice(v.as_bytes()),
                    ..Default::default()
                }),
                append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
            })
            .collect(),
        remove_headers: edits.removals().map(|n| n.as_str().to_owned()).collect(),
    })
}

fn common(edits: &HeaderEdits, body: Option<Mutation>) -> Option<CommonResponse> {
    let header_mutation = mutation(edits);
    if header_mutation.is_none() {
        return body_only(body);
    }
    Some(CommonResponse {
        header_mutation,
        body_mutation: body.map(|m| BodyMutation { mutation: Some(m) }),
    })
}

/// [`common`] without header edits (every response body answer): no
/// `HeaderEdits` made or read per body message.
#[inline]
fn body_only(body: Option<Mutation>) -> Option<CommonResponse> {
    body.map(|m| CommonResponse {
        header_mutation: None,
        body_mutation: Some(BodyMutation { mutation: Some(m) }),
    })
}

#[inline]
fn wrap(r: Response) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(r),
        ..Default::default()
    }
}

/// Continue with the request headers, changed by `edits`.
pub(crate) fn request_headers(edits: &HeaderEdits) -> ProcessingResponse {
    wrap(Response::RequestHeaders(HeadersResponse {
        response: common(edits, None),
    }))
}

/// Continue with the response headers, changed by `edits`.
pub(crate) fn response_headers(edits: &HeaderEdits) -> ProcessingResponse {
    wrap(Response::ResponseHeaders(HeadersResponse {
        response: common(edits, None),
    }))
}

/// What to do with one body message in `BUFFERED` or `STREAMED` mode.
#[derive(Debug)]
pub(crate) enum Chunk {
    /// Leave it as it is.
    Keep,
    /// Replace it with these bytes (empty: send nothing for it).
    Replace(Bytes),
}

#[inline]
fn chunk_mutation(chunk: Chunk) -> Option<Mutation> {
    match chunk {
        Chunk::Keep => None,
        Chunk::Replace(b) if b.is_empty() => Some(Mutation::ClearBody(true)),
        Chunk::Replace(b) => Some(Mutation::Body(b)),
    }
}

/// The answer to a request body message (`BUFFERED` mode).
pub(crate) fn request_body(chunk: Chunk, edits: &HeaderEdits) -> ProcessingResponse {
    wrap(Response::RequestBody(BodyResponse {
        response: common(edits, chunk_mutation(chunk)),
    }))
}

/// The answer to a response body message in `BUFFERED` or `STREAMED`
/// mode.
#[inline]
pub(crate) fn response_body(chunk: Chunk) -> ProcessingResponse {
    wrap(Response::ResponseBody(BodyResponse {
        response: body_only(chunk_mutation(chunk)),
    }))
}

/// One piece of the response body in `FULL_DUPLEX_STREAMED` mode.
#[inline]
pub(crate) fn response_body_streamed(body: Bytes, end_of_stream: bool) -> ProcessingResponse {
    let m = Mutation::StreamedResponse(StreamedBodyResponse {
        body,
        end_of_stream,
    });
    wrap(Response::ResponseBody(BodyResponse {
        response: body_only(Some(m)),
    }))
}

/// Continue with the request trailers unchanged.
pub(crate) fn request_trailers() -> ProcessingResponse {
    wrap(Response::RequestTrailers(TrailersResponse::default()))
}

/// Continue with the response trailers unchanged.
pub(crate) fn response_trailers() -> ProcessingResponse {
    wrap(Response::ResponseTrailers(TrailersResponse::default()))
}

/// Answer the client now with the exchange's reply; the request never
/// goes upstream (or, after the response started, the stream is reset).
pub(crate) fn immediate(reply: Reply, details: &str) -> ProcessingResponse {
    wrap(Response::ImmediateResponse(ImmediateResponse {
        status: Some(HttpStatus {
            code: i32::from(reply.status),
        }),
        headers: mutation(&reply.headers),
        body: reply.body,
        details: details.to_owned(),
    }))
}

//! Builders for the `envoy.service.ext_proc.v3` messages this processor
//! sends, and readers for the headers Envoy sends: the only module that
//! knows the shape of the generated protobuf types.
//!
//! Header values: Envoy (1.2x and later) sends them in `raw_value` and
//! leaves `value` empty; older builds used `value`. Readers take
//! `raw_value` when it is set, else `value`. Mutations are written with
//! `raw_value`, which every Envoy with `ext_proc` accepts.

use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, ImmediateResponse,
    ProcessingResponse, StreamedBodyResponse, TrailersResponse, body_mutation::Mutation,
    processing_response::Response,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;

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
                &h.raw_value
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

    /// The path without its query string.
    pub(crate) fn path_only(&self) -> &str {
        self.path.split(['?', '#']).next().unwrap_or_default()
    }
}

/// Header changes to send with a response.
#[derive(Debug, Default)]
pub(crate) struct HeaderEdits {
    set: Vec<HeaderValueOption>,
    remove: Vec<String>,
}

impl HeaderEdits {
    /// Sets `name` to `value`, replacing any value it had.
    pub(crate) fn set(&mut self, name: &str, value: impl Into<Vec<u8>>) -> &mut Self {
        self.set.push(HeaderValueOption {
            header: Some(HeaderValue {
                key: name.to_owned(),
                raw_value: value.into(),
                ..Default::default()
            }),
            append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
            ..Default::default()
        });
        self
    }

    /// Removes `name`.
    pub(crate) fn remove(&mut self, name: &str) -> &mut Self {
        self.remove.push(name.to_owned());
        self
    }

    fn into_proto(self) -> Option<HeaderMutation> {
        (!self.set.is_empty() || !self.remove.is_empty()).then_some(HeaderMutation {
            set_headers: self.set,
            remove_headers: self.remove,
        })
    }
}

fn common(edits: HeaderEdits, body: Option<Mutation>) -> Option<CommonResponse> {
    let header_mutation = edits.into_proto();
    if header_mutation.is_none() && body.is_none() {
        return None;
    }
    Some(CommonResponse {
        header_mutation,
        body_mutation: body.map(|m| BodyMutation { mutation: Some(m) }),
        ..Default::default()
    })
}

fn wrap(r: Response) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(r),
        ..Default::default()
    }
}

/// Continue with the request headers, changed by `edits`.
pub(crate) fn request_headers(edits: HeaderEdits) -> ProcessingResponse {
    wrap(Response::RequestHeaders(HeadersResponse {
        response: common(edits, None),
    }))
}

/// Continue with the response headers, changed by `edits`.
pub(crate) fn response_headers(edits: HeaderEdits) -> ProcessingResponse {
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
    Replace(Vec<u8>),
}

fn chunk_mutation(chunk: Chunk) -> Option<Mutation> {
    match chunk {
        Chunk::Keep => None,
        Chunk::Replace(b) if b.is_empty() => Some(Mutation::ClearBody(true)),
        Chunk::Replace(b) => Some(Mutation::Body(b)),
    }
}

/// The answer to a request body message (`BUFFERED` mode).
pub(crate) fn request_body(chunk: Chunk, edits: HeaderEdits) -> ProcessingResponse {
    wrap(Response::RequestBody(BodyResponse {
        response: common(edits, chunk_mutation(chunk)),
    }))
}

/// The answer to a response body message in `BUFFERED` or `STREAMED`
/// mode.
pub(crate) fn response_body(chunk: Chunk) -> ProcessingResponse {
    wrap(Response::ResponseBody(BodyResponse {
        response: common(HeaderEdits::default(), chunk_mutation(chunk)),
    }))
}

/// One piece of the response body in `FULL_DUPLEX_STREAMED` mode.
pub(crate) fn response_body_streamed(body: Vec<u8>, end_of_stream: bool) -> ProcessingResponse {
    let m = Mutation::StreamedResponse(StreamedBodyResponse {
        body,
        end_of_stream,
        ..Default::default()
    });
    wrap(Response::ResponseBody(BodyResponse {
        response: common(HeaderEdits::default(), Some(m)),
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

/// Answer the client now with `status`, a JSON `body` and `edits` as
/// extra headers; the request never goes upstream.
pub(crate) fn immediate(
    status: u16,
    body: Vec<u8>,
    mut edits: HeaderEdits,
    details: &str,
) -> ProcessingResponse {
    edits.set("content-type", "application/json");
    wrap(Response::ImmediateResponse(ImmediateResponse {
        status: Some(HttpStatus {
            code: i32::from(status),
        }),
        headers: edits.into_proto(),
        body,
        grpc_status: None,
        details: details.to_owned(),
    }))
}

//! The `envoy.service.ext_proc.v3` messages this crate reads and writes,
//! as its own `prost` types: the subset of Envoy's protos the processor
//! and the do-nothing processor use, with every body field a
//! [`bytes::Bytes`].
//!
//! Contract:
//! * Wire-compatible with Envoy's protos: same field numbers, types and
//!   enum values (checked field by field against `envoy-types`' generated
//!   code, both directions, in `crates/ext-proc/tests/wire.rs`).
//! * A body decoded from a gRPC frame is a slice of the frame's buffer
//!   (tonic's decode buffer hands `prost` a `Bytes`), not a copy; a body
//!   given to an answer is encoded straight from its `Bytes`. Header
//!   values (`raw_value`) are slices too.
//! * Fields and oneof cases this crate does not use are not declared:
//!   `prost` skips unknown fields when decoding, so whatever else Envoy
//!   sends (`attributes`, `metadata_context`, flow control, fields of a
//!   newer Envoy) decodes safely and costs no allocation. What is not
//!   declared is never sent.
//!
//! Why hand-written and not generated: the subset is small (eighteen
//! messages and enums), while generating it from the `.proto` files
//! means vendoring `external_processor.proto` and its import tree
//! (`config/core/v3/base.proto` alone pulls in addresses, socket
//! options, back-off, HTTP URIs, percentages, the `udpa`, `xds` and
//! `validate` annotations and the well-known types: some thirty files)
//! and a build script running `protox` and `tonic-prost-build` on every
//! clean build, for types whose unused fields would then be decoded.
//! The field numbers below are those of Envoy's data-plane API
//! (Apache-2.0, Copyright Envoy Project Authors:
//! `envoy/service/ext_proc/v3/external_processor.proto`,
//! `envoy/config/core/v3/base.proto`,
//! `envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto`,
//! `envoy/type/v3/http_status.proto`), as vendored in `envoy-types`
//! 0.7.7, which the wire test decodes against. The gRPC service around
//! them is [`crate::grpc`].

use bytes::Bytes;

/// `envoy.service.ext_proc.v3.ProcessingRequest`: one message from Envoy.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessingRequest {
    /// What the message carries.
    #[prost(oneof = "processing_request::Request", tags = "2, 3, 4, 5, 6, 7")]
    pub request: Option<processing_request::Request>,
    /// Envoy ignores the answers (and waits for none).
    #[prost(bool, tag = "10")]
    pub observability_mode: bool,
    /// The filter's body modes; in the first message of a stream only.
    #[prost(message, optional, tag = "11")]
    pub protocol_config: Option<ProtocolConfiguration>,
}

/// The cases of [`ProcessingRequest::request`].
pub mod processing_request {
    /// `ProcessingRequest.request`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Request {
        /// `request_headers`.
        #[prost(message, tag = "2")]
        RequestHeaders(super::HttpHeaders),
        /// `response_headers`.
        #[prost(message, tag = "3")]
        ResponseHeaders(super::HttpHeaders),
        /// `request_body`.
        #[prost(message, tag = "4")]
        RequestBody(super::HttpBody),
        /// `response_body`.
        #[prost(message, tag = "5")]
        ResponseBody(super::HttpBody),
        /// `request_trailers`.
        #[prost(message, tag = "6")]
        RequestTrailers(super::HttpTrailers),
        /// `response_trailers`.
        #[prost(message, tag = "7")]
        ResponseTrailers(super::HttpTrailers),
    }
}

/// `envoy.service.ext_proc.v3.ProtocolConfiguration`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct ProtocolConfiguration {
    /// A [`BodySendMode`].
    #[prost(enumeration = "BodySendMode", tag = "1")]
    pub request_body_mode: i32,
    /// A [`BodySendMode`].
    #[prost(enumeration = "BodySendMode", tag = "2")]
    pub response_body_mode: i32,
    /// `send_body_without_waiting_for_header_response`.
    #[prost(bool, tag = "3")]
    pub send_body_without_waiting_for_header_response: bool,
}

/// `envoy.service.ext_proc.v3.HttpHeaders` (its `attributes` are not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpHeaders {
    /// The headers, pseudo-headers (`:path`, `:status`) included.
    #[prost(message, optional, tag = "1")]
    pub headers: Option<HeaderMap>,
    /// No body follows.
    #[prost(bool, tag = "3")]
    pub end_of_stream: bool,
}

/// `envoy.service.ext_proc.v3.HttpBody`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct HttpBody {
    /// The bytes (a slice of the received frame).
    #[prost(bytes = "bytes", tag = "1")]
    pub body: Bytes,
    /// The last piece of the body.
    #[prost(bool, tag = "2")]
    pub end_of_stream: bool,
}

/// `envoy.service.ext_proc.v3.HttpTrailers`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpTrailers {
    /// The trailers.
    #[prost(message, optional, tag = "1")]
    pub trailers: Option<HeaderMap>,
}

/// `envoy.config.core.v3.HeaderMap`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderMap {
    /// Every header, in order.
    #[prost(message, repeated, tag = "1")]
    pub headers: Vec<HeaderValue>,
}

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct HeaderValue {
    /// The name.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value as text (older Envoy builds; empty when `raw_value` is set).
    #[prost(string, tag = "2")]
    pub value: String,
    /// The value as bytes (what Envoy 1.2x and later send).
    #[prost(bytes = "bytes", tag = "3")]
    pub raw_value: Bytes,
}

/// `envoy.config.core.v3.HeaderValueOption`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct HeaderValueOption {
    /// The header to set.
    #[prost(message, optional, tag = "1")]
    pub header: Option<HeaderValue>,
    /// A [`HeaderAppendAction`].
    #[prost(enumeration = "HeaderAppendAction", tag = "3")]
    pub append_action: i32,
}

/// `envoy.config.core.v3.HeaderValueOption.HeaderAppendAction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, prost::Enumeration)]
#[repr(i32)]
pub enum HeaderAppendAction {
    /// `APPEND_IF_EXISTS_OR_ADD`.
    AppendIfExistsOrAdd = 0,
    /// `ADD_IF_ABSENT`.
    AddIfAbsent = 1,
    /// `OVERWRITE_IF_EXISTS_OR_ADD`.
    OverwriteIfExistsOrAdd = 2,
    /// `OVERWRITE_IF_EXISTS`.
    OverwriteIfExists = 3,
}

/// `envoy.service.ext_proc.v3.ProcessingResponse`: one answer to Envoy.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessingResponse {
    /// What the answer is.
    #[prost(oneof = "processing_response::Response", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub response: Option<processing_response::Response>,
    /// New processing modes for the rest of the exchange (honoured with
    /// the filter's `allow_mode_override`).
    #[prost(message, optional, tag = "9")]
    pub mode_override: Option<ProcessingMode>,
}

/// The cases of [`ProcessingResponse::response`].
pub mod processing_response {
    /// `ProcessingResponse.response`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Response {
        /// `request_headers`.
        #[prost(message, tag = "1")]
        RequestHeaders(super::HeadersResponse),
        /// `response_headers`.
        #[prost(message, tag = "2")]
        ResponseHeaders(super::HeadersResponse),
        /// `request_body`.
        #[prost(message, tag = "3")]
        RequestBody(super::BodyResponse),
        /// `response_body`.
        #[prost(message, tag = "4")]
        ResponseBody(super::BodyResponse),
        /// `request_trailers`.
        #[prost(message, tag = "5")]
        RequestTrailers(super::TrailersResponse),
        /// `response_trailers`.
        #[prost(message, tag = "6")]
        ResponseTrailers(super::TrailersResponse),
        /// `immediate_response`.
        #[prost(message, tag = "7")]
        ImmediateResponse(super::ImmediateResponse),
    }
}

/// `envoy.service.ext_proc.v3.HeadersResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeadersResponse {
    /// `None`: continue unchanged.
    #[prost(message, optional, tag = "1")]
    pub response: Option<CommonResponse>,
}

/// `envoy.service.ext_proc.v3.BodyResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BodyResponse {
    /// `None`: continue unchanged.
    #[prost(message, optional, tag = "1")]
    pub response: Option<CommonResponse>,
}

/// `envoy.service.ext_proc.v3.TrailersResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrailersResponse {
    /// `None`: continue unchanged.
    #[prost(message, optional, tag = "1")]
    pub header_mutation: Option<HeaderMutation>,
}

/// `envoy.service.ext_proc.v3.CommonResponse` (status `CONTINUE`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommonResponse {
    /// Headers to set and remove.
    #[prost(message, optional, tag = "2")]
    pub header_mutation: Option<HeaderMutation>,
    /// What becomes of the body.
    #[prost(message, optional, tag = "3")]
    pub body_mutation: Option<BodyMutation>,
}

/// `envoy.service.ext_proc.v3.HeaderMutation`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderMutation {
    /// Headers to set.
    #[prost(message, repeated, tag = "1")]
    pub set_headers: Vec<HeaderValueOption>,
    /// Names to remove.
    #[prost(string, repeated, tag = "2")]
    pub remove_headers: Vec<String>,
}

/// `envoy.service.ext_proc.v3.BodyMutation`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct BodyMutation {
    /// The change.
    #[prost(oneof = "body_mutation::Mutation", tags = "1, 2, 3")]
    pub mutation: Option<body_mutation::Mutation>,
}

/// The cases of [`BodyMutation::mutation`].
pub mod body_mutation {
    use bytes::Bytes;

    /// `BodyMutation.mutation`.
    #[derive(Clone, PartialEq, Eq, prost::Oneof)]
    pub enum Mutation {
        /// `body`: these bytes instead of the message's.
        #[prost(bytes = "bytes", tag = "1")]
        Body(Bytes),
        /// `clear_body`: none of the message's bytes.
        #[prost(bool, tag = "2")]
        ClearBody(bool),
        /// `streamed_response` (`FULL_DUPLEX_STREAMED`).
        #[prost(message, tag = "3")]
        StreamedResponse(super::StreamedBodyResponse),
    }
}

/// `envoy.service.ext_proc.v3.StreamedBodyResponse`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct StreamedBodyResponse {
    /// The bytes Envoy forwards.
    #[prost(bytes = "bytes", tag = "1")]
    pub body: Bytes,
    /// The body ends here.
    #[prost(bool, tag = "2")]
    pub end_of_stream: bool,
}

/// `envoy.service.ext_proc.v3.ImmediateResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImmediateResponse {
    /// The HTTP status.
    #[prost(message, optional, tag = "1")]
    pub status: Option<HttpStatus>,
    /// Headers of the answer.
    #[prost(message, optional, tag = "2")]
    pub headers: Option<HeaderMutation>,
    /// The answer's body.
    #[prost(bytes = "bytes", tag = "3")]
    pub body: Bytes,
    /// Envoy's `response_code_details`.
    #[prost(string, tag = "5")]
    pub details: String,
}

/// `envoy.type.v3.HttpStatus`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct HttpStatus {
    /// The status code.
    #[prost(int32, tag = "1")]
    pub code: i32,
}

/// `envoy.extensions.filters.http.ext_proc.v3.ProcessingMode`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct ProcessingMode {
    /// A [`HeaderSendMode`].
    #[prost(enumeration = "HeaderSendMode", tag = "1")]
    pub request_header_mode: i32,
    /// A [`HeaderSendMode`].
    #[prost(enumeration = "HeaderSendMode", tag = "2")]
    pub response_header_mode: i32,
    /// A [`BodySendMode`].
    #[prost(enumeration = "BodySendMode", tag = "3")]
    pub request_body_mode: i32,
    /// A [`BodySendMode`].
    #[prost(enumeration = "BodySendMode", tag = "4")]
    pub response_body_mode: i32,
    /// A [`HeaderSendMode`].
    #[prost(enumeration = "HeaderSendMode", tag = "5")]
    pub request_trailer_mode: i32,
    /// A [`HeaderSendMode`].
    #[prost(enumeration = "HeaderSendMode", tag = "6")]
    pub response_trailer_mode: i32,
}

/// `ProcessingMode.HeaderSendMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, prost::Enumeration)]
#[repr(i32)]
pub enum HeaderSendMode {
    /// `DEFAULT`.
    Default = 0,
    /// `SEND`.
    Send = 1,
    /// `SKIP`.
    Skip = 2,
}

/// `ProcessingMode.BodySendMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, prost::Enumeration)]
#[repr(i32)]
pub enum BodySendMode {
    /// `NONE`.
    None = 0,
    /// `STREAMED`.
    Streamed = 1,
    /// `BUFFERED`.
    Buffered = 2,
    /// `BUFFERED_PARTIAL`.
    BufferedPartial = 3,
    /// `FULL_DUPLEX_STREAMED`.
    FullDuplexStreamed = 4,
}

//! [`RequestError`]: a request body the request side refuses, answered
//! with a 400 in the endpoint's own error shape. A leaf of the request
//! module: every reader of bodies reports through it.

use std::fmt;

use crate::endpoint::Endpoint;
use crate::json::push_json_str;

/// What was wrong with a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestErrorKind {
    /// The body is not valid JSON.
    NotJson,
    /// The body is JSON but not an object.
    NotObject,
    /// `web_search` is present with a value that is not a boolean.
    WebSearchNotBoolean,
}

/// A request the gateway answers itself with a 400 `invalid_request_error`
/// in the endpoint's normal error shape (see [`RequestError::body`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestError {
    endpoint: Endpoint,
    kind: RequestErrorKind,
    message: String,
}

impl RequestError {
    pub(super) fn new(endpoint: Endpoint, kind: RequestErrorKind, message: String) -> Self {
        RequestError {
            endpoint,
            kind,
            message,
        }
    }

    /// What was wrong.
    #[must_use]
    pub fn kind(&self) -> RequestErrorKind {
        self.kind
    }

    /// The endpoint whose error shape [`RequestError::body`] uses.
    #[must_use]
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    /// The human-readable message put in the error body.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status to answer with: always 400.
    #[must_use]
    pub fn status(&self) -> u16 {
        400
    }

    /// The offending request parameter, when there is one (`web_search`).
    #[must_use]
    pub fn param(&self) -> Option<&'static str> {
        match self.kind {
            RequestErrorKind::WebSearchNotBoolean => Some("web_search"),
            RequestErrorKind::NotJson | RequestErrorKind::NotObject => None,
        }
    }

    /// The JSON error body, ready to send with [`RequestError::status`] and
    /// `content-type: application/json`.
    ///
    /// * chat and responses: `{"error":{"message":…,"type":"invalid_request_error","param":…,"code":null}}`
    /// * messages: `{"type":"error","error":{"type":"invalid_request_error","message":…}}`
    #[must_use]
    pub fn body(&self) -> Vec<u8> {
        let mut out = String::new();
        match self.endpoint {
            Endpoint::ChatCompletions | Endpoint::Responses => {
                out.push_str("{\"error\":{\"message\":");
                push_json_str(&mut out, &self.message);
                out.push_str(",\"type\":\"invalid_request_error\",\"param\":");
                match self.param() {
                    Some(p) => push_json_str(&mut out, p),
                    None => out.push_str("null"),
                }
                out.push_str(",\"code\":null}}");
            }
            Endpoint::Messages => {
                out.push_str("{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":");
                push_json_str(&mut out, &self.message);
                out.push_str("}}");
            }
        }
        out.into_bytes()
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RequestError {}

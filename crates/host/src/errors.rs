//! Error bodies the hosts answer themselves, in the endpoint's normal error
//! shape (docs/reference/responses.md, "Errors the hosts answer themselves").
//!
//! Two shapes:
//! * OpenAI (`/v1/chat/completions` and every other path):
//!   `{"error":{"message","type","param","code"}}`.
//! * Anthropic (`/v1/messages` and the paths under it):
//!   `{"type":"error","error":{"type","message"}}`.
//!
//! | status | OpenAI `type` / `code` | Anthropic `type` |
//! |---|---|---|
//! | 400 | `invalid_request_error` / `null` (`param` = `web_search` when it is at fault) | `invalid_request_error` |
//! | 401 | `invalid_request_error` / `invalid_api_key` | `authentication_error` |
//! | 404, 405 | `invalid_request_error` / `not_found`, `method_not_allowed` | `not_found_error` |
//! | 413 | `invalid_request_error` / `request_too_large` | `request_too_large` |
//! | 502 | `api_error` / `upstream_unavailable` | `api_error` |
//! | 504 | `api_error` / `upstream_timeout` | `timeout_error` |
//!
//! Upstream error responses are never rewritten into these: they pass
//! through as the upstream sent them.
//!
//! # Example
//! ```
//! use citestream_host::errors::{ErrorReply, ErrorShape};
//!
//! let r = ErrorReply::unauthorized(ErrorShape::Anthropic, "Incorrect API key provided.");
//! assert_eq!(r.status(), 401);
//! assert_eq!(
//!     &r.body()[..],
//!     br#"{"type":"error","error":{"type":"authentication_error","message":"Incorrect API key provided."}}"#
//! );
//! ```

use bytes::Bytes;
use citestream::request::{Endpoint, RequestError};
use serde_json::Value;

/// Which error body shape a request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorShape {
    /// OpenAI's.
    OpenAi,
    /// Anthropic's.
    Anthropic,
}

impl ErrorShape {
    /// The shape of a request path: Anthropic under `/v1/messages`, else
    /// OpenAI.
    #[must_use]
    pub fn for_path(path: &str) -> ErrorShape {
        let rest = path.strip_prefix("/v1/messages");
        if rest.is_some_and(|r| r.is_empty() || r.starts_with('/') || r.starts_with('?')) {
            ErrorShape::Anthropic
        } else {
            ErrorShape::OpenAi
        }
    }
}

impl From<Endpoint> for ErrorShape {
    fn from(e: Endpoint) -> Self {
        match e {
            Endpoint::ChatCompletions | Endpoint::Responses => ErrorShape::OpenAi,
            Endpoint::Messages => ErrorShape::Anthropic,
        }
    }
}

/// A complete error answer: a status and a JSON body (send it with
/// `content-type: application/json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReply {
    status: u16,
    body: Bytes,
}

impl ErrorReply {
    fn build(
        shape: ErrorShape,
        status: u16,
        openai: (&str, Option<&str>, Option<&str>),
        anthropic_type: &str,
        message: &str,
    ) -> ErrorReply {
        let (ty, param, code) = openai;
        let q = |s: &str| Value::from(s).to_string();
        let opt = |s: Option<&str>| s.map_or_else(|| "null".to_owned(), q);
        // Written by hand to keep the members in the order the APIs use.
        let v = match shape {
            ErrorShape::OpenAi => format!(
                r#"{{"error":{{"message":{},"type":{},"param":{},"code":{}}}}}"#,
                q(message),
                q(ty),
                opt(param),
                opt(code)
            ),
            ErrorShape::Anthropic => format!(
                r#"{{"type":"error","error":{{"type":{},"message":{}}}}}"#,
                q(anthropic_type),
                q(message)
            ),
        };
        ErrorReply {
            status,
            body: Bytes::from(v.to_string()),
        }
    }

    /// A 400 `invalid_request_error`.
    #[must_use]
    pub fn invalid_request(shape: ErrorShape, message: &str, param: Option<&str>) -> ErrorReply {
        let t = "invalid_request_error";
        ErrorReply::build(shape, 400, (t, param, None), t, message)
    }

    /// A 401 for a missing or unknown key.
    #[must_use]
    pub fn unauthorized(shape: ErrorShape, message: &str) -> ErrorReply {
        let o = ("invalid_request_error", None, Some("invalid_api_key"));
        ErrorReply::build(shape, 401, o, "authentication_error", message)
    }

    /// A 404 for a path the host does not serve.
    #[must_use]
    pub fn not_found(shape: ErrorShape, method: &str, path: &str) -> ErrorReply {
        let msg = format!("Unknown request URL: {method} {path}.");
        let o = ("invalid_request_error", None, Some("not_found"));
        ErrorReply::build(shape, 404, o, "not_found_error", &msg)
    }

    /// A 405 for a method the path does not take (send `allow` with it).
    #[must_use]
    pub fn method_not_allowed(shape: ErrorShape, method: &str, path: &str) -> ErrorReply {
        let msg = format!("Method {method} is not allowed on {path}.");
        let o = ("invalid_request_error", None, Some("method_not_allowed"));
        ErrorReply::build(shape, 405, o, "not_found_error", &msg)
    }

    /// A 413 for a request body over `limit` bytes.
    #[must_use]
    pub fn too_large(shape: ErrorShape, limit: u64) -> ErrorReply {
        let msg = format!("Request body too large: the limit is {limit} bytes.");
        let o = ("invalid_request_error", None, Some("request_too_large"));
        ErrorReply::build(shape, 413, o, "request_too_large", &msg)
    }

    /// A 502: the upstream could not be reached or broke off before its
    /// response headers.
    #[must_use]
    pub fn bad_gateway(shape: ErrorShape, detail: &str) -> ErrorReply {
        let msg = format!("The upstream model server could not be reached: {detail}");
        let o = ("api_error", None, Some("upstream_unavailable"));
        ErrorReply::build(shape, 502, o, "api_error", &msg)
    }

    /// A 504: the upstream did not connect or answer in time.
    #[must_use]
    pub fn gateway_timeout(shape: ErrorShape, detail: &str) -> ErrorReply {
        let msg = format!("The upstream model server did not answer in time: {detail}");
        let o = ("api_error", None, Some("upstream_timeout"));
        ErrorReply::build(shape, 504, o, "timeout_error", &msg)
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The JSON body.
    #[must_use]
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The JSON body, owned.
    #[must_use]
    pub fn into_body(self) -> Bytes {
        self.body
    }
}

impl From<&RequestError> for ErrorReply {
    /// The 400 of a request body the flow refused (its own body shape).
    fn from(e: &RequestError) -> Self {
        ErrorReply {
            status: e.status(),
            body: Bytes::from(e.body()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(r: &ErrorReply) -> Value {
        serde_json::from_slice(r.body()).unwrap()
    }

    #[test]
    fn shapes_by_path() {
        assert_eq!(ErrorShape::for_path("/v1/messages"), ErrorShape::Anthropic);
        assert_eq!(
            ErrorShape::for_path("/v1/messages/count_tokens"),
            ErrorShape::Anthropic
        );
        assert_eq!(ErrorShape::for_path("/v1/messagesx"), ErrorShape::OpenAi);
        assert_eq!(
            ErrorShape::for_path("/v1/chat/completions"),
            ErrorShape::OpenAi
        );
        assert_eq!(ErrorShape::for_path("/v1/models"), ErrorShape::OpenAi);
    }

    #[test]
    fn spec_401_bodies() {
        let o = ErrorReply::unauthorized(ErrorShape::OpenAi, "m");
        assert_eq!(
            &o.body()[..],
            br#"{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#
        );
        assert_eq!(
            parse(&o),
            json!({"error":{"message":"m","type":"invalid_request_error","param":null,"code":"invalid_api_key"}})
        );
        let a = ErrorReply::unauthorized(ErrorShape::Anthropic, "m");
        assert_eq!(
            parse(&a),
            json!({"type":"error","error":{"type":"authentication_error","message":"m"}})
        );
    }

    #[test]
    fn statuses_and_types() {
        let cases = [
            (
                ErrorReply::invalid_request(ErrorShape::OpenAi, "x", Some("web_search")),
                400,
            ),
            (ErrorReply::too_large(ErrorShape::Anthropic, 10), 413),
            (ErrorReply::not_found(ErrorShape::OpenAi, "GET", "/x"), 404),
            (
                ErrorReply::method_not_allowed(ErrorShape::OpenAi, "POST", "/healthz"),
                405,
            ),
            (ErrorReply::bad_gateway(ErrorShape::OpenAi, "refused"), 502),
            (
                ErrorReply::gateway_timeout(ErrorShape::Anthropic, "5s"),
                504,
            ),
        ];
        for (r, status) in cases {
            assert_eq!(r.status(), status);
            let v = parse(&r);
            assert!(v["error"]["message"].is_string(), "{v}");
        }
        let v = parse(&ErrorReply::invalid_request(
            ErrorShape::OpenAi,
            "x",
            Some("web_search"),
        ));
        assert_eq!(v["error"]["param"], "web_search");
        let v = parse(&ErrorReply::too_large(ErrorShape::Anthropic, 10));
        assert_eq!(v["error"]["type"], "request_too_large");
    }
}

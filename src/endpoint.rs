//! [`Endpoint`]: which API a body belongs to. Both sides of the data path
//! dispatch on it (the request side for the request and error shapes, the
//! response side for the rewriter), so it sits below both.
//!
//! Its names are the one string form every adapter uses (the CLI's
//! `--endpoint`, the Python package's `endpoint=`, the hosts' metric
//! label): `chat`, `messages`, `responses`. [`Endpoint::from_path`] maps the HTTP
//! path a host serves it on.
//!
//! ```
//! use citestream::Endpoint;
//! assert_eq!("messages".parse::<Endpoint>(), Ok(Endpoint::Messages));
//! assert_eq!(Endpoint::ChatCompletions.to_string(), "chat");
//! assert_eq!(Endpoint::from_path("/v1/chat/completions"), Some(Endpoint::ChatCompletions));
//! assert_eq!(Endpoint::from_path("/v1/models"), None);
//! ```

use std::fmt;
use std::str::FromStr;

/// The API endpoint a body was sent to or came from. It decides the
/// request shape (messages, content parts or blocks, `system`), the error
/// shape and the response rewriter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// OpenAI-compatible `/v1/chat/completions`.
    ChatCompletions,
    /// Anthropic-compatible `/v1/messages`.
    Messages,
    /// OpenAI-compatible `/v1/responses` (the Responses API; the OpenAI
    /// error shape).
    Responses,
}

impl Endpoint {
    /// Every endpoint, in a fixed order (for tables indexed by endpoint).
    pub const ALL: [Endpoint; 3] = [
        Endpoint::ChatCompletions,
        Endpoint::Messages,
        Endpoint::Responses,
    ];

    /// The endpoint's name: `"chat"`, `"messages"` or `"responses"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat",
            Endpoint::Messages => "messages",
            Endpoint::Responses => "responses",
        }
    }

    /// The HTTP path the endpoint is served on (`POST`).
    #[must_use]
    pub const fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Messages => "/v1/messages",
            Endpoint::Responses => "/v1/responses",
        }
    }

    /// The endpoint served on `path` (exactly; no query string), if any.
    #[must_use]
    pub fn from_path(path: &str) -> Option<Endpoint> {
        Endpoint::ALL.into_iter().find(|e| e.path() == path)
    }

    /// The position of the endpoint in [`Endpoint::ALL`].
    #[must_use]
    pub fn index(self) -> usize {
        Endpoint::ALL
            .iter()
            .position(|e| *e == self)
            .unwrap_or_default()
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error returned when parsing an [`Endpoint`] from a string that is not
/// one of the names of [`Endpoint::as_str`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseEndpointError {
    _private: (),
}

impl fmt::Display for ParseEndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown endpoint (expected ")?;
        for (i, e) in Endpoint::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(if i + 1 == Endpoint::ALL.len() {
                    " or "
                } else {
                    ", "
                })?;
            }
            f.write_str(e.as_str())?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for ParseEndpointError {}

impl FromStr for Endpoint {
    type Err = ParseEndpointError;

    /// Parses a name of [`Endpoint::as_str`] (exactly, lowercase).
    ///
    /// # Errors
    /// [`ParseEndpointError`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or(ParseEndpointError { _private: () })
    }
}

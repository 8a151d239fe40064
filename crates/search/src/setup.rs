//! Checking a search configuration at start: [`SetupError`], the one
//! error of a configuration the search cannot start with, and the URL
//! rules every provider that calls a server shares. A leaf: the providers
//! and [`crate::Search`] use it, it uses none of them.

use std::fmt;

use crate::config::ProviderKind;

/// A configuration the search cannot start with (a missing file, an empty
/// folder, a missing URL or key). The message names the key and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupError {
    message: String,
}

impl SetupError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        SetupError {
            message: message.into(),
        }
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SetupError {}

/// The URL a remote provider uses: `configured`, or `default` when empty.
pub(crate) fn endpoint_url(
    kind: ProviderKind,
    configured: &str,
    default: &str,
) -> Result<String, SetupError> {
    let url = if configured.is_empty() {
        default
    } else {
        configured
    };
    if url.is_empty() {
        return Err(SetupError::new(format!(
            "search.{kind}.url is required for provider \"{kind}\""
        )));
    }
    check_url(url).map_err(|e| SetupError::new(format!("search.{kind}.url = {url:?}: {e}")))?;
    Ok(url.to_owned())
}

/// Checks that `url` is an absolute `http`/`https` URL.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
    match parsed.scheme() {
        "http" | "https" => Ok(()),
        s => Err(format!("scheme {s:?} is not http or https")),
    }
}

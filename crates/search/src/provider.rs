//! The provider contract and its error type.
//!
//! A [`Provider`] turns a query into [`Source`]s in its own wire format and
//! nothing more: the rules every provider shares (timeout, `max_results`,
//! HTML stripping, URL checks, caps, years) are applied once, by
//! [`crate::Search`]. A provider's `search` future is cancelled by dropping
//! it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::{FormedQuery, Source};

/// A boxed, `Send` future: what [`Provider::search`] returns, so providers
/// can be chosen at run time (`Box<dyn Provider>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One search backend.
pub trait Provider: Send + Sync + fmt::Debug {
    /// The provider's config name (`local`, `searxng`, …), for logs and
    /// metrics.
    fn name(&self) -> &'static str;

    /// Searches for `query` (formed from the conversation by
    /// [`crate::Search`]; a remote backend is sent [`FormedQuery::text`]),
    /// asking the backend for at most `max_results` results. Dropping the
    /// future cancels the search.
    fn search<'a>(
        &'a self,
        query: &'a FormedQuery,
        max_results: usize,
    ) -> BoxFuture<'a, Result<Vec<Source>, SearchError>>;

    /// How strongly `word` (lowercase) names a subject of what this
    /// provider searches, `0..=1` (from 0.5 it does); `None` (the default)
    /// when the provider cannot tell. Query formation uses it to find the
    /// words that name a subject (see [`crate::query`]); it is called for
    /// many words per request, so it must be cheap (a hash lookup).
    fn subject(&self, word: &str) -> Option<f32> {
        let _ = word;
        None
    }
}

/// Why a search failed. A failed search is never a failed request (docs/reference/request.md, "Quota"):
/// the host logs it, counts it and answers without sources.
#[derive(Debug)]
pub struct SearchError {
    kind: SearchErrorKind,
    message: String,
}

/// The class of a [`SearchError`], for metrics labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SearchErrorKind {
    /// The configured timeout passed.
    Timeout,
    /// Connecting or reading failed.
    Transport,
    /// The backend answered with a non-2xx status.
    Status,
    /// The answer could not be read (invalid JSON, wrong shape, too large).
    Body,
}

impl SearchErrorKind {
    /// A short lowercase label for metrics (`timeout`, `transport`,
    /// `status`, `body`).
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            SearchErrorKind::Timeout => "timeout",
            SearchErrorKind::Transport => "transport",
            SearchErrorKind::Status => "status",
            SearchErrorKind::Body => "body",
        }
    }
}

impl SearchError {
    /// A new error.
    pub fn new(kind: SearchErrorKind, message: impl Into<String>) -> Self {
        SearchError {
            kind,
            message: message.into(),
        }
    }

    /// The class of the error.
    #[must_use]
    pub fn kind(&self) -> SearchErrorKind {
        self.kind
    }

    /// The message, for logs.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SearchError {}

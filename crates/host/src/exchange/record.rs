//! The request's log line: one JSON object per request (the hosts'
//! subscriber formats it), target `citestream::request`, at `WARN` when
//! the status sent is a 5xx and at `INFO` otherwise.

use std::net::SocketAddr;

/// How a request ended (the log's `outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The response was sent whole.
    Complete,
    /// The client went away first.
    ClientClosed,
    /// The upstream failed (no response, or it broke off).
    Error,
}

impl Ending {
    /// `complete`, `client_closed` or `error`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Complete => "complete",
            Ending::ClientClosed => "client_closed",
            Ending::Error => "error",
        }
    }
}

/// The fields of one line.
pub(super) struct Record<'a> {
    pub(super) request_id: &'a str,
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    pub(super) endpoint: &'static str,
    pub(super) model: Option<&'a str>,
    pub(super) account: &'a str,
    pub(super) status: u16,
    pub(super) search: &'static str,
    pub(super) cache: Option<&'static str>,
    pub(super) sources: usize,
    pub(super) query_chars: Option<usize>,
    pub(super) search_ms: Option<f64>,
    pub(super) upstream_ms: Option<f64>,
    pub(super) duration_ms: f64,
    pub(super) bytes: u64,
    pub(super) client: Option<SocketAddr>,
    pub(super) stream: bool,
    pub(super) ending: Ending,
    pub(super) error: Option<&'a str>,
}

macro_rules! line {
    ($level:ident, $r:expr) => {
        tracing::$level!(
            target: "citestream::request",
            request_id = $r.request_id,
            method = $r.method,
            path = $r.path,
            endpoint = $r.endpoint,
            model = $r.model,
            account = $r.account,
            status = $r.status,
            search = $r.search,
            cache = $r.cache,
            sources = $r.sources,
            query_chars = $r.query_chars,
            search_ms = $r.search_ms,
            upstream_ms = $r.upstream_ms,
            duration_ms = $r.duration_ms,
            bytes = $r.bytes,
            // Formatted once, recorded as one string (not piece by piece
            // through the JSON writer).
            client = $r.client.map(|c| c.to_string()).as_deref(),
            stream = $r.stream,
            outcome = $r.ending.as_str(),
            error = $r.error,
            "request"
        )
    };
}

/// Writes the line.
pub(super) fn write(r: &Record<'_>) {
    if r.status >= 500 {
        line!(warn, r);
    } else {
        line!(info, r);
    }
}

//! One JSON log line per request (SPEC section 12), written when the
//! response body has been sent, or when the request ends early (the client
//! went away: `outcome` `client_closed`).
//!
//! Fields: `request_id`, `method`, `path`, `status`, `endpoint`, `search`
//! (the `x-citestream-search` value), `account`, `stream`, `bytes` (body
//! bytes sent), `upstream_ms` (to the upstream's headers), `duration_ms`,
//! `outcome` (`complete`, `client_closed`, `error`) and `error`.

use std::time::Instant;

/// The log record of one request, filled in as it goes; writes its line
/// once, on drop.
#[derive(Debug)]
pub(crate) struct RequestLog {
    start: Instant,
    request_id: String,
    method: String,
    path: String,
    status: u16,
    endpoint: &'static str,
    search: &'static str,
    account: String,
    stream: bool,
    bytes: u64,
    upstream_ms: Option<f64>,
    complete: bool,
    error: Option<String>,
}

impl RequestLog {
    pub(crate) fn new(request_id: &str, method: &str, path: &str) -> Self {
        RequestLog {
            start: Instant::now(),
            request_id: request_id.to_owned(),
            method: method.to_owned(),
            path: path.to_owned(),
            status: 0,
            endpoint: "",
            search: "",
            account: String::new(),
            stream: false,
            bytes: 0,
            upstream_ms: None,
            complete: false,
            error: None,
        }
    }

    pub(crate) fn set_status(&mut self, status: u16) {
        self.status = status;
    }

    pub(crate) fn set_endpoint(&mut self, endpoint: &'static str) {
        self.endpoint = endpoint;
    }

    pub(crate) fn set_search(&mut self, search: &'static str, account: &str) {
        self.search = search;
        account.clone_into(&mut self.account);
    }

    pub(crate) fn set_stream(&mut self, stream: bool) {
        self.stream = stream;
    }

    pub(crate) fn set_upstream_time(&mut self, since: Instant) {
        self.upstream_ms = Some(since.elapsed().as_secs_f64() * 1e3);
    }

    pub(crate) fn add_bytes(&mut self, n: usize) {
        self.bytes += n as u64;
    }

    pub(crate) fn set_complete(&mut self) {
        self.complete = true;
    }

    pub(crate) fn set_error(&mut self, e: String) {
        self.error = Some(e);
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let outcome = match (&self.error, self.complete) {
            (Some(_), _) => "error",
            (None, true) => "complete",
            (None, false) => "client_closed",
        };
        let duration_ms = self.start.elapsed().as_secs_f64() * 1e3;
        tracing::info!(
            target: "citestream::request",
            request_id = %self.request_id,
            method = %self.method,
            path = %self.path,
            status = self.status,
            endpoint = self.endpoint,
            search = self.search,
            account = %self.account,
            stream = self.stream,
            bytes = self.bytes,
            upstream_ms = self.upstream_ms,
            duration_ms,
            outcome,
            error = self.error.as_deref(),
            "request"
        );
    }
}

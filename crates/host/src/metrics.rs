//! The Prometheus metrics every host exports (`GET /metrics` on
//! `citestream serve`), in the text exposition format 0.0.4.
//!
//! A small fixed registry: every label value is known in advance, so each
//! series is one atomic and recording never allocates or locks.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `citestream_requests_total` | counter | `endpoint` (`chat`, `messages`, `other`), `search` (an `x-citestream-search` value, `rejected` for a request answered with an error by the host before going upstream, `none` on other endpoints), `status` (the HTTP status sent; `none` when the client left before one); only series seen are listed |
//! | `citestream_upstream_responses_total` | counter | `endpoint`, `class` (`1xx` … `5xx`): upstream responses by status class |
//! | `citestream_searches_total` | counter | `result` (`found`, `nothing_found`, `timeout`, `error`) |
//! | `citestream_quota_exhausted_total` | counter | |
//! | `citestream_quota_errors_total` | counter | |
//! | `citestream_upstream_errors_total` | counter | `kind` (`refused`, `timeout`, `broken`) |
//! | `citestream_upstream_retries_total` | counter | `reason`: why a request was sent upstream again (`stale_connection`: a reused pooled connection failed before any response byte, the keep-alive race; `connect`: a connect error, the next endpoint is tried; `status`: a 429/502/503/504 answer before the client got anything) |
//! | `citestream_search_retries_total` | counter | `target` (`provider`: the remote search provider; `query_model`: the query model), `reason` (`stale_connection`, the only one): requests of the search's own HTTP client sent again once on a fresh connection because a reused pooled one failed before any answer byte (never the model upstream's: those are `citestream_upstream_retries_total`) |
//! | `citestream_search_duration_seconds` | histogram | |
//! | `citestream_upstream_latency_seconds` | histogram | `endpoint`: request sent → upstream response headers |
//! | `citestream_event_added_latency_seconds` | histogram | time the host spends on one upstream piece of a rewritten stream before its output is ready (sampled: the first piece of each stream and every 16th after it) |
//! | `citestream_open_streams` | gauge | responses being relayed now |

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use citestream::flow::Outcome;
use citestream::request::Endpoint;

/// The `endpoint` label: a grounded endpoint's name ([`Endpoint::as_str`]),
/// or `other` for any other proxied path.
#[must_use]
pub fn endpoint_label(e: Option<Endpoint>) -> &'static str {
    e.map_or("other", Endpoint::as_str)
}

const N_ENDPOINT: usize = Endpoint::ALL.len() + 1;

fn endpoint_index(e: Option<Endpoint>) -> usize {
    e.map_or(Endpoint::ALL.len(), Endpoint::index)
}

fn endpoint_at(i: usize) -> Option<Endpoint> {
    Endpoint::ALL.get(i).copied()
}

/// The `search` label of a request: the one place its values are
/// spelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SearchLabel {
    /// The flow's outcome (the `x-citestream-search` value).
    Outcome(Outcome),
    /// Answered by the host with an error before going upstream (400,
    /// 401, 404, 413).
    Rejected,
    /// Not a grounded endpoint.
    None,
}

const N_SEARCH: usize = Outcome::ALL.len() + 2;

impl SearchLabel {
    /// The label value: an `x-citestream-search` value, `rejected` or
    /// `none`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SearchLabel::Outcome(o) => o.as_str(),
            SearchLabel::Rejected => "rejected",
            SearchLabel::None => "none",
        }
    }

    fn index(self) -> usize {
        match self {
            SearchLabel::Outcome(o) => Outcome::ALL.iter().position(|x| *x == o).unwrap_or(4),
            SearchLabel::Rejected => Outcome::ALL.len(),
            SearchLabel::None => Outcome::ALL.len() + 1,
        }
    }

    fn at(i: usize) -> SearchLabel {
        match Outcome::ALL.get(i) {
            Some(o) => SearchLabel::Outcome(*o),
            None if i == Outcome::ALL.len() => SearchLabel::Rejected,
            None => SearchLabel::None,
        }
    }
}

/// Statuses counted: slot 0 is "none sent" (the client left first), slots
/// 1..=500 are 100..=599.
const N_STATUS: usize = 501;

fn status_index(status: Option<u16>) -> usize {
    match status {
        Some(s @ 100..=599) => usize::from(s) - 99,
        _ => 0,
    }
}

fn status_name(i: usize, buf: &mut String) -> &str {
    buf.clear();
    if i == 0 {
        buf.push_str("none");
    } else {
        let _ = write!(buf, "{}", i + 99);
    }
    buf
}

/// The `class` label of an upstream response.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The `result` label of a search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SearchResult {
    /// At least one source.
    Found,
    /// No source.
    NothingFound,
    /// The search timeout passed.
    Timeout,
    /// Any other failure.
    Error,
}

impl SearchResult {
    const ALL: [SearchResult; 4] = [Self::Found, Self::NothingFound, Self::Timeout, Self::Error];
    fn as_str(self) -> &'static str {
        match self {
            Self::Found => "found",
            Self::NothingFound => "nothing_found",
            Self::Timeout => "timeout",
            Self::Error => "error",
        }
    }
}

/// The `kind` label of an upstream failure without a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpstreamError {
    /// Connection refused or failed (502).
    Refused,
    /// Connect or headers timeout (504).
    Timeout,
    /// The response body broke off mid-way.
    Broken,
}

impl UpstreamError {
    const ALL: [UpstreamError; 3] = [Self::Refused, Self::Timeout, Self::Broken];
    fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Timeout => "timeout",
            Self::Broken => "broken",
        }
    }
}

/// The `reason` label of a request sent upstream again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpstreamRetry {
    /// A reused pooled connection failed before any response byte.
    StaleConnection,
    /// Connecting failed (the next endpoint is tried).
    Connect,
    /// A 429/502/503/504 answer before the client got anything.
    Status,
}

impl UpstreamRetry {
    const ALL: [UpstreamRetry; 3] = [Self::StaleConnection, Self::Connect, Self::Status];
    fn as_str(self) -> &'static str {
        match self {
            Self::StaleConnection => "stale_connection",
            Self::Connect => "connect",
            Self::Status => "status",
        }
    }
}

/// A histogram with fixed bucket bounds (seconds).
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|b| s <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cum = 0;
        for (b, n) in self.bounds.iter().zip(&self.buckets) {
            cum += n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cum}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

const EVENT_BUCKETS: &[f64] = &[
    0.000_001, 0.000_002, 0.000_005, 0.000_01, 0.000_02, 0.000_05, 0.000_1, 0.000_2, 0.000_5,
    0.001, 0.005, 0.01,
];
const SLOW_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// The registry. Share one per process (`Arc<Metrics>`).
#[derive(Debug)]
pub struct Metrics {
    /// `[endpoint][search][status]`, flattened.
    requests: Box<[AtomicU64]>,
    upstream_responses: [[AtomicU64; 5]; N_ENDPOINT],
    searches: [AtomicU64; 4],
    quota_exhausted: AtomicU64,
    quota_errors: AtomicU64,
    upstream_errors: [AtomicU64; 3],
    upstream_retries: [AtomicU64; 3],
    search_duration: Histogram,
    upstream_latency: [Histogram; N_ENDPOINT],
    event_latency: Histogram,
    open_streams: AtomicI64,
    /// Search cache lookups: [hit, miss].
    search_cache: [AtomicU64; 2],
    /// Resends of the search's HTTP clients, counted by the search crate.
    search_resends: citestream_search::Resends,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Metrics {
            requests: (0..N_ENDPOINT * N_SEARCH * N_STATUS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            upstream_responses: Default::default(),
            searches: Default::default(),
            quota_exhausted: AtomicU64::new(0),
            quota_errors: AtomicU64::new(0),
            upstream_errors: Default::default(),
            upstream_retries: Default::default(),
            search_duration: Histogram::new(SLOW_BUCKETS),
            upstream_latency: std::array::from_fn(|_| Histogram::new(SLOW_BUCKETS)),
            event_latency: Histogram::new(EVENT_BUCKETS),
            open_streams: AtomicI64::new(0),
            search_cache: Default::default(),
            search_resends: citestream_search::Resends::default(),
        }
    }

    /// The counts of `citestream_search_retries_total`: hand it to every
    /// [`citestream_search::Search`] built for this registry
    /// ([`citestream_search::Search::with_tls_and_resends`]).
    #[must_use]
    pub fn search_resends(&self) -> &citestream_search::Resends {
        &self.search_resends
    }

    /// Counts one request (`endpoint` `None`: another proxied path) with
    /// the HTTP status sent to the client (`None`: the client left before
    /// one was sent).
    pub fn request(&self, endpoint: Option<Endpoint>, search: SearchLabel, status: Option<u16>) {
        let i = (endpoint_index(endpoint) * N_SEARCH + search.index()) * N_STATUS
            + status_index(status);
        if let Some(n) = self.requests.get(i) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one upstream response by its status class.
    pub fn upstream_response(&self, endpoint: Option<Endpoint>, status: u16) {
        let c = usize::from(status / 100).clamp(1, 5) - 1;
        self.upstream_responses[endpoint_index(endpoint)][c].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one search and its duration.
    pub fn search(&self, result: SearchResult, took: Duration) {
        let i = SearchResult::ALL
            .iter()
            .position(|x| *x == result)
            .unwrap_or(3);
        self.searches[i].fetch_add(1, Ordering::Relaxed);
        self.search_duration.observe(took);
    }

    /// Counts a request that found the day's searches used up.
    pub fn quota_exhausted(&self) {
        self.quota_exhausted.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a search answered from the search cache (`hit`) or by the
    /// provider (`miss`), when the cache is on.
    pub fn search_cache(&self, hit: bool) {
        self.search_cache[usize::from(!hit)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a quota store error.
    pub fn quota_error(&self) {
        self.quota_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an upstream failure.
    pub fn upstream_error(&self, kind: UpstreamError) {
        let i = UpstreamError::ALL
            .iter()
            .position(|x| *x == kind)
            .unwrap_or(0);
        self.upstream_errors[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request sent upstream again.
    pub fn upstream_retry(&self, reason: UpstreamRetry) {
        let i = UpstreamRetry::ALL
            .iter()
            .position(|x| *x == reason)
            .unwrap_or(0);
        self.upstream_retries[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Records the time from sending a request upstream to its response
    /// headers.
    pub fn upstream_latency(&self, endpoint: Option<Endpoint>, took: Duration) {
        self.upstream_latency[endpoint_index(endpoint)].observe(took);
    }

    /// Records the time spent on one upstream piece of a rewritten stream.
    pub fn event_added_latency(&self, took: Duration) {
        self.event_latency.observe(took);
    }

    /// Counts an open stream until the guard is dropped.
    #[must_use]
    pub fn open_stream(self: &std::sync::Arc<Self>) -> OpenStream {
        self.open_streams.fetch_add(1, Ordering::Relaxed);
        OpenStream(self.clone())
    }

    /// Responses being relayed now.
    #[must_use]
    pub fn open_streams(&self) -> i64 {
        self.open_streams.load(Ordering::Relaxed)
    }

    /// The text exposition of every metric.
    #[must_use]
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(8192);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        head(
            &mut o,
            "citestream_requests_total",
            "counter",
            "Requests by endpoint, search outcome and the HTTP status sent.",
        );
        let mut buf = String::new();
        for (i, n) in self.requests.iter().enumerate() {
            let n = load(n);
            if n == 0 {
                continue;
            }
            let e = endpoint_label(endpoint_at(i / (N_SEARCH * N_STATUS)));
            let s = SearchLabel::at(i / N_STATUS % N_SEARCH).as_str();
            let st = status_name(i % N_STATUS, &mut buf);
            let _ = writeln!(
                o,
                "citestream_requests_total{{endpoint=\"{e}\",search=\"{s}\",status=\"{st}\"}} {n}"
            );
        }
        head(
            &mut o,
            "citestream_upstream_responses_total",
            "counter",
            "Upstream responses by endpoint and status class.",
        );
        for (e, row) in self.upstream_responses.iter().enumerate() {
            for (c, n) in CLASSES.iter().zip(row) {
                let e = endpoint_label(endpoint_at(e));
                let _ = writeln!(
                    o,
                    "citestream_upstream_responses_total{{endpoint=\"{e}\",class=\"{c}\"}} {}",
                    load(n)
                );
            }
        }
        head(
            &mut o,
            "citestream_searches_total",
            "counter",
            "Searches run, by result.",
        );
        for (r, n) in SearchResult::ALL.iter().zip(&self.searches) {
            let _ = writeln!(
                o,
                "citestream_searches_total{{result=\"{}\"}} {}",
                r.as_str(),
                load(n)
            );
        }
        head(
            &mut o,
            "citestream_quota_exhausted_total",
            "counter",
            "Requests that found the day's searches used up.",
        );
        let _ = writeln!(
            o,
            "citestream_quota_exhausted_total {}",
            load(&self.quota_exhausted)
        );
        head(
            &mut o,
            "citestream_quota_errors_total",
            "counter",
            "Quota store errors (answered without search).",
        );
        let _ = writeln!(
            o,
            "citestream_quota_errors_total {}",
            load(&self.quota_errors)
        );
        head(
            &mut o,
            "citestream_upstream_errors_total",
            "counter",
            "Upstream failures without a response, or broken off.",
        );
        for (k, n) in UpstreamError::ALL.iter().zip(&self.upstream_errors) {
            let _ = writeln!(
                o,
                "citestream_upstream_errors_total{{kind=\"{}\"}} {}",
                k.as_str(),
                load(n)
            );
        }
        head(
            &mut o,
            "citestream_upstream_retries_total",
            "counter",
            "Requests sent upstream again, by reason.",
        );
        for (k, n) in UpstreamRetry::ALL.iter().zip(&self.upstream_retries) {
            let _ = writeln!(
                o,
                "citestream_upstream_retries_total{{reason=\"{}\"}} {}",
                k.as_str(),
                load(n)
            );
        }
        head(
            &mut o,
            "citestream_search_retries_total",
            "counter",
            "Search provider and query model requests sent again on a fresh connection, by target and reason.",
        );
        for (t, n) in [
            ("provider", self.search_resends.provider()),
            ("query_model", self.search_resends.query_model()),
        ] {
            let _ = writeln!(
                o,
                "citestream_search_retries_total{{target=\"{t}\",reason=\"stale_connection\"}} {n}"
            );
        }
        head(
            &mut o,
            "citestream_search_duration_seconds",
            "histogram",
            "Time a search took.",
        );
        self.search_duration
            .render(&mut o, "citestream_search_duration_seconds", "");
        head(
            &mut o,
            "citestream_upstream_latency_seconds",
            "histogram",
            "Request sent upstream to its response headers.",
        );
        for (e, h) in self.upstream_latency.iter().enumerate() {
            let l = format!("endpoint=\"{}\"", endpoint_label(endpoint_at(e)));
            h.render(&mut o, "citestream_upstream_latency_seconds", &l);
        }
        head(
            &mut o,
            "citestream_event_added_latency_seconds",
            "histogram",
            "Time spent on one upstream piece of a rewritten stream.",
        );
        self.event_latency
            .render(&mut o, "citestream_event_added_latency_seconds", "");
        head(
            &mut o,
            "citestream_open_streams",
            "gauge",
            "Responses being relayed now.",
        );
        let _ = writeln!(o, "citestream_open_streams {}", self.open_streams());
        head(
            &mut o,
            "citestream_search_cache_total",
            "counter",
            "Searches with the search cache on: answered from it (hit) or by the provider (miss).",
        );
        for (r, n) in ["hit", "miss"].iter().zip(&self.search_cache) {
            let _ = writeln!(
                o,
                "citestream_search_cache_total{{result=\"{r}\"}} {}",
                load(n)
            );
        }
        o
    }
}

fn head(o: &mut String, name: &str, ty: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {ty}");
}

/// Counts as one open stream while alive (see [`Metrics::open_stream`]).
#[derive(Debug)]
pub struct OpenStream(std::sync::Arc<Metrics>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn render_counts() {
        let m = Arc::new(Metrics::new());
        m.request(
            Some(Endpoint::ChatCompletions),
            SearchLabel::Outcome(Outcome::Injected),
            Some(200),
        );
        m.request(Some(Endpoint::Messages), SearchLabel::Rejected, Some(401));
        m.request(None, SearchLabel::None, None);
        m.upstream_response(Some(Endpoint::Messages), 503);
        m.search(SearchResult::Found, Duration::from_millis(3));
        m.event_added_latency(Duration::from_micros(3));
        let g = m.open_stream();
        let t = m.render();
        assert!(
            t.contains(
                "citestream_requests_total{endpoint=\"chat\",search=\"injected\",status=\"200\"} 1"
            ),
            "{t}"
        );
        assert!(t.contains(
            "citestream_requests_total{endpoint=\"messages\",search=\"rejected\",status=\"401\"} 1"
        ));
        assert!(t.contains(
            "citestream_requests_total{endpoint=\"other\",search=\"none\",status=\"none\"} 1"
        ));
        assert!(t.contains(
            "citestream_upstream_responses_total{endpoint=\"messages\",class=\"5xx\"} 1"
        ));
        assert!(
            t.contains("citestream_upstream_responses_total{endpoint=\"chat\",class=\"2xx\"} 0")
        );
        assert!(t.contains("citestream_searches_total{result=\"found\"} 1"));
        assert!(t.contains("citestream_event_added_latency_seconds_bucket{le=\"0.000005\"} 1"));
        assert!(t.contains("citestream_event_added_latency_seconds_count 1"));
        assert!(t.contains("citestream_open_streams 1"));
        assert!(t.contains(
            "citestream_search_retries_total{target=\"query_model\",reason=\"stale_connection\"} 0"
        ));
        drop(g);
        assert!(m.render().contains("citestream_open_streams 0"));
        assert!(t.contains(
            "citestream_upstream_latency_seconds_bucket{endpoint=\"other\",le=\"+Inf\"} 0"
        ));
    }
}

//! The Prometheus metrics every host exports (`GET /metrics` on
//! `citestream serve`), in the text exposition format 0.0.4.
//!
//! A small fixed registry: every label value is known in advance, so each
//! series is one atomic and recording never allocates or locks.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `citestream_requests_total` | counter | `endpoint` (`chat_completions`, `messages`, `other`), `search` (an `x-citestream-search` value, `rejected` for a request answered with an error by the host, `none` on other endpoints) |
//! | `citestream_searches_total` | counter | `result` (`found`, `nothing_found`, `timeout`, `error`) |
//! | `citestream_quota_exhausted_total` | counter | |
//! | `citestream_quota_errors_total` | counter | |
//! | `citestream_upstream_errors_total` | counter | `kind` (`refused`, `timeout`, `broken`) |
//! | `citestream_search_duration_seconds` | histogram | |
//! | `citestream_upstream_latency_seconds` | histogram | `endpoint`: request sent → upstream response headers |
//! | `citestream_event_added_latency_seconds` | histogram | time the host spends on one upstream piece of a rewritten stream before its output is ready |
//! | `citestream_open_streams` | gauge | responses being relayed now |

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use citestream::flow::Outcome;
use citestream::request::Endpoint;

/// The `endpoint` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndpointLabel {
    /// `/v1/chat/completions`.
    ChatCompletions,
    /// `/v1/messages`.
    Messages,
    /// Any other proxied path.
    Other,
}

impl EndpointLabel {
    const ALL: [EndpointLabel; 3] = [Self::ChatCompletions, Self::Messages, Self::Other];

    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ChatCompletions => "chat_completions",
            Self::Messages => "messages",
            Self::Other => "other",
        }
    }
}

impl From<Endpoint> for EndpointLabel {
    fn from(e: Endpoint) -> Self {
        match e {
            Endpoint::ChatCompletions => Self::ChatCompletions,
            Endpoint::Messages => Self::Messages,
        }
    }
}

/// The `x-citestream-search` header value of an outcome.
#[must_use]
pub fn outcome_str(o: Outcome) -> &'static str {
    match o {
        Outcome::NotRequested => "not-requested",
        Outcome::NoQuery => "no-query",
        Outcome::Injected => "injected",
        Outcome::NothingFound => "nothing-found",
        Outcome::SearchFailed => "failed",
        Outcome::QuotaExhausted => "quota-exhausted",
        Outcome::QuotaUnavailable => "quota-unavailable",
        _ => "failed",
    }
}

/// The `search` label of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SearchLabel {
    /// The flow's outcome.
    Outcome(Outcome),
    /// Answered by the host with an error (401, 400, 413, 502, 504).
    Rejected,
    /// Not a grounded endpoint.
    None,
}

const OUTCOMES: [Outcome; 7] = [
    Outcome::NotRequested,
    Outcome::NoQuery,
    Outcome::Injected,
    Outcome::NothingFound,
    Outcome::SearchFailed,
    Outcome::QuotaExhausted,
    Outcome::QuotaUnavailable,
];
const N_SEARCH: usize = OUTCOMES.len() + 2;

impl SearchLabel {
    fn index(self) -> usize {
        match self {
            SearchLabel::Outcome(o) => OUTCOMES.iter().position(|x| *x == o).unwrap_or(4),
            SearchLabel::Rejected => OUTCOMES.len(),
            SearchLabel::None => OUTCOMES.len() + 1,
        }
    }

    fn name(i: usize) -> &'static str {
        match OUTCOMES.get(i) {
            Some(o) => outcome_str(*o),
            None if i == OUTCOMES.len() => "rejected",
            None => "none",
        }
    }
}

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
    requests: [[AtomicU64; N_SEARCH]; 3],
    searches: [AtomicU64; 4],
    quota_exhausted: AtomicU64,
    quota_errors: AtomicU64,
    upstream_errors: [AtomicU64; 3],
    search_duration: Histogram,
    upstream_latency: [Histogram; 3],
    event_latency: Histogram,
    open_streams: AtomicI64,
    /// Search cache lookups: [hit, miss].
    search_cache: [AtomicU64; 2],
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
            requests: Default::default(),
            searches: Default::default(),
            quota_exhausted: AtomicU64::new(0),
            quota_errors: AtomicU64::new(0),
            upstream_errors: Default::default(),
            search_duration: Histogram::new(SLOW_BUCKETS),
            upstream_latency: std::array::from_fn(|_| Histogram::new(SLOW_BUCKETS)),
            event_latency: Histogram::new(EVENT_BUCKETS),
            open_streams: AtomicI64::new(0),
            search_cache: Default::default(),
        }
    }

    /// Counts one request.
    pub fn request(&self, endpoint: EndpointLabel, search: SearchLabel) {
        let e = EndpointLabel::ALL
            .iter()
            .position(|x| *x == endpoint)
            .unwrap_or(2);
        self.requests[e][search.index()].fetch_add(1, Ordering::Relaxed);
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

    /// Records the time from sending a request upstream to its response
    /// headers.
    pub fn upstream_latency(&self, endpoint: EndpointLabel, took: Duration) {
        let e = EndpointLabel::ALL
            .iter()
            .position(|x| *x == endpoint)
            .unwrap_or(2);
        self.upstream_latency[e].observe(took);
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
            "Requests by endpoint and search outcome.",
        );
        for (e, row) in EndpointLabel::ALL.iter().zip(&self.requests) {
            for (i, n) in row.iter().enumerate() {
                let (e, s, n) = (e.as_str(), SearchLabel::name(i), load(n));
                let _ = writeln!(
                    o,
                    "citestream_requests_total{{endpoint=\"{e}\",search=\"{s}\"}} {n}"
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
        for (e, h) in EndpointLabel::ALL.iter().zip(&self.upstream_latency) {
            let l = format!("endpoint=\"{}\"", e.as_str());
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
            EndpointLabel::ChatCompletions,
            SearchLabel::Outcome(Outcome::Injected),
        );
        m.request(EndpointLabel::Messages, SearchLabel::Rejected);
        m.search(SearchResult::Found, Duration::from_millis(3));
        m.event_added_latency(Duration::from_micros(3));
        let g = m.open_stream();
        let t = m.render();
        assert!(
            t.contains(
                "citestream_requests_total{endpoint=\"chat_completions\",search=\"injected\"} 1"
            ),
            "{t}"
        );
        assert!(
            t.contains("citestream_requests_total{endpoint=\"messages\",search=\"rejected\"} 1")
        );
        assert!(t.contains("citestream_searches_total{result=\"found\"} 1"));
        assert!(t.contains("citestream_event_added_latency_seconds_bucket{le=\"0.000005\"} 1"));
        assert!(t.contains("citestream_event_added_latency_seconds_count 1"));
        assert!(t.contains("citestream_open_streams 1"));
        drop(g);
        assert!(m.render().contains("citestream_open_streams 0"));
        assert!(t.contains(
            "citestream_upstream_latency_seconds_bucket{endpoint=\"other\",le=\"+Inf\"} 0"
        ));
    }
}

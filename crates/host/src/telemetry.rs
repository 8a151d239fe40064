//! Logs and traces of the long-running hosts (`citestream serve`,
//! `citestream ext-proc`): one subscriber setup, configured by `[log]`.
//!
//! Contract:
//! * Log lines are JSON objects, one per line, on the writer given
//!   (standard output for the servers): the event's fields flattened, with
//!   `timestamp`, `level`, `target`. Spans never change a log line.
//! * The level is `log.level` (`error | warn | info | debug`, default
//!   `info`); `RUST_LOG`, when set and not empty, overrides it with any
//!   `tracing` directive (`RUST_LOG=citestream_gateway=debug,info`). An
//!   invalid `RUST_LOG` is a start-up error naming it.
//!   [`Telemetry::set_level`] changes `log.level` of a running process
//!   (config reload); a `RUST_LOG` stays in force.
//! * With `log.otlp_endpoint` set, every span of the citestream crates is
//!   exported as an OpenTelemetry span over OTLP/HTTP (protobuf) to
//!   `{otlp_endpoint}/v1/traces` (an endpoint already ending in
//!   `/v1/traces` is used as it is). Export runs on its own thread, in
//!   batches, from a bounded queue ([`QUEUE`] spans; more are dropped): a
//!   collector that is down or slow never blocks nor fails a request, and
//!   costs at most the dropped spans. Only `http://` collectors are
//!   supported (a local collector or agent forwards to remote ones).
//! * Without it, spans are disabled at their call sites: opening one costs
//!   a relaxed load, nothing is recorded.
//! * Trace context is W3C `traceparent`/`tracestate`: [`continue_trace`]
//!   makes a request span the child of the client's trace,
//!   [`inject_trace`] writes the span's context into the headers sent
//!   upstream. With traces off both do nothing (the client's headers pass
//!   through as they came).
//!
//! # Spans
//! One trace per request, opened by the host around the exchange; every
//! span below is a child of `request` (unless said otherwise):
//!
//! | span | fields |
//! |---|---|
//! | `request` ([`request_span`]) | `http.request.method`, `url.path`, `http.response.status_code`, `citestream.endpoint`, `citestream.search`, `citestream.request_id` |
//! | `auth` | `citestream.account` |
//! | `quota.reserve` | `citestream.account` |
//! | `search` | `citestream.provider`, `citestream.results` |
//! | `upstream` | `http.response.status_code`, `citestream.headers_ms` (to the response head) |
//! | `response` | the response head (and a whole body's rewrite); its child `quota.commit` (2xx) or `quota.release` settles the reservation |
//!
//! # Example
//! ```
//! use citestream_host::config::LogConfig;
//! use citestream_host::telemetry;
//!
//! let (subscriber, telemetry) = telemetry::subscriber(&LogConfig::default(), None, std::io::sink).unwrap();
//! tracing::subscriber::with_default(subscriber, || {
//!     let span = tracing::info_span!("request");
//!     let mut headers = http::HeaderMap::new();
//!     telemetry::continue_trace(&span, &headers);
//!     telemetry::inject_trace(&span, &mut headers);
//!     assert!(headers.is_empty()); // traces off: nothing added
//! });
//! telemetry.shutdown();
//! ```

use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{EnvFilter, FilterExt, LevelFilter, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry, reload};

use crate::config::{ConfigError, LogConfig, LogLevel};

/// Spans waiting for export at most; more are dropped.
pub const QUEUE: usize = 4096;
/// Spans per export request at most.
const BATCH: usize = 512;
/// How long spans wait to fill a batch.
const DELAY: Duration = Duration::from_secs(1);
/// One export request's deadline (a slow collector costs dropped spans).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`Telemetry::shutdown`] waits for the last spans to go out.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

type LevelHandle = reload::Handle<EnvFilter, Registry>;

/// The installed logging and tracing: keep it for the life of the process
/// and call [`Telemetry::shutdown`] at exit so the last spans go out.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    level: Option<LevelHandle>,
}

impl Telemetry {
    /// Installs the subscriber of `cfg` as the process's global one, log
    /// lines to `writer`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming `RUST_LOG` or `log.otlp_endpoint`; a
    /// subscriber already installed is one too.
    pub fn init<W>(cfg: &LogConfig, writer: W) -> Result<Telemetry, ConfigError>
    where
        W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
    {
        let rust_log = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
        let (subscriber, telemetry) = subscriber(cfg, rust_log.as_deref(), writer)?;
        subscriber
            .try_init()
            .map_err(|e| ConfigError::new("log", format!("cannot install the logger: {e}")))?;
        Ok(telemetry)
    }

    /// Whether spans are exported.
    #[must_use]
    pub fn traces_on(&self) -> bool {
        self.provider.is_some()
    }

    /// Applies a reloaded `log.level` (nothing when `RUST_LOG` is set).
    pub fn set_level(&self, level: LogLevel) {
        if let Some(handle) = &self.level {
            let _ = handle.reload(level_filter(level));
        }
    }

    /// [`Telemetry::set_level`] as a function that outlives a borrow of
    /// `self` (a config reload's hook).
    pub fn level_control(&self) -> impl Fn(LogLevel) + Send + Sync + 'static {
        let handle = self.level.clone();
        move |level| {
            if let Some(h) = &handle {
                let _ = h.reload(level_filter(level));
            }
        }
    }

    /// Sends the spans still queued (waiting a few seconds at most).
    pub fn shutdown(self) {
        if let Some(p) = self.provider {
            let _ = p.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        }
    }
}

/// The subscriber of `cfg` without installing it (tests, embedders):
/// `rust_log` is the `RUST_LOG` value to honour, if any.
///
/// # Errors
/// As [`Telemetry::init`].
pub fn subscriber<W>(
    cfg: &LogConfig,
    rust_log: Option<&str>,
    writer: W,
) -> Result<(impl Subscriber + Send + Sync + 'static, Telemetry), ConfigError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = match rust_log {
        Some(directives) => EnvFilter::builder()
            .parse(directives)
            .map_err(|e| ConfigError::new("RUST_LOG", format!("{e}")))?,
        None => level_filter(cfg.level),
    };
    let (filter, handle) = reload::Layer::new(filter);
    // The log writer sees events only: spans cost it nothing.
    let logs = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(writer)
        .with_filter(filter.and(filter_fn(|m| m.is_event())));
    let provider = if cfg.otlp_endpoint.is_empty() {
        None
    } else {
        Some(provider(&cfg.otlp_endpoint)?)
    };
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("citestream"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_filter(filter_fn(|m| {
                m.is_span() && m.target().starts_with("citestream")
            }))
    });
    let subscriber = tracing_subscriber::registry().with(logs).with(traces);
    Ok((
        subscriber,
        Telemetry {
            provider,
            level: rust_log.is_none().then_some(handle),
        },
    ))
}

fn level_filter(level: LogLevel) -> EnvFilter {
    let l = match level {
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
    };
    EnvFilter::default().add_directive(l.into())
}

/// The span export pipeline to `endpoint` (a checked `http(s)://` base URL).
fn provider(endpoint: &str) -> Result<SdkTracerProvider, ConfigError> {
    let err = |m: String| ConfigError::new("log.otlp_endpoint", m);
    if !endpoint.starts_with("http://") {
        return Err(err(format!(
            "{endpoint:?}: only http:// collectors are supported (run a local collector or agent)"
        )));
    }
    let base = endpoint.trim_end_matches('/');
    let url = if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| err(e.to_string()))?;
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE)
        .with_max_export_batch_size(BATCH)
        .with_scheduled_delay(DELAY)
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(Resource::builder().with_service_name("citestream").build())
        .build())
}

/// Makes `span` (not yet entered) a child of the trace in `headers`'
/// `traceparent`/`tracestate`, when there is one and traces are on.
pub fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    if span.is_disabled() || !headers.contains_key("traceparent") {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let _ = span.set_parent(cx);
}

/// Writes `span`'s trace context into `headers` (`traceparent`, and
/// `tracestate` when the client sent one), replacing the client's, when
/// traces are on; else leaves `headers` as they are.
pub fn inject_trace(span: &tracing::Span, headers: &mut http::HeaderMap) {
    if span.is_disabled() {
        return;
    }
    let cx = span.context();
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
}

/// The `request` span of one exchange (not entered): a server span that
/// continues the client's trace (`traceparent`), with the fields of the
/// table above left empty for the host to record.
pub fn request_span(method: &str, path: &str, headers: &http::HeaderMap) -> tracing::Span {
    let span = tracing::info_span!(
        "request",
        otel.kind = "server",
        http.request.method = method,
        url.path = path,
        http.response.status_code = tracing::field::Empty,
        citestream.endpoint = tracing::field::Empty,
        citestream.search = tracing::field::Empty,
        citestream.request_id = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    continue_trace(&span, headers);
    span
}

/// Records the HTTP status a span ended with (`request`, `upstream`); a
/// 5xx marks the span as an error.
pub fn record_status(span: &tracing::Span, status: u16) {
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
}

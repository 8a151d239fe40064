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
//!   `/v1/traces` is used as it is). Only `http://` collectors are
//!   supported (a local collector or agent forwards to remote ones).
//! * What a span costs the request's thread is small and bounded: our own
//!   layer keeps one record per span (ids from a per-thread generator, the
//!   start time, the fields with their text in one buffer) and, when the
//!   span closes, pushes it onto a bounded queue ([`QUEUE`] spans; more
//!   are dropped) under a short lock. One export thread takes the queue
//!   every second (or at once when a batch of 512 is waiting), makes the
//!   records OpenTelemetry spans and sends them with `opentelemetry-otlp`:
//!   a collector that is down or slow never blocks nor fails a request,
//!   and costs at most the dropped spans.
//! * Without it, spans are disabled at their call sites: opening one costs
//!   a relaxed load, nothing is recorded (the layer is there, its filter
//!   refusing every callsite).
//! * Trace context is W3C `traceparent`/`tracestate`: [`continue_trace`]
//!   makes a request span the child of the client's trace,
//!   [`inject_trace`] writes the span's context into the headers sent
//!   upstream. With traces off both do nothing (the client's headers pass
//!   through as they came).
//!
//! # Spans
//! One trace per request, opened by the host around the exchange (both
//! hosts, the same spans; docs/gateway.md "Traces" is the operator's
//! list); every span below is a child of `request` unless said otherwise:
//!
//! | span | fields |
//! |---|---|
//! | `request` ([`request_span`], a server span) | `http.request.method`, `url.path`, `http.response.status_code`, `citestream.search` ([`record_reply`]) |
//! | `auth` | `citestream.account` |
//! | `quota.reserve` | `citestream.account` |
//! | `search` | `citestream.provider`, `citestream.results`, `citestream.cache` |
//! | `upstream` ([`UpstreamSpan`], a client span, opened by the exchange) | `http.response.status_code`, `citestream.headers_ms` (to the response head), `citestream.first_byte_ms` (to the first body byte, where it ends) |
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

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::filter::{EnvFilter, FilterExt, LevelFilter, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry, reload};

use crate::config::{ConfigError, LogConfig, LogLevel};

/// Spans waiting for export at most; more are dropped.
pub const QUEUE: usize = 4096;
/// Spans per export request at most (the export thread wakes for a full
/// one, else every [`DELAY`]).
const BATCH: usize = 512;
/// How long spans wait to fill a batch.
const DELAY: Duration = Duration::from_secs(1);
/// One export request's deadline (a slow collector costs dropped spans).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`Telemetry::shutdown`] waits for the last spans to go out.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// The W3C trace context headers.
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

type LevelHandle = reload::Handle<EnvFilter, Registry>;

/// The installed logging and tracing: keep it for the life of the process
/// and call [`Telemetry::shutdown`] at exit so the last spans go out.
#[derive(Debug)]
pub struct Telemetry {
    export: Option<Export>,
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
        self.export.is_some()
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
    pub fn shutdown(mut self) {
        if let Some(e) = self.export.take() {
            e.queue.stop();
            let _ = e.done.recv_timeout(SHUTDOWN_TIMEOUT);
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
    let export = if cfg.otlp_endpoint.is_empty() {
        None
    } else {
        Some(Export::start(&cfg.otlp_endpoint)?)
    };
    // Always this layer, its filter refusing every callsite when traces
    // are off: spans are then disabled where they are made (an absent,
    // `None` layer would let every span into the registry).
    let on = export.is_some();
    let traces = Spans {
        queue: export.as_ref().map(|e| e.queue.clone()),
    }
    .with_filter(filter_fn(move |m| {
        on && m.is_span() && m.target().starts_with("citestream")
    }));
    let subscriber = tracing_subscriber::registry().with(logs).with(traces);
    Ok((
        subscriber,
        Telemetry {
            export,
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

/// One span as the request's thread records it: its ids, start, and
/// attributes, their text in one buffer; the export thread makes it an
/// OpenTelemetry span.
#[derive(Debug)]
struct SpanRecord {
    name: &'static str,
    kind: SpanKind,
    trace_id: u128,
    span_id: u64,
    /// 0: a root span.
    parent_id: u64,
    remote_parent: bool,
    /// The trace is sampled (the client's flag; ours are): exported.
    sampled: bool,
    /// The client's `tracestate`, passed on.
    trace_state: Option<HeaderValue>,
    start: SystemTime,
    error: bool,
    attrs: Vec<(&'static str, Val)>,
    text: String,
}

/// An attribute's value; text is a range of [`SpanRecord::text`].
#[derive(Debug, Clone, Copy)]
enum Val {
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(u32, u32),
}

impl SpanRecord {
    fn set(&mut self, key: &'static str, val: Val) {
        match self.attrs.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = val,
            None => self.attrs.push((key, val)),
        }
    }

    /// `key` is given the text from `from` to the end of the buffer; the
    /// `otel.*` keys set the kind and status instead.
    fn set_text(&mut self, key: &'static str, from: usize) {
        if let Some(k) = key.strip_prefix("otel.") {
            match (k, &self.text[from..]) {
                ("kind", "server") => self.kind = SpanKind::Server,
                ("kind", "client") => self.kind = SpanKind::Client,
                ("kind", "producer") => self.kind = SpanKind::Producer,
                ("kind", "consumer") => self.kind = SpanKind::Consumer,
                ("status_code", s) => self.error = s.eq_ignore_ascii_case("error"),
                _ => {}
            }
            self.text.truncate(from);
            return;
        }
        let (Ok(a), Ok(b)) = (u32::try_from(from), u32::try_from(self.text.len())) else {
            self.text.truncate(from);
            return;
        };
        self.set(key, Val::Text(a, b));
    }

    fn traceparent(&self) -> HeaderValue {
        let mut b = [0u8; 55];
        b[..3].copy_from_slice(b"00-");
        hex_into(&mut b[3..35], &self.trace_id.to_be_bytes());
        b[35] = b'-';
        hex_into(&mut b[36..52], &self.span_id.to_be_bytes());
        b[52] = b'-';
        b[53] = b'0';
        b[54] = if self.sampled { b'1' } else { b'0' };
        HeaderValue::from_bytes(&b).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// The OpenTelemetry span, ended at `end` (on the export thread).
    fn into_data(self, end: SystemTime, scope: &InstrumentationScope) -> SpanData {
        let state = self
            .trace_state
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        let text = &self.text;
        let attributes = self
            .attrs
            .iter()
            .map(|&(k, v)| match v {
                Val::Int(i) => KeyValue::new(k, i),
                Val::Float(f) => KeyValue::new(k, f),
                Val::Bool(b) => KeyValue::new(k, b),
                Val::Text(a, b) => KeyValue::new(k, text[a as usize..b as usize].to_owned()),
            })
            .collect();
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(self.trace_id),
                SpanId::from(self.span_id),
                TraceFlags::SAMPLED,
                false,
                state,
            ),
            parent_span_id: SpanId::from(self.parent_id),
            parent_span_is_remote: self.remote_parent,
            span_kind: self.kind,
            name: self.name.into(),
            start_time: self.start,
            end_time: end,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: if self.error {
                Status::error("")
            } else {
                Status::Unset
            },
            instrumentation_scope: scope.clone(),
        }
    }
}

fn hex_into(out: &mut [u8], bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (o, b) in out.chunks_exact_mut(2).zip(bytes) {
        o[0] = HEX[usize::from(b >> 4)];
        o[1] = HEX[usize::from(b & 15)];
    }
}

/// A span's fields into its record.
struct Fields<'a>(&'a mut SpanRecord);

impl Visit for Fields<'_> {
    fn record_i64(&mut self, f: &Field, v: i64) {
        self.0.set(f.name(), Val::Int(v));
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.0
            .set(f.name(), Val::Int(i64::try_from(v).unwrap_or(i64::MAX)));
    }
    fn record_f64(&mut self, f: &Field, v: f64) {
        self.0.set(f.name(), Val::Float(v));
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.0.set(f.name(), Val::Bool(v));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        let from = self.0.text.len();
        self.0.text.push_str(v);
        self.0.set_text(f.name(), from);
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        let from = self.0.text.len();
        let _ = write!(self.0.text, "{v:?}");
        self.0.set_text(f.name(), from);
    }
}

/// Ids from a per-thread wyrand generator seeded from the OS's randomness
/// (std's `RandomState`): a few instructions each.
fn random() -> u64 {
    use std::cell::Cell;
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let mut h = std::hash::RandomState::new().build_hasher();
            h.write_u64(u64::from(std::process::id()));
            h.finish()
        });
    }
    STATE.with(|c| {
        let s = c.get().wrapping_add(0xa076_1d64_78bd_642f);
        c.set(s);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        #[allow(clippy::cast_possible_truncation)]
        let low = t as u64;
        (t >> 64) as u64 ^ low
    })
}

fn nonzero_random() -> u64 {
    loop {
        let v = random();
        if v != 0 {
            return v;
        }
    }
}

/// The layer that records the citestream spans ([`SpanRecord`]) and
/// queues them for export when they close.
struct Spans {
    queue: Option<Arc<Queue>>,
}

impl<S> Layer<S> for Spans
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let parent = if let Some(p) = attrs.parent() {
            ctx.span(p)
        } else if attrs.is_contextual() {
            ctx.lookup_current()
        } else {
            None
        };
        let mut rec = SpanRecord {
            name: attrs.metadata().name(),
            kind: SpanKind::Internal,
            trace_id: 0,
            span_id: nonzero_random(),
            parent_id: 0,
            remote_parent: false,
            sampled: true,
            trace_state: None,
            start: SystemTime::now(),
            error: false,
            attrs: Vec::with_capacity(attrs.fields().len()),
            // Room for the usual text (a path, an account, a provider)
            // without growing.
            text: String::with_capacity(96),
        };
        let inherited = parent.as_ref().and_then(|p| {
            let ext = p.extensions();
            let pr = ext.get::<SpanRecord>()?;
            Some((pr.trace_id, pr.span_id, pr.sampled, pr.trace_state.clone()))
        });
        if let Some((trace_id, parent_id, sampled, state)) = inherited {
            (rec.trace_id, rec.parent_id, rec.sampled) = (trace_id, parent_id, sampled);
            rec.trace_state = state;
        }
        if rec.trace_id == 0 {
            rec.trace_id = u128::from(nonzero_random()) << 64 | u128::from(random());
        }
        attrs.record(&mut Fields(&mut rec));
        span.extensions_mut().insert(rec);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        if let Some(rec) = span.extensions_mut().get_mut::<SpanRecord>() {
            values.record(&mut Fields(rec));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let rec = span.extensions_mut().remove::<SpanRecord>();
        if let (Some(rec), Some(q)) = (rec.filter(|r| r.sampled), &self.queue) {
            q.push(rec, SystemTime::now());
        }
    }
}

/// The spans closed and not yet exported, shared by the layer (which
/// pushes) and the export thread (which takes them in batches).
#[derive(Debug, Default)]
struct Queue {
    spans: Mutex<Vec<(SpanRecord, SystemTime)>>,
    ready: Condvar,
    stop: AtomicBool,
    dropped: AtomicU64,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Vec<(SpanRecord, SystemTime)>> {
        self.spans.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a closed span; drops it when [`QUEUE`] are waiting. Wakes
    /// the export thread only for a full batch.
    fn push(&self, rec: SpanRecord, end: SystemTime) {
        let mut q = self.lock();
        if q.len() >= QUEUE {
            drop(q);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push((rec, end));
        let full = q.len() == BATCH;
        drop(q);
        if full {
            self.ready.notify_one();
        }
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _guard = self.lock();
        self.ready.notify_one();
    }
}

/// The export thread's handle.
#[derive(Debug)]
struct Export {
    queue: Arc<Queue>,
    /// Told when the thread has sent the last batch.
    done: mpsc::Receiver<()>,
}

impl Drop for Export {
    fn drop(&mut self) {
        self.queue.stop(); // no waiting
    }
}

impl Export {
    /// The export thread to `endpoint` (a base URL, `http://` only).
    fn start(endpoint: &str) -> Result<Export, ConfigError> {
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
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| err(e.to_string()))?;
        exporter.set_resource(&Resource::builder().with_service_name("citestream").build());
        let queue = Arc::new(Queue::default());
        let (tx, done) = mpsc::channel();
        let q = queue.clone();
        std::thread::Builder::new()
            .name("citestream-otlp".into())
            .spawn(move || {
                export_loop(&q, &exporter);
                let _ = exporter.shutdown();
                let _ = tx.send(());
            })
            .map_err(|e| err(format!("cannot start the export thread: {e}")))?;
        Ok(Export { queue, done })
    }
}

/// Takes the queued spans every [`DELAY`] (or at once for a full batch)
/// and exports them, [`BATCH`] per request, until told to stop; then sends
/// what is left once.
#[inline(never)] // its own frame, for callgrind's --toggle-collect
fn export_loop(queue: &Queue, exporter: &opentelemetry_otlp::SpanExporter) {
    let scope = InstrumentationScope::builder("citestream").build();
    let mut taken = Vec::new();
    loop {
        let stopping = {
            let mut q = queue.lock();
            let deadline = Instant::now() + DELAY;
            loop {
                let now = Instant::now();
                if queue.stop.load(Ordering::Acquire) || q.len() >= BATCH || now >= deadline {
                    break;
                }
                q = queue
                    .ready
                    .wait_timeout(q, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            std::mem::swap(&mut *q, &mut taken);
            queue.stop.load(Ordering::Acquire)
        };
        while !taken.is_empty() {
            let n = taken.len().min(BATCH);
            let batch: Vec<SpanData> = taken
                .drain(..n)
                .map(|(r, end)| r.into_data(end, &scope))
                .collect();
            if let Err(e) = futures_executor::block_on(exporter.export(batch)) {
                tracing::debug!(error = %e, "span export failed; spans dropped");
            }
        }
        let dropped = queue.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            tracing::debug!(dropped, "span queue full; spans dropped");
        }
        if stopping {
            return;
        }
    }
}

/// The record of `span` (one of ours, traces on), to read or change.
fn with_record<T>(span: &tracing::Span, f: impl FnOnce(&mut SpanRecord) -> T) -> Option<T> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let data = registry.span(id)?;
        let mut ext = data.extensions_mut();
        ext.get_mut::<SpanRecord>().map(f)
    })
    .flatten()
}

/// Makes `span` (not yet entered, no children yet) a child of the trace
/// in `headers`' `traceparent` (and `tracestate`, passed on as it came),
/// when there is a valid one and traces are on. A client's trace that is
/// not sampled is not exported.
pub fn continue_trace(span: &tracing::Span, headers: &HeaderMap) {
    if span.is_disabled() {
        return;
    }
    let Some(client) = headers
        .get(&TRACEPARENT)
        .and_then(|v| parse_traceparent(v.as_bytes()))
    else {
        return;
    };
    let state = headers.get(&TRACESTATE).filter(|v| !v.is_empty()).cloned();
    with_record(span, |r| {
        (r.trace_id, r.parent_id, r.sampled) = client;
        r.remote_parent = true;
        r.trace_state = state;
    });
}

/// A W3C `traceparent` value: trace id, parent span id, sampled; `None`
/// when it is not valid (version `ff`, a version-00 value of another
/// length, ids not lowercase hex or all zeros).
fn parse_traceparent(v: &[u8]) -> Option<(u128, u64, bool)> {
    fn hex(s: &[u8]) -> Option<u128> {
        s.iter().try_fold(0u128, |n, &c| {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => return None,
            };
            Some(n << 4 | u128::from(d))
        })
    }
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let version = hex(&v[..2])?;
    if version == 0xff || (version == 0 && v.len() != 55) || (v.len() > 55 && v[55] != b'-') {
        return None;
    }
    let trace = hex(&v[3..35])?;
    let parent = u64::try_from(hex(&v[36..52])?).ok()?;
    let flags = hex(&v[53..55])?;
    (trace != 0 && parent != 0).then_some((trace, parent, flags & 1 == 1))
}

/// `span`'s trace context as the headers to send upstream: `traceparent`,
/// and `tracestate` when the client sent one; `None` when traces are off.
#[must_use]
pub fn trace_headers(span: &tracing::Span) -> Option<(HeaderValue, Option<HeaderValue>)> {
    if span.is_disabled() {
        return None;
    }
    with_record(span, |r| (r.traceparent(), r.trace_state.clone()))
}

/// Writes `span`'s trace context into `headers` (`traceparent`, and
/// `tracestate` when the client sent one), replacing the client's, when
/// traces are on; else leaves `headers` as they are.
pub fn inject_trace(span: &tracing::Span, headers: &mut HeaderMap) {
    if let Some((parent, state)) = trace_headers(span) {
        headers.insert(TRACEPARENT, parent);
        if let Some(s) = state {
            headers.insert(TRACESTATE, s);
        }
    }
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

/// Records what a host answered on the `request` span: the status (a 5xx
/// marks it as an error) and the `x-citestream-search` value, if any.
pub fn record_reply(span: &tracing::Span, status: u16, search: Option<&HeaderValue>) {
    record_status(span, status);
    if let Some(v) = search.and_then(|v| v.to_str().ok()) {
        span.record("citestream.search", v);
    }
}

/// The `upstream` span of one exchange (`citestream_host::exchange` keeps
/// it): from the request going upstream to the first byte of the
/// response body (or the end of an empty one). Its fields: `http.response.status_code`,
/// `citestream.headers_ms` (to the response head), and
/// `citestream.first_byte_ms` (to the first body byte; absent when the
/// body was empty or never came). An upstream failure, or a 5xx, marks it
/// as an error.
#[derive(Debug)]
pub struct UpstreamSpan {
    span: tracing::Span,
    sent: Instant,
}

impl UpstreamSpan {
    /// Opens the span as a child of the current one, and sets
    /// `traceparent` (and the client's `tracestate`) on the edits of the
    /// request going upstream, naming this span as the parent; `None`
    /// when traces are off (the client's headers go upstream as they came).
    #[must_use]
    pub fn open(edits: &mut crate::exchange::HeaderEdits) -> Option<UpstreamSpan> {
        let span = tracing::info_span!(
            "upstream",
            otel.kind = "client",
            http.response.status_code = tracing::field::Empty,
            citestream.headers_ms = tracing::field::Empty,
            citestream.first_byte_ms = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let (parent, state) = trace_headers(&span)?;
        edits.set(http::header::HeaderName::from_static("traceparent"), parent);
        if let Some(s) = state {
            edits.set(http::header::HeaderName::from_static("tracestate"), s);
        }
        Some(UpstreamSpan {
            span,
            sent: Instant::now(),
        })
    }

    /// The response head arrived with `status`.
    pub fn headers(&self, status: u16) {
        self.span
            .record("citestream.headers_ms", ms(self.sent.elapsed()));
        record_status(&self.span, status);
    }

    /// The first byte of the response body arrived: the span ends.
    pub fn first_byte(self) {
        self.span
            .record("citestream.first_byte_ms", ms(self.sent.elapsed()));
    }

    /// The upstream failed (no response, or its body broke off): the span
    /// ends as an error.
    pub fn failed(self) {
        self.span.record("otel.status_code", "ERROR");
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::parse_traceparent;

    #[test]
    fn traceparent_is_read_as_w3c_says() {
        let ok = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            parse_traceparent(ok),
            Some((
                0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
                0x00f0_67aa_0ba9_02b7,
                true
            ))
        );
        let unsampled = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert_eq!(parse_traceparent(unsampled).map(|t| t.2), Some(false));
        // A later version may carry more after a dash.
        let later = b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x";
        assert!(parse_traceparent(later).is_some());
        for bad in [
            &b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"",
        ] {
            assert_eq!(
                parse_traceparent(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}

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
//! * With `log.otlp_endpoint` set, every span below is exported as an
//!   OpenTelemetry span over OTLP/HTTP (protobuf) to
//!   `{otlp_endpoint}/v1/traces` (an endpoint already ending in
//!   `/v1/traces` is used as it is). Only `http://` collectors are
//!   supported (a local collector or agent forwards to remote ones).
//! * Spans are ours, not `tracing` spans (logging stays on `tracing`
//!   events): a [`Span`] is a handle on one record (ids from a per-thread
//!   generator, the start time, a fixed set of typed attributes
//!   ([`Key`]), their text in one buffer); the last handle dropped ends
//!   it and pushes it onto a bounded queue ([`QUEUE`] spans; more are
//!   dropped) under a short lock. The current span (the parent of
//!   [`span`]) is a thread-local that [`Instrument::instrument`] and
//!   [`Span::in_scope`] set while they run. One export thread takes the
//!   queue every 5 seconds (the OpenTelemetry SDKs' default; or at once
//!   when a batch of 512 is waiting), and at shutdown,
//!   encodes the records as OTLP protobuf itself and posts them:
//!   a collector that is down or slow never blocks nor fails a request,
//!   and costs at most the dropped spans.
//! * Without it, no span is made: [`request_span`] gives [`Span::none`]
//!   (one look-up of the subscriber), every child of it is none too, and
//!   recording on one is a branch.
//! * Trace context is W3C `traceparent`/`tracestate`: [`request_span`]
//!   makes the request span the child of the client's trace,
//!   [`inject_trace`] writes a span's context into the headers sent
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
//! use citestream_host::telemetry::{self, Key};
//!
//! let (subscriber, telemetry) = telemetry::subscriber(&LogConfig::default(), None, std::io::sink).unwrap();
//! tracing::subscriber::with_default(subscriber, || {
//!     let mut headers = http::HeaderMap::new();
//!     let request = telemetry::request_span("POST", "/v1/chat/completions", &headers);
//!     request.in_scope(|| {
//!         let auth = telemetry::span("auth");
//!         auth.record_str(Key::Account, "acct-1");
//!     });
//!     telemetry::inject_trace(&request, &mut headers);
//!     assert!(headers.is_empty()); // traces off: nothing added
//! });
//! telemetry.shutdown();
//! ```

mod otlp;

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use tracing::Subscriber;
use tracing_subscriber::filter::{EnvFilter, FilterExt, LevelFilter, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry, reload};

use crate::config::{ConfigError, LogConfig, LogLevel};

/// Spans waiting for export at most; more are dropped.
pub const QUEUE: usize = 4096;
/// Spans per export request at most (the export thread wakes for a full
/// one, else every [`DELAY`]).
const BATCH: usize = 512;
/// How long spans wait to fill a batch: the OpenTelemetry SDKs' default
/// (`OTEL_BSP_SCHEDULE_DELAY`, 5,000 ms). An export's cost (an HTTP
/// request) is shared by the requests of this long.
const DELAY: Duration = Duration::from_secs(5);
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
    // The export queue, for `request_span` to find in the subscriber in
    // force; its filter refuses every callsite (no `tracing` span is
    // made for it, and the log layer's events are not touched).
    let traces = Sink {
        queue: export.as_ref().map(|e| e.queue.clone()),
    }
    .with_filter(filter_fn(|_| false));
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

/// The attributes a span may carry (the table above), each exported
/// under its OpenTelemetry name ([`Key::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Key {
    /// `http.request.method`
    Method,
    /// `url.path`
    Path,
    /// `http.response.status_code`
    Status,
    /// `citestream.search` (the `x-citestream-search` value)
    Search,
    /// `citestream.account`
    Account,
    /// `citestream.provider`
    Provider,
    /// `citestream.results`
    Results,
    /// `citestream.cache`
    Cache,
    /// `citestream.headers_ms`
    HeadersMs,
    /// `citestream.first_byte_ms`
    FirstByteMs,
}

/// How many [`Key`]s there are.
const KEYS: usize = 10;

impl Key {
    const ALL: [Key; KEYS] = [
        Key::Method,
        Key::Path,
        Key::Status,
        Key::Search,
        Key::Account,
        Key::Provider,
        Key::Results,
        Key::Cache,
        Key::HeadersMs,
        Key::FirstByteMs,
    ];

    /// The attribute's name as exported.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Key::Method => "http.request.method",
            Key::Path => "url.path",
            Key::Status => "http.response.status_code",
            Key::Search => "citestream.search",
            Key::Account => "citestream.account",
            Key::Provider => "citestream.provider",
            Key::Results => "citestream.results",
            Key::Cache => "citestream.cache",
            Key::HeadersMs => "citestream.headers_ms",
            Key::FirstByteMs => "citestream.first_byte_ms",
        }
    }
}

/// An attribute's value; text is a range of [`Body::text`].
#[derive(Debug, Clone, Copy, Default)]
enum Val {
    #[default]
    None,
    Int(i64),
    Float(f64),
    Static(&'static str),
    Text(u32, u32),
}

/// OpenTelemetry's span kinds (their numbers in OTLP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// What is fixed when a span starts.
#[derive(Debug)]
struct Head {
    name: &'static str,
    kind: Kind,
    trace_id: u128,
    span_id: u64,
    /// 0: a root span.
    parent_id: u64,
    /// The parent is the client's span.
    remote: bool,
    /// The trace is sampled (the client's flag; ours are): exported.
    sampled: bool,
    /// The client's `tracestate`, passed on.
    state: Option<HeaderValue>,
    /// Nanoseconds since the Unix epoch.
    start: u64,
}

/// What is recorded while a span is open.
#[derive(Debug, Default)]
struct Body {
    vals: [Val; KEYS],
    text: String,
    error: bool,
    /// Nanoseconds since the Unix epoch, when the span's last moment was
    /// read already ([`UpstreamSpan::first_byte`]); 0: when it is dropped.
    end: u64,
}

impl Body {
    fn text(&mut self, key: Key, v: &str) {
        let from = self.text.len();
        if self.text.capacity() == 0 {
            // Room for the usual text (a path, an account) at once.
            self.text.reserve(64);
        }
        self.text.push_str(v);
        self.vals[key as usize] = match (u32::try_from(from), u32::try_from(self.text.len())) {
            (Ok(a), Ok(b)) => Val::Text(a, b),
            _ => Val::None,
        };
    }
}

/// A span that ended, waiting for export.
#[derive(Debug)]
struct Ended {
    head: Head,
    body: Body,
    /// Nanoseconds since the Unix epoch.
    end: u64,
}

/// One open span, shared by its [`Span`] handles.
#[derive(Debug)]
struct Open {
    head: Head,
    body: Mutex<Body>,
    queue: Arc<Queue>,
}

impl Drop for Open {
    /// The last handle is gone: the span ends and is queued for export.
    fn drop(&mut self) {
        if !self.head.sampled {
            return;
        }
        let h = &mut self.head;
        let head = Head {
            state: h.state.take(),
            ..*h
        };
        let body = std::mem::take(self.body.get_mut().unwrap_or_else(PoisonError::into_inner));
        let end = if body.end == 0 { now_nanos() } else { body.end };
        self.queue.push(Ended { head, body, end });
    }
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A span of one request's trace (or none: traces off, or a request that
/// is not ours). A handle: clones are the same span, which ends when the
/// last one is dropped. Recording on a none span does nothing.
#[derive(Debug, Clone, Default)]
pub struct Span(Option<Arc<Open>>);

thread_local! {
    /// The span that [`span`] makes children of on this thread.
    static CURRENT: Cell<Span> = const { Cell::new(Span(None)) };
}

impl Span {
    /// No span.
    #[must_use]
    pub const fn none() -> Span {
        Span(None)
    }

    /// Whether this is a span (traces on), not [`Span::none`].
    #[must_use]
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// A new root span of a trace: the child of the client's span in
    /// `headers`' `traceparent` when there is a valid one, else of a new
    /// trace; none when traces are off.
    fn root(name: &'static str, kind: Kind, headers: &HeaderMap) -> Span {
        let Some(queue) = installed_queue() else {
            return Span::none();
        };
        let client = headers
            .get(&TRACEPARENT)
            .and_then(|v| parse_traceparent(v.as_bytes()));
        let (trace_id, parent_id, sampled, state) = match client {
            Some((t, p, s)) => (
                t,
                p,
                s,
                headers.get(&TRACESTATE).filter(|v| !v.is_empty()).cloned(),
            ),
            None => (
                u128::from(nonzero_random()) << 64 | u128::from(random()),
                0,
                true,
                None,
            ),
        };
        Span(Some(Arc::new(Open {
            head: Head {
                name,
                kind,
                trace_id,
                span_id: nonzero_random(),
                parent_id,
                remote: client.is_some(),
                sampled,
                state,
                start: now_nanos(),
            },
            body: Mutex::default(),
            queue,
        })))
    }

    /// A new span, child of this one (none when this one is).
    #[must_use]
    pub fn child(&self, name: &'static str) -> Span {
        self.child_of_kind(name, Kind::Internal)
    }

    fn child_of_kind(&self, name: &'static str, kind: Kind) -> Span {
        let Some(p) = &self.0 else {
            return Span::none();
        };
        Span(Some(Arc::new(Open {
            head: Head {
                name,
                kind,
                trace_id: p.head.trace_id,
                span_id: nonzero_random(),
                parent_id: p.head.span_id,
                remote: false,
                sampled: p.head.sampled,
                state: p.head.state.clone(),
                start: now_nanos(),
            },
            body: Mutex::default(),
            queue: p.queue.clone(),
        })))
    }

    fn with_body(&self, f: impl FnOnce(&mut Body)) {
        if let Some(o) = &self.0 {
            f(&mut o.body.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// Sets `key` to an integer.
    pub fn record_int(&self, key: Key, v: i64) {
        self.with_body(|b| b.vals[key as usize] = Val::Int(v));
    }

    /// Sets `key` to a number.
    pub fn record_float(&self, key: Key, v: f64) {
        self.with_body(|b| b.vals[key as usize] = Val::Float(v));
    }

    /// Sets `key` to a text that lives for the program (not copied).
    pub fn record_static(&self, key: Key, v: &'static str) {
        self.with_body(|b| b.vals[key as usize] = Val::Static(v));
    }

    /// Sets `key` to a text (copied into the span's buffer).
    pub fn record_str(&self, key: Key, v: &str) {
        self.with_body(|b| b.text(key, v));
    }

    /// Marks the span as failed (OpenTelemetry's status `ERROR`).
    pub fn record_error(&self) {
        self.with_body(|b| b.error = true);
    }

    /// Runs `f` with this span current (the parent of [`span`]).
    pub fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        if self.0.is_none() {
            return f();
        }
        let mut slot = self.clone();
        let _current = Current::enter(&mut slot);
        f()
    }

    /// `span`'s context as the W3C `traceparent` value.
    fn traceparent(o: &Open) -> HeaderValue {
        let mut b = [0u8; 55];
        b[..3].copy_from_slice(b"00-");
        hex_into(&mut b[3..35], &o.head.trace_id.to_be_bytes());
        b[35] = b'-';
        hex_into(&mut b[36..52], &o.head.span_id.to_be_bytes());
        b[52] = b'-';
        b[53] = b'0';
        b[54] = if o.head.sampled { b'1' } else { b'0' };
        HeaderValue::from_bytes(&b).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// While it lives, a span is the thread's current one (moved in, no
/// reference counting); dropped, the previous one is back and the span
/// returns to its slot.
struct Current<'a> {
    slot: &'a mut Span,
    prev: Span,
}

impl<'a> Current<'a> {
    fn enter(slot: &'a mut Span) -> Current<'a> {
        let prev = CURRENT.with(|c| c.replace(std::mem::take(slot)));
        Current { slot, prev }
    }
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        let prev = std::mem::take(&mut self.prev);
        *self.slot = CURRENT.with(|c| c.replace(prev));
    }
}

/// A new span, child of the thread's current one ([`Span::in_scope`],
/// [`Instrument::instrument`]); none when there is none.
#[must_use]
pub fn span(name: &'static str) -> Span {
    CURRENT.with(|c| {
        let cur = c.take();
        let s = cur.child(name);
        c.set(cur);
        s
    })
}

/// Runs futures in a [`Span`]: it is the current span while the future
/// is polled, and ends (when no other handle has it) with the future.
pub trait Instrument: Sized {
    /// This future, run in `span`.
    fn instrument(self, span: Span) -> Instrumented<Self>;
}

impl<F: Future> Instrument for F {
    fn instrument(self, span: Span) -> Instrumented<Self> {
        Instrumented { fut: self, span }
    }
}

pin_project_lite::pin_project! {
    /// A future run in a span ([`Instrument::instrument`]).
    #[derive(Debug)]
    pub struct Instrumented<F> {
        #[pin]
        fut: F,
        span: Span,
    }
}

impl<F: Future> Future for Instrumented<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if this.span.0.is_none() {
            return this.fut.poll(cx);
        }
        let _current = Current::enter(this.span);
        this.fut.poll(cx)
    }
}

/// Holds the export queue in the subscriber, where [`request_span`]
/// finds it (the subscriber in force: tests and embedders may have
/// several).
struct Sink {
    queue: Option<Arc<Queue>>,
}

impl<S: Subscriber> Layer<S> for Sink {}

/// The export queue of the subscriber in force, when traces are on.
fn installed_queue() -> Option<Arc<Queue>> {
    tracing::dispatcher::get_default(|d| d.downcast_ref::<Sink>().and_then(|s| s.queue.clone()))
}

/// The spans ended and not yet exported, shared by the request threads
/// (which push) and the export thread (which takes them in batches).
#[derive(Debug, Default)]
struct Queue {
    spans: Mutex<Vec<Ended>>,
    ready: Condvar,
    stop: AtomicBool,
    dropped: AtomicU64,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Vec<Ended>> {
        self.spans.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues an ended span; drops it when [`QUEUE`] are waiting. Wakes
    /// the export thread only for a full batch.
    fn push(&self, e: Ended) {
        let mut q = self.lock();
        if q.len() >= QUEUE {
            drop(q);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push(e);
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
        let mut poster = otlp::Poster::new(&url, EXPORT_TIMEOUT).map_err(err)?;
        let queue = Arc::new(Queue::default());
        let (tx, done) = mpsc::channel();
        let q = queue.clone();
        std::thread::Builder::new()
            .name("citestream-otlp".into())
            .spawn(move || {
                export_loop(&q, &mut poster);
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
fn export_loop(queue: &Queue, poster: &mut otlp::Poster) {
    let mut taken = Vec::new();
    let mut body = Vec::new();
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
        for batch in taken.chunks(BATCH) {
            otlp::encode(&mut body, batch);
            if let Err(e) = poster.post(bytes::Bytes::copy_from_slice(&body)) {
                tracing::debug!(error = %e, "span export failed; spans dropped");
            }
        }
        taken.clear();
        let dropped = queue.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            tracing::debug!(dropped, "span queue full; spans dropped");
        }
        if stopping {
            return;
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
pub fn trace_headers(span: &Span) -> Option<(HeaderValue, Option<HeaderValue>)> {
    let o = span.0.as_ref()?;
    Some((Span::traceparent(o), o.head.state.clone()))
}

/// Writes `span`'s trace context into `headers` (`traceparent`, and
/// `tracestate` when the client sent one), replacing the client's, when
/// traces are on; else leaves `headers` as they are.
pub fn inject_trace(span: &Span, headers: &mut HeaderMap) {
    if let Some((parent, state)) = trace_headers(span) {
        headers.insert(TRACEPARENT, parent);
        if let Some(s) = state {
            headers.insert(TRACESTATE, s);
        }
    }
}

/// The `request` span of one exchange (not current yet): a server span
/// that continues the client's trace (`traceparent`), with its method and
/// path; the host records the rest ([`record_reply`]). None when traces
/// are off.
pub fn request_span(method: &str, path: &str, headers: &HeaderMap) -> Span {
    let span = Span::root("request", Kind::Server, headers);
    if span.is_on() {
        span.with_body(|b| {
            match method {
                "GET" => b.vals[Key::Method as usize] = Val::Static("GET"),
                "POST" => b.vals[Key::Method as usize] = Val::Static("POST"),
                m => b.text(Key::Method, m),
            }
            b.text(Key::Path, path);
        });
    }
    span
}

/// Records the HTTP status a span ended with (`request`, `upstream`); a
/// 5xx marks the span as an error.
pub fn record_status(span: &Span, status: u16) {
    span.with_body(|b| {
        b.vals[Key::Status as usize] = Val::Int(i64::from(status));
        b.error |= status >= 500;
    });
}

/// Records what a host answered on the `request` span: the status (a 5xx
/// marks it as an error) and the `x-citestream-search` value, if any.
pub fn record_reply(span: &Span, status: u16, search: Option<&HeaderValue>) {
    record_status(span, status);
    if let Some(v) = search.and_then(|v| v.to_str().ok()) {
        span.record_str(Key::Search, v);
    }
}

/// The `upstream` span of one exchange (`citestream_host::exchange` keeps
/// it): from the request going upstream to the first byte of the
/// response body (or the end of an empty one). Its fields: `http.response.status_code`,
/// `citestream.headers_ms` (to the response head), and
/// `citestream.first_byte_ms` (to the first body byte; absent when the
/// body was empty or never came). An upstream failure, or a 5xx, marks it
/// as an error.
///
/// The span's start is the moment the request went upstream: the
/// durations are read against it, and the first byte's moment is the
/// span's end (one clock read each).
#[derive(Debug)]
pub struct UpstreamSpan {
    span: Span,
}

impl UpstreamSpan {
    /// Opens the span as a child of the current one, and sets
    /// `traceparent` (and the client's `tracestate`) on the edits of the
    /// request going upstream, naming this span as the parent; `None`
    /// when traces are off (the client's headers go upstream as they came).
    #[must_use]
    pub fn open(edits: &mut crate::exchange::HeaderEdits) -> Option<UpstreamSpan> {
        let span = CURRENT.with(|c| {
            let cur = c.take();
            let s = cur.child_of_kind("upstream", Kind::Client);
            c.set(cur);
            s
        });
        let (parent, state) = trace_headers(&span)?;
        edits.set(TRACEPARENT, parent);
        if let Some(s) = state {
            edits.set(TRACESTATE, s);
        }
        Some(UpstreamSpan { span })
    }

    /// Milliseconds from the span's start to `now` (nanoseconds since the
    /// epoch; 0 when the clock went back).
    fn ms_to(&self, now: u64) -> f64 {
        let start = self.span.0.as_ref().map_or(now, |o| o.head.start);
        #[allow(clippy::cast_precision_loss)] // below 2^53 ns: 104 days
        let ns = now.saturating_sub(start) as f64;
        ns / 1e6
    }

    /// The response head arrived with `status`.
    pub fn headers(&self, status: u16) {
        let now = now_nanos();
        self.span.record_float(Key::HeadersMs, self.ms_to(now));
        record_status(&self.span, status);
    }

    /// The first byte of the response body arrived: the span ends (at
    /// that moment).
    pub fn first_byte(self) {
        let now = now_nanos();
        let ms = self.ms_to(now);
        self.span.with_body(|b| {
            b.vals[Key::FirstByteMs as usize] = Val::Float(ms);
            b.end = now;
        });
    }

    /// The upstream failed (no response, or its body broke off): the span
    /// ends as an error.
    pub fn failed(self) {
        self.span.record_error();
    }
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

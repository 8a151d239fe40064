//! Load benchmark of `citestream serve` (issue 10, "Numbers"), loopback only.
//!
//! ```text
//! cargo build --release -p citestream-cli
//! cargo run --release -p citestream-gateway --example gateway_load -- \
//!     --bin target/release/citestream [--streams 1,100,1000] [--events 100] [--interval-ms 10] \
//!     [--rate 10000] [--throughput-events 200000] [--rss-streams 1000]
//! cargo run --release -p citestream-gateway --example gateway_load -- \
//!     --bin target/release/citestream --tracing 1,100 [--rounds 5]
//! ```
//!
//! Contract: one run starts, on 127.0.0.1 only,
//! * an SSE upstream (in this process) that writes `chat.completion.chunk`
//!   events, each stamped with an SSE comment line `: ts=<ns>` (nanoseconds
//!   since this process's epoch) at the moment it is written;
//! * a plain hyper reverse proxy (this binary re-run as `--proxy`, its own
//!   process, streaming bodies both ways) as the baseline;
//! * `citestream serve` (the `--bin` binary) with the `static` search provider
//!   and a memory quota, asked with `web_search` false (pure proxy) and true
//!   (search, injection, streaming rewrite).
//!
//! Clients in this process read each stream and take, per event, the time
//! from the upstream's write to the client's read (comments pass through
//! the rewriter untouched). For each target and each concurrency level it
//! reports p50/p99 of that latency, the time to the response head (the
//! static search costs microseconds: "excluding the search"), throughput
//! with unpaced upstreams, and errors; and, first, the RSS per open stream
//! of each proxy (streams held open after their first event). Everything is bounded: a
//! fixed number of streams and events, and a timeout on every stream. The
//! numbers are comparisons within one run (the same machine, the same load
//! generator), not absolute figures.
//!
//! `--cpu ROUNDS` runs only the CPU table instead: `serve` from
//! `--base-bin` when given (the same tree before a change; as it is and
//! with `TOKIO_WORKER_THREADS=1`, one runtime worker), and from `--bin`
//! once per `--workers` count (default `1,2`: `server.workers`, one
//! current-thread runtime per worker); per workload (unpaced, one stream of 5,000 events; paced,
//! 50 streams of 100 events 2 ms apart) and `web_search` off and on, in
//! `ROUNDS` interleaved rounds, the CPU the `serve` process spent per event
//! (its threads' `/proc/PID/task/*/schedstat`), and the per-event latency
//! p50/p99; medians of the rounds.
//!
//! `--tracing LEVELS` runs only the tracing table instead: three `serve`
//! processes, traces off, traces on (`log.otlp_endpoint` to an OTLP/HTTP
//! collector in this process that reads and acknowledges every export) and
//! traces on with the collector down (a closed port); grounded unpaced
//! streams of 20 events at each concurrency level, in interleaved rounds;
//! per target the CPU time the `serve` process spent per request (sum of
//! its threads' `/proc/PID/task/*/schedstat`, median of the rounds), its
//! spread over the rounds (min–max), its difference to traces off, and
//! the p50 time to the response head.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;
type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Per-stream timeout: a stream that takes longer counts as an error.
const STREAM_TIMEOUT: Duration = Duration::from_secs(120);
const CHUNK: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,"delta":{"content":"Lisbon is sunny today [1]. "},"finish_reason":null}]}"#;
const FINISH: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;

/// What the upstream is asked to write, carried in the request's `model`
/// (`bench:<events>:<interval µs>:<hold 0|1>`) so it crosses any proxy.
#[derive(Clone, Copy, Debug)]
struct Job {
    events: usize,
    interval_us: u64,
    hold: bool,
}

impl Job {
    fn new(events: usize, interval_us: u64, hold: bool) -> Job {
        Job {
            events,
            interval_us,
            hold,
        }
    }

    fn model(&self) -> String {
        format!(
            "bench:{}:{}:{}",
            self.events,
            self.interval_us,
            u8::from(self.hold)
        )
    }

    fn parse(body: &[u8]) -> Option<Job> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let mut it = v.get("model")?.as_str()?.strip_prefix("bench:")?.split(':');
        Some(Job::new(
            it.next()?.parse().ok()?,
            it.next()?.parse().ok()?,
            it.next()? == "1",
        ))
    }
}

/// Shared state of the in-process upstream.
#[derive(Debug)]
struct Upstream {
    epoch: Instant,
    /// Held streams wait for this generation counter to pass the value it
    /// had before their first event.
    release: watch::Sender<u64>,
}

/// A response body fed by a channel, one frame per message.
#[derive(Debug)]
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
    }
}

async fn upstream_handle(
    up: Arc<Upstream>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let Some(job) = Job::parse(&body) else {
        let msg = Full::new(Bytes::from_static(b"{\"error\":\"not a bench request\"}"));
        let mut resp = Response::new(msg.map_err(|e| match e {}).boxed());
        *resp.status_mut() = hyper::StatusCode::BAD_REQUEST;
        return Ok(resp);
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut release = up.release.subscribe();
        let generation = *release.borrow();
        for i in 0..job.events {
            let ts = up.epoch.elapsed().as_nanos();
            let event = format!(": ts={ts}\ndata: {CHUNK}\n\n");
            if tx.send(Bytes::from(event)).await.is_err() {
                return;
            }
            if job.hold && i == 0 {
                let _ = release.wait_for(|g| *g > generation).await;
            } else if job.interval_us > 0 {
                tokio::time::sleep(Duration::from_micros(job.interval_us)).await;
            }
        }
        let tail = format!("data: {FINISH}\n\ndata: [DONE]\n\n");
        let _ = tx.send(Bytes::from(tail)).await;
    });
    let mut resp = Response::new(ChannelBody(rx).map_err(|e| match e {}).boxed());
    resp.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    Ok(resp)
}

/// Serves HTTP/1.1 on `listener` with `handle` until the process ends.
async fn serve_http1<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
{
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let _ = sock.set_nodelay(true);
        let handle = handle.clone();
        tokio::spawn(async move {
            let svc = service_fn(handle);
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(sock), svc)
                .await;
        });
    }
}

/// `--proxy UPSTREAM`: the baseline, a plain hyper reverse proxy that
/// streams both bodies. Prints `listening ADDR` and serves until killed.
fn proxy_main(upstream: String) {
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        println!("listening {}", listener.local_addr().expect("addr"));
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<HttpConnector, Incoming> =
            Client::builder(TokioExecutor::new()).build(connector);
        serve_http1(listener, move |req: Request<Incoming>| {
            let client = client.clone();
            let upstream = upstream.clone();
            async move {
                let (mut parts, body) = req.into_parts();
                let pq = parts
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str())
                    .unwrap_or("/");
                parts.uri = format!("http://{upstream}{pq}").parse().expect("uri");
                match client.request(Request::from_parts(parts, body)).await {
                    Ok(resp) => Ok(resp.map(|b| b.map_err(BoxError::from).boxed())),
                    Err(_) => {
                        let mut r =
                            Response::new(Full::new(Bytes::new()).map_err(|e| match e {}).boxed());
                        *r.status_mut() = hyper::StatusCode::BAD_GATEWAY;
                        Ok(r)
                    }
                }
            }
        })
        .await;
    });
}

/// What one client stream saw.
#[derive(Debug, Default)]
struct StreamResult {
    /// Nanoseconds from the request to the response head.
    head_ns: u64,
    /// Per event: nanoseconds from the upstream's write to the client's read.
    latencies: Vec<u64>,
    ok: bool,
}

/// Reads `: ts=N` comment lines out of the frames of one stream.
#[derive(Debug, Default)]
struct Stamps {
    carry: Vec<u8>,
}

impl Stamps {
    fn feed(&mut self, data: &[u8], now_ns: u64, out: &mut Vec<u64>) {
        self.carry.extend_from_slice(data);
        let mut start = 0;
        while let Some(nl) = self.carry[start..].iter().position(|&b| b == b'\n') {
            let line = &self.carry[start..start + nl];
            let stamp = line
                .strip_prefix(b": ts=")
                .and_then(|ts| std::str::from_utf8(ts).ok())
                .and_then(|t| t.parse::<u64>().ok());
            if let Some(ts) = stamp {
                out.push(now_ns.saturating_sub(ts));
            }
            start += nl + 1;
        }
        self.carry.drain(..start);
    }
}

fn request_body(job: Job, web_search: bool) -> Bytes {
    Bytes::from(format!(
        r#"{{"model":"{}","stream":true,"web_search":{web_search},"messages":[{{"role":"user","content":"Is Lisbon sunny today?"}}]}}"#,
        job.model()
    ))
}

async fn one_stream(
    client: HttpClient,
    url: String,
    body: Bytes,
    epoch: Instant,
    first: Option<Arc<AtomicUsize>>,
) -> StreamResult {
    let mut res = StreamResult::default();
    let start = epoch.elapsed().as_nanos() as u64;
    let req = Request::post(url)
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-bench")
        .body(Full::new(body))
        .expect("request");
    let Ok(resp) = client.request(req).await else {
        return res;
    };
    res.head_ns = epoch.elapsed().as_nanos() as u64 - start;
    if !resp.status().is_success() {
        return res;
    }
    let mut body = resp.into_body();
    let mut stamps = Stamps::default();
    let mut counted = false;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return res };
        if let Some(data) = frame.data_ref() {
            let now = epoch.elapsed().as_nanos() as u64;
            stamps.feed(data, now, &mut res.latencies);
            if let (Some(counter), false) = (&first, counted || res.latencies.is_empty()) {
                counter.fetch_add(1, Ordering::SeqCst);
                counted = true;
            }
        }
    }
    res.ok = true;
    res
}

/// Aggregate of one target at one concurrency level.
#[derive(Debug, Default)]
struct Level {
    p50_us: f64,
    p99_us: f64,
    head_p50_us: f64,
    events: usize,
    events_per_s: f64,
    errors: usize,
}

fn percentile_us(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// Runs `n` concurrent streams of `job` against `url`.
async fn run_level(bench: &Bench, url: &str, web_search: bool, n: usize, job: Job) -> Level {
    let body = request_body(job, web_search);
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            // Starts spread over one interval, so paced events do not all
            // arrive in the same instant.
            let stagger = Duration::from_micros(job.interval_us * i as u64 / n as u64);
            let fut = one_stream(
                bench.client.clone(),
                url.to_owned(),
                body.clone(),
                bench.epoch,
                None,
            );
            tokio::spawn(async move {
                tokio::time::sleep(stagger).await;
                tokio::time::timeout(STREAM_TIMEOUT, fut).await
            })
        })
        .collect();
    let (mut lat, mut heads, mut errors) = (Vec::new(), Vec::new(), 0);
    for t in tasks {
        match t.await {
            Ok(Ok(r)) if r.ok && r.latencies.len() == job.events => {
                lat.extend(r.latencies);
                heads.push(r.head_ns);
            }
            _ => errors += 1,
        }
    }
    let wall = started.elapsed().as_secs_f64();
    lat.sort_unstable();
    heads.sort_unstable();
    Level {
        p50_us: percentile_us(&lat, 0.50),
        p99_us: percentile_us(&lat, 0.99),
        head_p50_us: percentile_us(&heads, 0.50),
        events: lat.len(),
        events_per_s: lat.len() as f64 / wall,
        errors,
    }
}

/// Resident set size of process `pid` in bytes (Linux /proc).
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Starts `n` streams that the upstream holds open after their first
/// event; returns once all of them have read it (or after 60 s).
async fn open_held(bench: &Bench, url: &str, web_search: bool, n: usize) -> Vec<StreamTask> {
    let job = Job::new(2, 0, true);
    let body = request_body(job, web_search);
    let first = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let fut = one_stream(
                bench.client.clone(),
                url.to_owned(),
                body.clone(),
                bench.epoch,
                Some(first.clone()),
            );
            tokio::spawn(tokio::time::timeout(STREAM_TIMEOUT, fut))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while first.load(Ordering::SeqCst) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tasks
}

type StreamTask = tokio::task::JoinHandle<Result<StreamResult, tokio::time::error::Elapsed>>;

/// RSS added per open stream in process `pid`: the slope of its RSS between
/// `n / 10` and `n` streams held open at once (fixed costs and allocator
/// warm-up cancel out). Returns (bytes per stream, errors).
async fn rss_per_stream(
    bench: &Bench,
    url: &str,
    web_search: bool,
    pid: u32,
    n: usize,
) -> (f64, usize) {
    let small = (n / 10).max(1);
    let mut tasks = open_held(bench, url, web_search, small).await;
    let at_small = rss_bytes(pid);
    tasks.extend(open_held(bench, url, web_search, n - small).await);
    let at_n = rss_bytes(pid);
    bench.upstream.release.send_modify(|g| *g += 1);
    let mut errors = 0;
    for t in tasks {
        if !matches!(t.await, Ok(Ok(r)) if r.ok) {
            errors += 1;
        }
    }
    let per = at_n.saturating_sub(at_small) as f64 / (n - small).max(1) as f64;
    (per, errors)
}

/// The load generator's shared state.
#[derive(Debug)]
struct Bench {
    client: HttpClient,
    epoch: Instant,
    upstream: Arc<Upstream>,
}

/// Command-line options.
#[derive(Debug)]
struct Args {
    bin: PathBuf,
    streams: Vec<usize>,
    events: usize,
    interval_ms: u64,
    throughput_events: usize,
    rss_streams: usize,
    rate: usize,
    tracing: Vec<usize>,
    rounds: usize,
    cpu: usize,
    base_bin: Option<PathBuf>,
    workers: Vec<usize>,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        bin: PathBuf::from("target/release/citestream"),
        streams: vec![1, 100, 1000],
        events: 100,
        interval_ms: 10,
        throughput_events: 200_000,
        rss_streams: 1000,
        rate: 10_000,
        tracing: Vec::new(),
        rounds: 5,
        cpu: 0,
        base_bin: None,
        workers: vec![1, 2],
    };
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || value.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--bin" => a.bin = PathBuf::from(value),
            "--streams" => {
                a.streams = value
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--streams: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--events" => a.events = num()?,
            "--interval-ms" => a.interval_ms = num()? as u64,
            "--throughput-events" => a.throughput_events = num()?,
            "--rss-streams" => a.rss_streams = num()?.max(10),
            "--rate" => a.rate = num()?.max(1),
            "--rounds" => a.rounds = num()?.max(1),
            "--cpu" => a.cpu = num()?.max(1),
            "--base-bin" => a.base_bin = Some(PathBuf::from(value)),
            "--workers" => {
                a.workers = value
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--workers: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--tracing" => {
                a.tracing = value
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--tracing: {e}")))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

/// A child process killed (by pid) when dropped.
#[derive(Debug)]
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_proxy(upstream: SocketAddr) -> (Killed, String) {
    use std::io::BufRead;
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe)
        .args(["--proxy", &upstream.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the baseline proxy");
    let mut line = String::new();
    let out = child.stdout.take().expect("stdout");
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .expect("proxy address");
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .expect("listening line")
        .to_owned();
    (Killed(child), addr)
}

fn spawn_gateway(bin: &PathBuf, upstream: SocketAddr, dir: &std::path::Path) -> (Killed, String) {
    spawn_gateway_with(bin, upstream, dir, "gateway", "")
}

/// `spawn_gateway` with `extra` appended to its config file (`name` keeps
/// the files of several gateways apart).
fn spawn_gateway_with(
    bin: &PathBuf,
    upstream: SocketAddr,
    dir: &std::path::Path,
    name: &str,
    extra: &str,
) -> (Killed, String) {
    spawn_gateway_env(bin, upstream, dir, name, extra, &[])
}

/// `spawn_gateway_with` with `env` set for the process.
fn spawn_gateway_env(
    bin: &PathBuf,
    upstream: SocketAddr,
    dir: &std::path::Path,
    name: &str,
    extra: &str,
    env: &[(&str, &str)],
) -> (Killed, String) {
    let sources = dir.join("sources.json");
    std::fs::write(
        &sources,
        r#"[{"title":"Lisbon weather","url":"https://weather.example/lisbon","text":"Sunny, 24 C."},
            {"title":"Portugal news","url":"https://news.example/pt","text":"A mild week."}]"#,
    )
    .expect("write sources");
    let config = dir.join(format!("{name}.toml"));
    let toml = format!(
        "[upstream]\nbase_url = \"http://{upstream}\"\n[search]\nprovider = \"static\"\n\
         [search.static]\npath = {:?}\n[plans.default]\nsearches_per_day = 1000000000\n{extra}",
        sources.display().to_string()
    );
    std::fs::write(&config, toml).expect("write config");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let child = Command::new(bin)
        .envs(env.iter().copied())
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    (Killed(child), format!("127.0.0.1:{port}"))
}

async fn wait_ready(client: &HttpClient, addr: &str) {
    for _ in 0..600 {
        let req = Request::get(format!("http://{addr}/readyz"))
            .body(Full::new(Bytes::new()))
            .expect("request");
        if matches!(client.request(req).await, Ok(r) if r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{addr} never became ready");
}

/// One thing the clients talk to.
#[derive(Debug)]
struct Target {
    name: &'static str,
    url: String,
    web_search: bool,
}

const CHAT_PATH: &str = "/v1/chat/completions";

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--proxy") {
        return proxy_main(argv.get(1).cloned().expect("--proxy UPSTREAM"));
    }
    let args = parse_args(&argv).unwrap_or_else(|e| {
        eprintln!("gateway_load: {e}");
        std::process::exit(2)
    });
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(run(args));
}

async fn run(args: Args) {
    let epoch = Instant::now();
    let (release, _) = watch::channel(0u64);
    let upstream = Arc::new(Upstream { epoch, release });
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let up_addr = listener.local_addr().expect("addr");
    let up = upstream.clone();
    tokio::spawn(serve_http1(listener, move |req| {
        upstream_handle(up.clone(), req)
    }));
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new()).build(connector);
    let bench = Bench {
        client,
        epoch,
        upstream,
    };
    let dir = std::env::temp_dir().join(format!("citestream-gateway-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    println!(
        "gateway_load: {} cores, loopback; every number below is from this one run\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if args.cpu > 0 {
        cpu_table(&bench, &args, up_addr, &dir).await;
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    if !args.tracing.is_empty() {
        tracing_table(&bench, &args, up_addr, &dir).await;
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    rss_table(&bench, &args, up_addr, &dir).await;
    let (proxy, proxy_addr) = spawn_proxy(up_addr);
    let (gateway, gw_addr) = spawn_gateway(&args.bin, up_addr, &dir);
    wait_ready(&bench.client, &gw_addr).await;
    let target = |name, addr: &str, web_search| Target {
        name,
        url: format!("http://{addr}{CHAT_PATH}"),
        web_search,
    };
    let targets = [
        target("direct (no proxy)", &up_addr.to_string(), false),
        target("plain hyper proxy", &proxy_addr, false),
        target("serve, web_search off", &gw_addr, false),
        target("serve, web_search on", &gw_addr, true),
    ];
    latency_table(&bench, &args, &targets).await;
    throughput_table(&bench, &args, &targets).await;
    drop((proxy, gateway));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Paced streams: per-event latency and time to the response head.
async fn latency_table(bench: &Bench, args: &Args, targets: &[Target]) {
    for t in targets {
        let warm = Job::new(20, 1000, false);
        run_level(bench, &t.url, t.web_search, 20, warm).await;
    }
    println!(
        "## Latency per event, upstream write -> client read\n\nPaced upstream: one event every {} ms per stream, at most {} events/s in all (slower per stream above {} streams); {} events per stream (5x at 1 stream).\n",
        args.interval_ms,
        args.rate,
        args.rate * args.interval_ms as usize / 1000,
        args.events
    );
    println!(
        "| streams | target | p50 µs | p99 µs | head p50 µs | events | errors |\n|---|---|---|---|---|---|---|"
    );
    for &n in &args.streams {
        let interval_us = (args.interval_ms * 1000).max((n as u64 * 1_000_000) / args.rate as u64);
        let events = if n == 1 { args.events * 5 } else { args.events };
        let job = Job {
            events,
            interval_us,
            hold: false,
        };
        let mut rows = Vec::new();
        for t in targets {
            let l = run_level(bench, &t.url, t.web_search, n, job).await;
            println!(
                "| {n} | {} | {:.1} | {:.1} | {:.1} | {} | {} |",
                t.name, l.p50_us, l.p99_us, l.head_p50_us, l.events, l.errors
            );
            rows.push(l);
        }
        if let [_, proxy, off, on] = &rows[..] {
            println!(
                "| {n} | **added by serve (on − plain proxy / on − off)** | {:+.1} / {:+.1} | {:+.1} / {:+.1} | | | |",
                on.p50_us - proxy.p50_us,
                on.p50_us - off.p50_us,
                on.p99_us - proxy.p99_us,
                on.p99_us - off.p99_us
            );
        }
    }
}

/// Unpaced streams: events per second through each target.
async fn throughput_table(bench: &Bench, args: &Args, targets: &[Target]) {
    println!(
        "\n## Throughput (unpaced upstream, {} events per level)\n",
        args.throughput_events
    );
    println!("| streams | target | events/s | errors |\n|---|---|---|---|");
    for &n in &args.streams {
        let job = Job::new((args.throughput_events / n).max(10), 0, false);
        for t in targets {
            let l = run_level(bench, &t.url, t.web_search, n, job).await;
            println!(
                "| {n} | {} | {:.0} | {} |",
                t.name, l.events_per_s, l.errors
            );
        }
    }
}

/// RSS per open stream, each target in a fresh process.
async fn rss_table(bench: &Bench, args: &Args, up_addr: SocketAddr, dir: &std::path::Path) {
    println!(
        "## RSS per open stream\n\nSlope of the process's RSS between {} and {} streams held open at once; a fresh process per row.\n",
        args.rss_streams / 10,
        args.rss_streams
    );
    println!("| target | RSS per open stream (KiB) | errors |\n|---|---|---|");
    for (name, web_search) in [
        ("plain hyper proxy", false),
        ("serve, web_search off", false),
        ("serve, web_search on", true),
    ] {
        let (child, addr) = if name.starts_with("plain") {
            spawn_proxy(up_addr)
        } else {
            let (child, addr) = spawn_gateway(&args.bin, up_addr, dir);
            wait_ready(&bench.client, &addr).await;
            (child, addr)
        };
        let url = format!("http://{addr}{CHAT_PATH}");
        let warm = Job::new(5, 0, false);
        run_level(bench, &url, web_search, 10, warm).await;
        let (per, errors) =
            rss_per_stream(bench, &url, web_search, child.0.id(), args.rss_streams).await;
        println!("| {name} | {:.1} | {errors} |", per / 1024.0);
    }
    println!();
}

/// The sum over process `pid`'s threads of `count` applied to each
/// thread's `/proc/PID/task/TID/<file>`.
fn per_thread(pid: u32, file: &str, count: impl Fn(&str) -> u64) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join(file)).ok())
        .map(|s| count(&s))
        .sum()
}

/// CPU time process `pid` has spent, over all its threads, in ns.
fn cpu_ns(pid: u32) -> u64 {
    per_thread(pid, "schedstat", |s| {
        s.split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Traces off / on / on with the collector down (see the module docs).
async fn tracing_table(bench: &Bench, args: &Args, up_addr: SocketAddr, dir: &std::path::Path) {
    let exports = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind collector");
    let collector = listener.local_addr().expect("addr");
    let seen = exports.clone();
    tokio::spawn(serve_http1(listener, move |req: Request<Incoming>| {
        let seen = seen.clone();
        async move {
            let ok = req.into_body().collect().await.is_ok();
            if ok {
                seen.fetch_add(1, Ordering::Relaxed);
            }
            let mut r = Response::new(Full::new(Bytes::new()).map_err(|e| match e {}).boxed());
            r.headers_mut().insert(
                "content-type",
                hyper::header::HeaderValue::from_static("application/x-protobuf"),
            );
            Ok::<_, Infallible>(r)
        }
    }));
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let setups = [
        ("traces off", String::new()),
        (
            "traces on, collector up",
            format!("[log]\notlp_endpoint = \"http://{collector}\"\n"),
        ),
        (
            "traces on, collector down",
            format!("[log]\notlp_endpoint = \"http://{down}\"\n"),
        ),
    ];
    let mut gws = Vec::new();
    for (i, (name, extra)) in setups.iter().enumerate() {
        let (child, addr) = spawn_gateway_with(&args.bin, up_addr, dir, &format!("gw{i}"), extra);
        wait_ready(&bench.client, &addr).await;
        let url = format!("http://{addr}{CHAT_PATH}");
        run_level(bench, &url, true, 10, Job::new(20, 0, false)).await;
        gws.push((*name, child, url));
    }
    println!(
        "## Tracing overhead\n\nGrounded (web_search on) unpaced streams of 20 events; {} interleaved rounds per level, medians; CPU of the serve process per request.\n",
        args.rounds
    );
    println!(
        "| streams | target | CPU µs/request | rounds min–max | vs traces off | head p50 µs | event p50 µs | requests | errors |\n|---|---|---|---|---|---|---|---|---|"
    );
    let job = Job::new(20, 0, false);
    for &n in &args.tracing {
        // About 200 requests per target per round.
        let batches = (200 / n).max(1);
        let mut cpu = vec![Vec::new(); gws.len()];
        let mut head = vec![Vec::new(); gws.len()];
        let mut event = vec![Vec::new(); gws.len()];
        let (mut requests, mut errors) = (vec![0; gws.len()], vec![0; gws.len()]);
        for _ in 0..args.rounds {
            for (i, (_, child, url)) in gws.iter().enumerate() {
                let pid = child.0.id();
                let c0 = cpu_ns(pid);
                let mut heads = Vec::new();
                let mut events = Vec::new();
                for _ in 0..batches {
                    let l = run_level(bench, url, true, n, job).await;
                    heads.push(l.head_p50_us);
                    events.push(l.p50_us);
                    errors[i] += l.errors;
                }
                let c1 = cpu_ns(pid);
                let done = batches * n;
                requests[i] += done;
                cpu[i].push((c1 - c0) as f64 / 1000.0 / done as f64);
                head[i].push(median(&mut heads));
                event[i].push(median(&mut events));
            }
        }
        let base = median(&mut cpu[0].clone());
        for (i, (name, _, _)) in gws.iter().enumerate() {
            let c = median(&mut cpu[i]);
            let lo = cpu[i].iter().copied().fold(f64::INFINITY, f64::min);
            let hi = cpu[i].iter().copied().fold(0.0, f64::max);
            println!(
                "| {n} | {name} | {c:.1} | {lo:.1}–{hi:.1} | {:+.1}% | {:.1} | {:.1} | {} | {} |",
                (c / base - 1.0) * 100.0,
                median(&mut head[i]),
                median(&mut event[i]),
                requests[i],
                errors[i]
            );
        }
    }
    println!(
        "\ncollector exports received: {}",
        exports.load(Ordering::Relaxed)
    );
}

/// Context switches (voluntary and not) of process `pid`, all threads.
fn ctx_switches(pid: u32) -> u64 {
    per_thread(pid, "status", |s| {
        s.lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum()
    })
}

/// Syscall counts of process `pid` (all threads) while `work` runs, from
/// `strace -c -f -p`; `None` without strace.
async fn strace_counts<F: std::future::Future<Output = usize>>(
    pid: u32,
    out: &std::path::Path,
    work: F,
) -> Option<(Vec<(String, u64)>, usize)> {
    let mut st = Command::new("strace")
        .args(["-c", "-f", "-o"])
        .arg(out)
        .args(["-p", &pid.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = work.await;
    let _ = Command::new("kill")
        .args(["-INT", &st.id().to_string()])
        .status();
    let _ = st.wait();
    let text = std::fs::read_to_string(out).ok()?;
    let counts = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // % time, seconds, usecs/call, calls, [errors], syscall
            let calls = f.get(3)?.parse::<u64>().ok()?;
            Some(((*f.last()?).to_owned(), calls))
        })
        .collect();
    Some((counts, events))
}

/// One `serve` of the CPU table: its name, binary, environment and extra
/// config.
type Setup = (String, PathBuf, Vec<(&'static str, &'static str)>, String);

/// CPU per event of `serve` builds side by side (see the module docs).
async fn cpu_table(bench: &Bench, args: &Args, up_addr: SocketAddr, dir: &std::path::Path) {
    let mut setups: Vec<Setup> = Vec::new();
    if let Some(base) = &args.base_bin {
        setups.push((
            "before (--base-bin)".into(),
            base.clone(),
            Vec::new(),
            String::new(),
        ));
        setups.push((
            "before, TOKIO_WORKER_THREADS=1".into(),
            base.clone(),
            vec![("TOKIO_WORKER_THREADS", "1")],
            String::new(),
        ));
    }
    for &w in &args.workers {
        setups.push((
            format!("after (--bin), server.workers = {w}"),
            args.bin.clone(),
            Vec::new(),
            format!("[server]\nworkers = {w}\n"),
        ));
    }
    let mut gws = Vec::new();
    for (i, (name, bin, env, extra)) in setups.iter().enumerate() {
        let (child, addr) = spawn_gateway_env(bin, up_addr, dir, &format!("cpu{i}"), extra, env);
        wait_ready(&bench.client, &addr).await;
        let url = format!("http://{addr}{CHAT_PATH}");
        run_level(bench, &url, true, 10, Job::new(50, 0, false)).await;
        gws.push((name.clone(), child, url));
    }
    let workloads = [
        ("unpaced 1 x 5000", 1usize, Job::new(5000, 0, false)),
        ("paced 2 ms, 50 x 100", 50, Job::new(100, 2000, false)),
    ];
    println!(
        "## CPU per event\n\n{} interleaved rounds, medians; CPU of the serve process (all threads) per event delivered.\n",
        args.cpu
    );
    println!(
        "| workload | web_search | build | CPU µs/event | vs first | ctx switches/event | p50 µs | p99 µs | events | errors |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for (wname, n, job) in workloads {
        for web_search in [false, true] {
            let k = gws.len();
            let (mut cpu, mut p50, mut p99) = (
                vec![Vec::new(); k],
                vec![Vec::new(); k],
                vec![Vec::new(); k],
            );
            let (mut events, mut errors) = (vec![0; k], vec![0; k]);
            let mut cs = vec![Vec::new(); k];
            for _ in 0..args.cpu {
                for (i, (_, child, url)) in gws.iter().enumerate() {
                    let pid = child.0.id();
                    let (c0, s0) = (cpu_ns(pid), ctx_switches(pid));
                    let l = run_level(bench, url, web_search, n, job).await;
                    let (c1, s1) = (cpu_ns(pid), ctx_switches(pid));
                    cpu[i].push((c1 - c0) as f64 / 1000.0 / l.events.max(1) as f64);
                    cs[i].push((s1 - s0) as f64 / l.events.max(1) as f64);
                    p50[i].push(l.p50_us);
                    p99[i].push(l.p99_us);
                    events[i] += l.events;
                    errors[i] += l.errors;
                }
            }
            let base = median(&mut cpu[0].clone());
            for (i, (name, _, _)) in gws.iter().enumerate() {
                let c = median(&mut cpu[i]);
                println!(
                    "| {wname} | {} | {name} | {c:.2} | {:+.1}% | {:.2} | {:.1} | {:.1} | {} | {} |",
                    if web_search { "on" } else { "off" },
                    (c / base - 1.0) * 100.0,
                    median(&mut cs[i]),
                    median(&mut p50[i]),
                    median(&mut p99[i]),
                    events[i],
                    errors[i]
                );
            }
        }
    }
    println!(
        "\n## Syscalls per event (strace -c -f on the serve process, unpaced 1 x 5000)\n\n| web_search | build | writes | reads | epoll_wait | futex | all |\n|---|---|---|---|---|---|---|"
    );
    for web_search in [false, true] {
        for (i, (name, child, url)) in gws.iter().enumerate() {
            let out = dir.join(format!("strace{i}.txt"));
            let work = async {
                run_level(bench, url, web_search, 1, Job::new(5000, 0, false))
                    .await
                    .events
            };
            let Some((counts, events)) = strace_counts(child.0.id(), &out, work).await else {
                println!("| strace not available | | | | | | |");
                return;
            };
            let per = |names: &[&str]| {
                counts
                    .iter()
                    .filter(|(n, _)| names.contains(&n.as_str()))
                    .map(|(_, c)| *c)
                    .sum::<u64>() as f64
                    / events.max(1) as f64
            };
            let all = counts
                .iter()
                .filter(|(n, _)| n != "total")
                .map(|(_, c)| *c)
                .sum::<u64>() as f64
                / events.max(1) as f64;
            println!(
                "| {} | {name} | {:.2} | {:.2} | {:.2} | {:.2} | {all:.2} |",
                if web_search { "on" } else { "off" },
                per(&["write", "writev", "sendto", "sendmsg"]),
                per(&["read", "readv", "recvfrom", "recvmsg"]),
                per(&["epoll_wait", "epoll_pwait", "epoll_pwait2"]),
                per(&["futex"]),
            );
        }
    }
}

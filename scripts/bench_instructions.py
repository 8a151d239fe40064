#!/usr/bin/env python3
"""Instructions the `citestream serve` process spends per request and per
upstream event, counted by valgrind's callgrind: repeatable to well under
1% on a shared machine where wall-clock rows move by tens of percent.

    cargo build --release -p citestream-cli
    target/e2e-venv/bin/python scripts/bench_instructions.py \\
        --bin before=/path/to/old/citestream --bin main=target/release/citestream

What it does
* For each binary (`--bin NAME=PATH`, the first is the base of the ratios)
  and each case (`--cases`):
  - `pass-through`: a streamed chat request without `web_search` (proxied,
    not rewritten);
  - `rewrite`: `web_search: true` (static search over the Lisbon sources,
    the sources injected, the stream rewritten);
  - `resend`: `web_search: true` against an upstream that answers a
    connection's first request and closes it under the next one, unanswered
    (the replay upstream's `closing="under"`): every reused pooled
    connection fails before any response byte and the request is sent
    again on a fresh one (`citestream_upstream_retries_total
    {reason="stale_connection"}`, read from `/metrics`: the measured
    requests' resends are shown; every second request takes that path, as
    the one after a resend opens a new pooled connection). A binary
    without that resend answers 502 there: the row says so.
* Tracing cases (`--cases traces-off,traces-up,traces-down`, none by
  default): the `rewrite` request on the same binary with `log.otlp_endpoint`
  unset (`traces-off`), set to a loopback OTLP/HTTP receiver this script
  starts (`traces-up`: takes `POST /v1/traces`, answers 200, counts the
  exports and their bytes, decodes nothing), or set to a loopback port
  nothing listens on (`traces-down`: every export's connect is refused).
  Each runs at every stream count of `--trace-streams` (default `1`):
  that many kept-alive connections sending at once, `--requests` requests
  in all (at least one per stream), each stream's pieces
  max(`--trace-gap` (0.01), `--stream-gap` (0.003) x streams) seconds
  apart, so that `serve` under valgrind reads them one by one even on a
  loaded machine (at 100 streams 0.3 s: a request takes 21 s; reads
  that coalesce make the count depend on the machine's load). The export thread sends every 5 s
  (or per 512 spans): the script waits `--settle` seconds (default 6)
  after the warm-up before zeroing the counts and again after the measured
  requests before dumping them, in all three cases, so each window holds
  the export of its own requests' spans. The ratios shown are to
  `traces-off` of the same binary and stream count. `--split-threads`
  has callgrind count each thread apart and shows the export thread's
  share (the thread that ran `export_loop`).
* The upstream is the end-to-end harness's replay upstream
  (tests/e2e/harness/replay.py), in this process, replaying `--fixture`
  (default `openai_gpt41nano_text_usage`, 304 events, 100 KB) in pieces of
  `--piece` bytes (1460) `--gap` seconds apart (0.005: slow enough that even
  under valgrind `serve` reads them one by one), the same pieces on
  every run. The client is one kept-alive httpx connection sending the
  requests one after another; only `serve` runs under valgrind.
* Each case runs on a fresh `serve` under `valgrind --tool=callgrind`
  (`--repeat` processes, default 2): `--warmup` requests (default 5, the
  lazy set-up of first use), then the counts are zeroed
  (`callgrind_control -z`), `--requests` requests (default 60) are sent and
  the counts dumped (`callgrind_control -d`): start-up and shutdown are
  not counted. The instructions of every thread of `serve` over those
  requests, divided by their number, is the cost of one request; per event
  is that over the fixture's events (the request's own work included).
* Prints a markdown table (instructions per request, per event, ratio to the
  base binary) with the date, the commits (`--commit NAME=SHA`, shown as
  given) and the options; `--json FILE` writes the figures too, and
  `--merge A.json B.json` prints one table of runs made apart (a binary
  measured once and kept). Exits 1 when a request that should succeed did
  not. `--keep DIR` keeps each measured dump;
  `--compare A.out B.out --requests N` lists the functions whose self cost
  per request moved most between two of them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import httpx  # noqa: E402

from harness.procs import free_port, http_status, stop_pid, toml_dumps  # noqa: E402
from harness.replay import ReplayServer  # noqa: E402

CHAT = "/v1/chat/completions"
SOURCES = [{"title": "Lisbon - Wikipedia", "url": "https://en.wikipedia.org/wiki/Lisbon",
            "text": "Lisbon is the capital and largest city of Portugal."}]
CASES = ("pass-through", "rewrite", "resend")
STALE = 'citestream_upstream_retries_total{reason="stale_connection"}'
TRACE_CASES = ("traces-off", "traces-up", "traces-down")


def body(model: str, search: bool) -> bytes:
    doc = {"model": model, "stream": True,
           "messages": [{"role": "user", "content": "What is the capital of Portugal?"}]}
    if search:
        doc["web_search"] = True
    return json.dumps(doc).encode()


def total_instructions(out: Path) -> int:
    """The `totals:` (or `summary:`) line of a callgrind output file."""
    text = out.read_text(errors="replace")
    m = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
    if not m:
        raise RuntimeError(f"no totals in {out}")
    return int(m.group(1))


def control(pid: int, command: str) -> None:
    """`callgrind_control -z` (zero the counts) or `-d` (dump them) on `pid`."""
    subprocess.run(["callgrind_control", command, str(pid)], check=True, capture_output=True, timeout=120)


def start_serve(binary: str, cfg: Path, case: str, tmp: Path,
                threads: bool = False) -> tuple[subprocess.Popen, str, Path]:
    """`serve` of `binary` on `cfg` under callgrind (`threads`: one dump
    file per thread): the process, its URL, the dump file's stem."""
    port = free_port()
    out = tmp / f"callgrind.{case}.{time.monotonic_ns()}.out"
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        + (["--separate-threads=yes"] if threads else []) + [binary, "serve",
         "--config", str(cfg), "--listen", f"127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL, stdout=open(tmp / "stdout", "ab"), stderr=open(tmp / "stderr", "ab"))
    return proc, f"http://127.0.0.1:{port}", out


def wait_ready(proc: subprocess.Popen, url: str, tmp: Path, args) -> None:
    deadline = time.monotonic() + args.start_timeout
    while http_status(url + "/readyz", 2.0) != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"serve did not start: {(tmp / 'stderr').read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)


def last_dump(out: Path, tmp: Path, args, kept: str) -> Path:
    """The measured dump of the process that wrote `out` (kept in `--keep`
    as `callgrind.{kept}.*.out`)."""
    dumps = sorted(tmp.glob(out.name + ".*"), key=lambda f: f.stat().st_mtime)
    if not dumps:
        raise RuntimeError(f"callgrind wrote no dump next to {out}")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(dumps[-1], args.keep / f"callgrind.{kept}.{time.monotonic_ns()}.out")
    return dumps[-1]


def run(binary: str, case: str, args, tmp: Path) -> tuple[int, int, int]:
    """(instructions, requests answered 200, stale resends) of `--requests`
    requests of `case` on one `serve` process, after `--warmup` ones."""
    replay = ReplayServer(closing="under" if case == "resend" else None).start()
    replay.record = False
    sources = tmp / "sources.json"
    sources.write_text(json.dumps(SOURCES))
    cfg = tmp / "citestream.toml"
    cfg.write_text(toml_dumps({
        "upstream": {"base_url": replay.url},
        "search": {"provider": "static", "static": {"path": str(sources)}},
        "quota": {"store": "memory"},
    }))
    proc, url, out = start_serve(binary, cfg, case, tmp)
    ok = 0
    stale = [-1, -1]
    try:
        wait_ready(proc, url, tmp, args)
        model = f"replay:{args.fixture}?piece={args.piece}&gap={args.gap}"
        req = body(model, case != "pass-through")
        with httpx.Client(timeout=120) as client:

            def resends(i: int) -> None:
                m = re.search("^" + re.escape(STALE) + r" (\d+)$", client.get(url + "/metrics").text, re.M)
                stale[i] = int(m.group(1)) if m else -1

            def send() -> bool:
                r = client.post(url + CHAT, content=req, headers={"content-type": "application/json"})
                return r.status_code == 200

            for _ in range(args.warmup):
                send()
            resends(0)
            control(proc.pid, "-z")
            for _ in range(args.requests):
                ok += send()
            control(proc.pid, "-d")
            resends(1)
    finally:
        stop_pid(proc, 120.0)
        replay.stop()
    dump = last_dump(out, tmp, args, f"{Path(binary).name}.{case}")
    return total_instructions(dump), ok, (stale[1] - stale[0]) if min(stale) >= 0 else -1


class Receiver:
    """A loopback OTLP/HTTP receiver: answers `POST /v1/traces` with 200
    (anything else 404), counting the exports and their bytes; the body is
    read, not decoded."""

    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep the exporter's connection

            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                n = len(self.rfile.read(int(self.headers.get("content-length", 0))))
                ok = self.path == "/v1/traces"
                if ok:
                    receiver.exports += 1
                    receiver.bytes += n
                self.send_response(200 if ok else 404)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


async def send_streams(url: str, req: bytes, streams: int, total: int) -> int:
    """`total` requests over `streams` kept-alive connections sending at
    once (each its share one after another); how many answered 200."""
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def one_stream(n: int) -> int:
            ok = 0
            for _ in range(n):
                r = await client.post(url + CHAT, content=req, headers={"content-type": "application/json"})
                ok += r.status_code == 200
            return ok

        shares = [total // streams + (i < total % streams) for i in range(streams)]
        return sum(await asyncio.gather(*(one_stream(n) for n in shares if n)))


def run_traces(binary: str, case: str, streams: int, args, tmp: Path) -> tuple[int, int, int, int, int]:
    """(instructions, of them the export thread's (-1: not split), requests
    answered 200, exports received, their bytes) of the measured requests
    of a tracing case (see the module docs)."""
    replay = ReplayServer().start()
    replay.record = False
    receiver = Receiver() if case == "traces-up" else None
    sources = tmp / "sources.json"
    sources.write_text(json.dumps(SOURCES))
    cfg = {
        "upstream": {"base_url": replay.url},
        "search": {"provider": "static", "static": {"path": str(sources)}},
        "quota": {"store": "memory"},
    }
    if case == "traces-up":
        cfg["log"] = {"otlp_endpoint": receiver.endpoint}
    elif case == "traces-down":
        cfg["log"] = {"otlp_endpoint": f"http://127.0.0.1:{free_port()}"}  # bound and let go: refused
    (tmp / "citestream.toml").write_text(toml_dumps(cfg))
    proc, url, out = start_serve(binary, tmp / "citestream.toml", case, tmp, args.split_threads)
    total = max(args.requests, streams)
    ok, exports, sent = 0, 0, 0
    try:
        wait_ready(proc, url, tmp, args)
        gap = max(args.trace_gap, args.stream_gap * streams)
        model = f"replay:{args.fixture}?piece={args.piece}&gap={gap}"
        req = body(model, True)
        asyncio.run(send_streams(url, req, streams, max(args.warmup, streams)))
        time.sleep(args.settle)
        if receiver:
            exports, sent = -receiver.exports, -receiver.bytes
        control(proc.pid, "-z")
        ok = asyncio.run(send_streams(url, req, streams, total))
        time.sleep(args.settle)
        control(proc.pid, "-d")
        if receiver:
            exports, sent = exports + receiver.exports, sent + receiver.bytes
    finally:
        stop_pid(proc, 120.0)
        replay.stop()
        if receiver:
            receiver.stop()
    if args.split_threads:
        return (*per_thread(out, tmp), ok, exports, sent)
    dump = last_dump(out, tmp, args, f"{Path(binary).name}.{case}.{streams}")
    return total_instructions(dump), -1, ok, exports, sent


def per_thread(out: Path, tmp: Path) -> tuple[int, int]:
    """(all threads, the span export thread) of the measured dump written
    with `--separate-threads=yes` (files `{out}.{dump}-{thread}`); the
    export thread is the one that ran `export_loop`."""
    files = [f for f in tmp.glob(out.name + ".*-*") if re.search(r"\.(\d+)-(\d+)$", f.name)]
    if not files:
        raise RuntimeError(f"callgrind wrote no per-thread dump next to {out}")
    last = max(int(re.search(r"\.(\d+)-\d+$", f.name).group(1)) for f in files)
    files = [f for f in files if int(re.search(r"\.(\d+)-\d+$", f.name).group(1)) == last]
    export = sum(total_instructions(f) for f in files if "export_loop" in f.read_text(errors="replace"))
    return sum(total_instructions(f) for f in files), export


def trace_table(doc: dict) -> str:
    """The markdown table of a run's tracing rows: instructions per
    request, each against `traces-off` of the same binary and streams."""
    rows = doc["trace_rows"]
    off = {(r["binary"], r["streams"]): r for r in rows if r["case"] == "traces-off"}
    out = [f"### `serve` instructions per request with traces off, on (collector up), on (collector down) "
           f"(callgrind, {doc['date']})", "",
           f"`rewrite` requests (`web_search: true`), fixture `{doc['fixture']}` ({doc['events']} events), "
           f"{doc['piece']} B pieces (gap: max({doc['trace_gap']}, {doc['stream_gap']} x streams) s), every thread of `serve`; {doc['settle']} s settled before and after the "
           f"counted requests; mean of {len(rows[0]['runs'])} processes (spread: (max - min) / mean).", "",
           "| streams | case | binary | requests | instructions / request | spread | vs traces off "
           "| of them the export thread | answered 200 | exports received (bytes) |",
           "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["streams"], r["binary"], TRACE_CASES.index(r["case"]))):
        b = off.get((r["binary"], r["streams"]))
        ratio = f"{r['per_request'] / b['per_request']:.4f}" if b else "n/a"
        got = f"{r['exports']} ({r['export_bytes']:,})" if r["case"] == "traces-up" else "—"
        export = fmt(r["export_thread"]) if r.get("export_thread") is not None else "not split"
        out.append(f"| {r['streams']} | {r['case']} | `{r['binary']}` | {r['requests']} | {fmt(r['per_request'])} "
                   f"| {100 * r['spread']:.2f}% | {ratio} | {export} | {r['answered_200']}/{r['requests']} | {got} |")
    return "\n".join(out)


def events_of(fixture: str) -> int:
    data = ReplayServer().body(fixture, True)[0]
    return sum(1 for line in data.split(b"\n") if line.startswith(b"data:"))


def self_costs(path: Path) -> dict[str, int]:
    """Self instructions per function of a callgrind dump, read from its
    `fn=` records (callgrind_annotate 3.19 puts a dump taken after
    `callgrind_control -z` all under `clone`)."""
    names: dict[str, str] = {}
    cost: dict[str, int] = {}
    fn, call = "?", False
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
        if m:
            kind, ident, name = m.groups()
            if name:
                names[ident] = name
            if kind == "fn":
                fn = names.get(ident, ident)
        elif line.startswith("calls="):
            call = True  # the next cost line is the callee's inclusive cost
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) >= 2 and not call:
                cost[fn] = cost.get(fn, 0) + int(parts[1])
            call = False if len(parts) >= 2 else call
    return cost


def compare(a: Path, b: Path, requests: int, top: int = 40) -> str:
    """The functions whose self cost per request changed most from dump `a`
    to dump `b` (both of `requests` requests)."""
    ca, cb = self_costs(a), self_costs(b)
    out = [f"total per request: {sum(ca.values()) / requests:,.0f} -> {sum(cb.values()) / requests:,.0f}"]
    diff = {k: cb.get(k, 0) - ca.get(k, 0) for k in set(ca) | set(cb)}
    for k, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:top]:
        out.append(f"{d / requests:>+10,.0f}  ({ca.get(k, 0) / requests:,.0f} -> {cb.get(k, 0) / requests:,.0f})  {k[:120]}")
    return "\n".join(out)


def fmt(n: float) -> str:
    return f"{n:,.0f}"


def table(docs: list[dict]) -> str:
    """The markdown table of one or more runs' JSON documents; the first
    binary of the first is the base of the ratios."""
    rows = [r for d in docs for r in d["rows"]]
    commits = {k: v for d in docs for k, v in d["commits"].items()}
    first = docs[0]
    base_name = rows[0]["binary"]
    base = {r["case"]: r for r in rows if r["binary"] == base_name}
    names = []
    for r in rows:
        if r["binary"] not in names:
            names.append(r["binary"])
    shown = ", ".join(f"`{n}`" + (f" ({commits[n]})" if n in commits else "") for n in names)
    out = [f"### `serve` instructions per request and per event (callgrind, {', '.join(d['date'] for d in docs)})", "",
           f"Binaries: {shown}. Fixture `{first['fixture']}` ({first['events']} events), {first['piece']} B pieces, "
           f"{first['requests']} requests counted after {first['warmup']}; mean of {len(rows[0]['runs'])} "
           "processes (spread: (max - min) / mean).", "",
           f"| case | binary | instructions / request | / event | spread | vs `{base_name}` | answered 200 "
           "| stale resends |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for case in CASES:
        for r in (r for r in rows if r["case"] == case):
            b = base.get(case)
            usable = b is not None and b["answered_200"] == b["requests"]
            ratio = f"{r['per_request'] / b['per_request']:.3f}" if usable else "n/a"
            stale = str(r["stale_resends"]) if r["stale_resends"] >= 0 else "not counted"
            out.append(f"| {r['case']} | `{r['binary']}` | {fmt(r['per_request'])} | {fmt(r['per_event'])} "
                       f"| {100 * r['spread']:.2f}% | {ratio} | {r['answered_200']}/{r['requests']} | {stale} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", action="append", default=[], metavar="NAME=PATH",
                    help="a citestream binary (repeat; the first is the base)")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A.out", "B.out"),
                    help="per-function self cost per request, dump A vs dump B (from --keep; --requests as measured)")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                    help="print one table of earlier runs' --json files (the first file's binary is the base)")
    ap.add_argument("--commit", action="append", default=[], metavar="NAME=SHA", help="shown in the heading")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2, help="fresh processes per case and binary")
    ap.add_argument("--fixture", default="openai_gpt41nano_text_usage")
    ap.add_argument("--piece", type=int, default=1460)
    ap.add_argument("--gap", type=float, default=0.005)
    ap.add_argument("--start-timeout", type=float, default=300.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--trace-streams", default="1", metavar="N,N",
                    help="stream counts of the tracing cases (e.g. 1,100)")
    ap.add_argument("--trace-gap", type=float, default=0.01,
                    help="a tracing case's pieces are max(this, --stream-gap x streams) seconds apart on each stream")
    ap.add_argument("--stream-gap", type=float, default=0.003)
    ap.add_argument("--split-threads", action="store_true",
                    help="tracing cases: one dump per thread; the export thread's share is shown")
    ap.add_argument("--settle", type=float, default=6.0,
                    help="seconds waited before and after the counted requests of a tracing case")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="keep each measured callgrind dump there (for callgrind_annotate)")
    args = ap.parse_args()
    if args.compare:
        print(compare(*args.compare, args.requests))
        return 0
    if args.merge:
        print(table([json.loads(p.read_text()) for p in args.merge]))
        return 0
    if not args.bin:
        ap.error("--bin is required (or --merge)")
    bins = [b.split("=", 1) for b in args.bin]
    commits = dict(c.split("=", 1) for c in args.commit)
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES + TRACE_CASES:
            ap.error(f"unknown case {c!r} (one of {', '.join(CASES + TRACE_CASES)})")
    trace_cases = [c for c in cases if c in TRACE_CASES]
    cases = [c for c in cases if c in CASES]
    streams = [int(n) for n in args.trace_streams.split(",") if n]
    events = events_of(args.fixture)
    rows, failed = [], False
    for case in cases:
        for name, path in bins:
            runs = []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory(prefix="bench-instr-") as d:
                    runs.append(run(path, case, args, Path(d)))
            pers = [total / args.requests for total, _, _ in runs]
            per = sum(pers) / len(pers)
            answered = min(ok for _, ok, _ in runs)
            stale = min(st for _, _, st in runs)
            row = {"case": case, "binary": name, "requests": args.requests, "answered_200": answered,
                   "events_per_request": events, "per_request": per, "per_event": per / events,
                   "runs": pers, "spread": (max(pers) - min(pers)) / per, "stale_resends": stale}
            rows.append(row)
            print(f"{case} {name}: {fmt(per)} per request (runs {', '.join(fmt(x) for x in pers)}), "
                  f"{answered}/{args.requests} answered 200, stale resends {stale}", file=sys.stderr)
            if answered != args.requests and not (case == "resend" and stale < 0):
                failed = True
    trace_rows = []
    for n in streams if trace_cases else []:
        for name, path in bins:
            for case in trace_cases:
                runs = []
                for _ in range(args.repeat):
                    with tempfile.TemporaryDirectory(prefix="bench-instr-") as d:
                        runs.append(run_traces(path, case, n, args, Path(d)))
                total = max(args.requests, n)
                pers = [r[0] / total for r in runs]
                per = sum(pers) / len(pers)
                answered = min(r[2] for r in runs)
                row = {"case": case, "binary": name, "streams": n, "requests": total, "answered_200": answered,
                       "per_request": per, "runs": pers, "spread": (max(pers) - min(pers)) / per,
                       "export_thread": (sum(r[1] for r in runs) / len(runs) / total) if runs[0][1] >= 0 else None,
                       "exports": min(r[3] for r in runs), "export_bytes": min(r[4] for r in runs)}
                trace_rows.append(row)
                print(f"{case} x{n} {name}: {fmt(per)} per request (runs {', '.join(fmt(x) for x in pers)}), "
                      f"{answered}/{total} answered 200, exports {row['exports']}", file=sys.stderr)
                failed |= answered != total
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    doc = {"date": when, "commits": commits, "fixture": args.fixture, "events": events, "piece": args.piece,
           "requests": args.requests, "warmup": args.warmup, "rows": rows}
    if trace_rows:
        doc.update(trace_rows=trace_rows, settle=args.settle, trace_gap=args.trace_gap,
                   stream_gap=args.stream_gap)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
    if rows:
        print(table([doc]))
    if trace_rows:
        print(trace_table(doc))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

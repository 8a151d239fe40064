#!/usr/bin/env python3
"""Added latency per event of `citestream ext-proc` behind a real Envoy.

Usage (from the repository root):
    cargo build --release -p citestream-cli
    cargo build --release -p citestream-ext-proc --example noop_processor
    PY=$(scripts/e2e-venv.sh)
    CITESTREAM_BIN=target/release/citestream $PY scripts/bench_envoy.py [--streams 20] [--events 200] [--rounds 1]

What it measures, all in one run on loopback:
* a local upstream (in this process) writes a grounded chat stream, one
  `chat.completion.chunk` event per write with a short gap between writes,
  and notes when each event was written; the client (httpx, this process,
  same clock) notes when each event arrives; per event: arrival - write;
* three set-ups over the same upstream and client: Envoy from the shipped
  `examples/envoy/envoy.yaml` with the ext_proc filter removed (baseline),
  and with the filter and the processor in `STREAMED` and in
  `FULL_DUPLEX_STREAMED` mode (requests with `web_search: true`, static
  search, so every event goes through the rewriter), and the same with
  `web_search: false` (every event still makes the gRPC round trip, but
  passes through unrewritten: the protocol's share of the cost);
* the floor of the protocol: the same Envoy set-ups in both body modes
  with the do-nothing processor (`examples/noop_processor.rs`,
  `NOOP_BIN`, default `target/release/examples/noop_processor`);
* p50 / p99 of the per-event latency of each, the difference to the
  baseline (the processor's added latency), the processor's CPU time
  (all its threads, /proc/PID/task/*/schedstat) divided by the events it
  handled, and each ext-proc row's added p99 over the noop's of its body
  mode (the goal: at most 1.2x);
* `--compare-bin PATH`: two more rows, another `citestream` build's
  ext-proc (`web_search: true`, both body modes), for a before/after in
  the same run; `--compare-noop-bin PATH` the same for another build of
  the do-nothing processor (e.g. `main`'s, on other message types);
* `--rounds N` runs every set-up N times, interleaved (round 1 of each,
  then round 2, ...), and pools each set-up's events, so a busy moment of
  the machine falls on all of them alike.

No figure is asserted anywhere; the baseline is measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))

from harness.checks import SOURCES  # noqa: E402
from harness.envoy import FULL_DUPLEX, STREAMED, Envoy, ExtProc, envoy_bin  # noqa: E402
from harness.procs import free_port  # noqa: E402

CHAT = "/v1/chat/completions"
TOKEN = re.compile(rb"tok(\d+)_")


class Upstream:
    """A chat-completions server writing numbered events, noting send times."""

    def __init__(self, events: int, gap: float):
        self.events, self.gap = events, gap
        self.sent: dict[tuple[int, int], int] = {}
        self.port = free_port()
        self.stream_no = 0

    async def _conn(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                body = json.loads(await reader.readexactly(length))
                s = int(body["model"].split(":")[1])
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                await writer.drain()
                for i in range(self.events):
                    await asyncio.sleep(self.gap)
                    finish = "null" if i < self.events - 1 else '"stop"'
                    ev = ('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
                          '[{"index":0,"delta":{"content":"tok%d_ [1] "},"finish_reason":%s}]}\n\n' % (i, finish))
                    if i == self.events - 1:
                        ev += "data: [DONE]\n\n"
                    data = ev.encode()
                    self.sent[(s, i)] = time.perf_counter_ns()
                    writer.write(b"%x\r\n%b\r\n" % (len(data), data))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def start(self):
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def main():
            server = await asyncio.start_server(self._conn, "127.0.0.1", self.port)
            ready.set()
            async with server:
                await server.serve_forever()

        threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True).start()
        ready.wait(10)
        return self


def without_ext_proc(text: str) -> str:
    """The shipped config with the ext_proc filter entry removed."""
    start = text.index("          - name: envoy.filters.http.ext_proc")
    end = text.index("          - name: envoy.filters.http.router")
    return text[:start] + text[end:]


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of `pid` so far (schedstat, nanoseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return total / 1e9


def run_streams(url: str, up: Upstream, streams: int, search: bool = True) -> list[float]:
    lat = []
    with httpx.Client(timeout=120) as c:
        for _ in range(streams):
            up.stream_no += 1
            s = up.stream_no
            body = {"model": f"bench:{s}", "stream": True, "web_search": search,
                    "messages": [{"role": "user", "content": "Capital of Portugal?"}]}
            buf, pos = bytearray(), 0
            with c.stream("POST", url + CHAT, json=body) as r:
                assert r.status_code == 200, r.read()
                for piece in r.iter_raw():
                    now = time.perf_counter_ns()
                    buf += piece
                    for m in TOKEN.finditer(buf, pos):
                        pos = m.end()
                        lat.append((now - up.sent[(s, int(m.group(1)))]) / 1000.0)
    return lat


class Noop:
    """The do-nothing processor (`examples/noop_processor.rs`) on a free port."""

    def __init__(self, path: str | None = None):
        root = Path(__file__).resolve().parents[1]
        path = path or os.environ.get("NOOP_BIN", str(root / "target" / "release" / "examples" / "noop_processor"))
        if not os.access(path, os.X_OK):
            raise SystemExit(f"{path} missing: cargo build --release -p citestream-ext-proc --example noop_processor")
        self.port = free_port()
        self.proc = subprocess.Popen([path, "--listen", f"127.0.0.1:{self.port}"], stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline()
        if not line.startswith(b"noop_processor: listening"):
            raise SystemExit(f"noop_processor did not start: {line!r}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--gap", type=float, default=0.002)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--compare-bin", help="another citestream binary: its ext-proc rows too")
    ap.add_argument("--compare-noop-bin", help="another noop_processor binary: its rows too")
    args = ap.parse_args()
    envoy_bin()
    up = Upstream(args.events, args.gap).start()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-envoy-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "sources.json").write_text(json.dumps(SOURCES))
    proc = ExtProc.start({"search": {"provider": "static", "static": {"path": str(tmp / "sources.json")}},
                          "plans": {"default": {"searches_per_day": 1_000_000}}})
    noop = Noop()
    other_noop = Noop(args.compare_noop_bin) if args.compare_noop_bin else None
    other = None
    if args.compare_bin:
        mine = os.environ.get("CITESTREAM_BIN")
        os.environ["CITESTREAM_BIN"] = args.compare_bin
        try:
            other = ExtProc.start({"search": {"provider": "static", "static": {"path": str(tmp / "sources.json")}},
                                   "plans": {"default": {"searches_per_day": 1_000_000}}})
        finally:
            if mine is None:
                os.environ.pop("CITESTREAM_BIN")
            else:
                os.environ["CITESTREAM_BIN"] = mine
    results: dict[str, tuple[list[float], float]] = {}
    try:
        # (label, processor, body mode, web_search)
        setups = [("envoy only", None, None, True),
                  ("noop STREAMED", noop, STREAMED, True),
                  ("noop FULL_DUPLEX", noop, FULL_DUPLEX, True),
                  ("ext-proc STREAMED", proc, STREAMED, True),
                  ("ext-proc FULL_DUPLEX", proc, FULL_DUPLEX, True),
                  ("ext-proc STREAMED, web_search false (pass-through)", proc, STREAMED, False),
                  ("ext-proc FULL_DUPLEX, web_search false (pass-through)", proc, FULL_DUPLEX, False)]
        if other_noop is not None:
            setups += [("noop (--compare-noop-bin) STREAMED", other_noop, STREAMED, True),
                       ("noop (--compare-noop-bin) FULL_DUPLEX", other_noop, FULL_DUPLEX, True)]
        if other is not None:
            setups += [("ext-proc (--compare-bin) STREAMED", other, STREAMED, True),
                       ("ext-proc (--compare-bin) FULL_DUPLEX", other, FULL_DUPLEX, True)]
        for _ in range(args.rounds):
            for label, target, mode, search in setups:
                envoy = Envoy.start(processor=(target or proc).port, upstream=up.port, mode=mode or STREAMED,
                                    transform=without_ext_proc if mode is None else None)
                try:
                    run_streams(envoy.url, up, 2, search)  # warm-up
                    pid = (target or proc).proc.pid
                    cpu0 = cpu_seconds(pid)
                    lat = run_streams(envoy.url, up, args.streams, search)
                    cpu = cpu_seconds(pid) - cpu0
                finally:
                    envoy.stop()
                old_lat, old_cpu = results.get(label, ([], 0.0))
                results[label] = (old_lat + lat, old_cpu + cpu)
    finally:
        noop.stop()
        if other_noop is not None:
            other_noop.stop()
        proc.stop()
        if other is not None:
            other.stop()
    base = results["envoy only"][0]
    print(f"events per set-up: {args.rounds} x {args.streams} streams x {args.events} events, "
          f"{args.gap * 1000:.1f} ms apart")
    print("| set-up | events | p50 µs | p99 µs | added p50 µs | added p99 µs | added p99 / noop's | "
          "processor CPU µs/event |")
    print("|---|---|---|---|---|---|---|---|")
    added99 = {label: pct(lat, 99) - pct(base, 99) for label, (lat, _) in results.items()}
    for label, (lat, cpu) in results.items():
        added50 = pct(lat, 50) - pct(base, 50)
        floor = "noop FULL_DUPLEX" if "FULL_DUPLEX" in label else "noop STREAMED"
        ratio = (f"{added99[label] / added99[floor]:.2f}x"
                 if label.startswith("ext-proc") and added99[floor] > 0 else "-")
        cpu_ev = "-" if label == "envoy only" else f"{cpu / len(lat) * 1e6:.1f}"
        print(f"| {label} | {len(lat)} | {pct(lat, 50):.0f} | {pct(lat, 99):.0f} | {added50:+.0f} | "
              f"{added99[label]:+.0f} | {ratio} | {cpu_ev} |")
    print(f"(baseline mean: {statistics.mean(base):.0f} µs)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Soak test of `citestream serve`: mixed load for a bounded time against the
end-to-end harness's replay upstream, on loopback only.

    target/e2e-venv/bin/python scripts/soak.py --clients 100 --duration 600

What it does
* Starts the replay upstream (tests/e2e/harness/replay.py) in-process with a
  keep-alive closing behaviour (`--closing`: each | random:N | idle:S |
  mixed, default mixed: each upstream connection gets one of close after each
  answer, after 1..4 answers, after 50 ms idle — never with
  `connection: close`), and `citestream serve` ($CITESTREAM_BIN, else
  target/debug/citestream) in front of it: static search over the Lisbon
  sources, a plan that never runs out.
* `--clients` concurrent clients, each on its own kept-alive connection,
  send `web_search: true` chat requests, half streamed, until `--duration`
  seconds or `--max-requests` requests: `--hangup` (default 25%) of them hang
  up at a random point (right after sending, after the response head, or
  after a random number of body bytes), `--bad` (default 5%) send a body that
  is not JSON and must get a 400.
* Counts as failed: a request that does not hang up and gets another status
  than expected (200; 400 for broken JSON), a body that breaks off (a stream
  without its `[DONE]`, a short whole body), a connection error. An answer
  missing its sources: a 200 without `"sources"`.
* Measures the gateway's RSS and open file descriptors (/proc) after a
  warm-up and at the end, after the load stopped and the upstream pool's idle
  connections expired (`upstream.pool_idle_timeout` + 2 s).
* Prints one line per figure and, with `--json FILE`, writes them as JSON.
  Exits 1 when a request failed, an answer missed its sources, the RSS grew
  more than `--max-rss-growth-mib` (default 8) or open descriptors did not
  come back to their start value; else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from harness.procs import Serve  # noqa: E402
from harness.replay import ReplayServer, parse_closing, read_chunked  # noqa: E402

QUESTION = "Weather in Lisbon this weekend?"
POOL_IDLE = 4.0  # upstream.pool_idle_timeout's default


@dataclass
class Stats:
    requests: int = 0
    ok: int = 0
    bad_json: int = 0
    hangups: int = 0
    failed: int = 0
    missing_sources: int = 0
    failures: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def fail(self, why: str) -> None:
        self.failed += 1
        if len(self.failures) < 20:
            self.failures.append(why)


def proc_figures(pid: int) -> tuple[float, int]:
    """(RSS in MiB, open file descriptors) of process `pid`."""
    rss = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return await read_chunked(reader)
    return await reader.readexactly(int(headers.get("content-length", "0")))


def request_bytes(port: int, body: bytes) -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def client(n: int, port: int, args, stats: Stats, deadline: float) -> None:
    rng = random.Random(args.seed * 1000 + n)
    conn = None
    while time.monotonic() < deadline and stats.requests < args.max_requests:
        stats.requests += 1
        roll = rng.random()
        bad = roll < args.bad
        hangup = not bad and roll < args.bad + args.hangup
        stream = rng.random() < 0.5
        if bad:
            body = b'{"model":"replay:lisbon","web_search":true,"messages":[{"role":"user","content":'
        else:
            body = json.dumps({
                "model": f"replay:lisbon?seed={rng.randrange(1 << 30)}",
                "web_search": True,
                "stream": stream,
                "messages": [{"role": "user", "content": QUESTION}],
            }).encode()
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
            reader, writer = conn
            writer.write(request_bytes(port, body))
            await writer.drain()
            point = rng.random() if hangup else None
            if point is not None and point < 1 / 3:
                writer.close()
                conn = None
                stats.hangups += 1
                continue
            status, headers = await asyncio.wait_for(read_head(reader), 30)
            if point is not None:
                if point >= 2 / 3:
                    await asyncio.wait_for(reader.read(rng.randrange(1, 3000)), 30)
                writer.close()
                conn = None
                stats.hangups += 1
                continue
            data = await asyncio.wait_for(read_body(reader, headers), 60)
            stats.latencies.append(time.monotonic() - t0)
            want = 400 if bad else 200
            if status != want:
                stats.fail(f"status {status} (wanted {want}): {data[:200]!r}")
                continue
            if bad:
                stats.bad_json += 1
                continue
            if stream and not data.rstrip().endswith(b"data: [DONE]"):
                stats.fail(f"stream without [DONE]: ...{data[-200:]!r}")
                continue
            if b'"sources"' not in data:
                stats.missing_sources += 1
                continue
            stats.ok += 1
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError) as e:
            stats.fail(f"{type(e).__name__}: {e}")
            if conn is not None:
                conn[1].close()
            conn = None
    if conn is not None:
        conn[1].close()


def metric_values(text: str, prefix: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def load(port: int, args, stats: Stats, seconds: float, max_requests: int) -> None:
    deadline = time.monotonic() + seconds
    saved = args.max_requests
    args.max_requests = max_requests
    await asyncio.gather(*(client(i, port, args, stats, deadline) for i in range(args.clients)))
    args.max_requests = saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of load (after warm-up)")
    ap.add_argument("--max-requests", type=int, default=10_000_000)
    ap.add_argument("--closing", default="mixed", help="upstream keep-alive closing: each | random:N | idle:S | mixed")
    ap.add_argument("--hangup", type=float, default=0.25)
    ap.add_argument("--bad", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-rss-growth-mib", type=float, default=8.0)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    parse_closing(args.closing)

    replay = ReplayServer(closing=args.closing, seed=args.seed)
    replay.record = False
    replay.start()
    config = {
        "upstream": {"base_url": replay.url},
        "search": {"provider": "static", "static": {"path": str(ROOT / "examples" / "lisbon" / "sources.json")}},
        "plans": {"default": {"searches_per_day": 1_000_000_000}},
    }
    serve = Serve.start(config)
    pid = serve.proc.pid
    try:
        warm = Stats()
        asyncio.run(load(serve.port, args, warm, 3.0, 10 * args.clients))
        time.sleep(POOL_IDLE + 2)
        rss0, fds0 = proc_figures(pid)
        stats = Stats()
        t0 = time.monotonic()
        asyncio.run(load(serve.port, args, stats, args.duration, args.max_requests))
        took = time.monotonic() - t0
        rss_peak, fds_peak = proc_figures(pid)
        time.sleep(POOL_IDLE + 2)
        rss1, fds1 = proc_figures(pid)
        metrics = serve.metrics()
    finally:
        code = serve.stop()
        replay.stop()
    lat = sorted(stats.latencies) or [0.0]
    figures = {
        "clients": args.clients,
        "closing": args.closing,
        "seconds": round(took, 1),
        "requests": stats.requests,
        "requests_per_second": round(stats.requests / took, 1),
        "answered_with_sources": stats.ok,
        "bad_json_400": stats.bad_json,
        "hangups": stats.hangups,
        "failed": stats.failed + warm.failed,
        "missing_sources": stats.missing_sources + warm.missing_sources,
        "failures": (warm.failures + stats.failures)[:20],
        "p50_ms": round(lat[len(lat) // 2] * 1000, 1),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 1),
        "rss_mib_start": round(rss0, 1),
        "rss_mib_peak": round(rss_peak, 1),
        "rss_mib_end": round(rss1, 1),
        "fds_start": fds0,
        "fds_peak": fds_peak,
        "fds_end": fds1,
        "upstream_connections": replay.connections,
        "upstream_retries": metric_values(metrics, "citestream_upstream_retries_total{"),
        "upstream_errors": metric_values(metrics, "citestream_upstream_errors_total{"),
        "serve_exit": code,
    }
    for k, v in figures.items():
        print(f"{k}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    ok = (
        figures["failed"] == 0
        and figures["missing_sources"] == 0
        and rss1 - rss0 <= args.max_rss_growth_mib
        and fds1 <= fds0
        and code == 0
    )
    print("soak: OK" if ok else "soak: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Failover cost of `citestream serve`: a `[[routes]]` entry with two
endpoints, first both up, then one of them down (a port nothing listens
on), on loopback only, in one run.

    target/e2e-venv/bin/python scripts/failover.py [--requests 1000]

Each phase sends `--requests` sequential `web_search: true` chat requests
(whole answers) to the route; round robin makes every other request start at
the dead endpoint in the second phase, where the connect error (refused at
once on loopback) moves it to the live one. Prints, per phase, the
client-visible errors and p50/p99 of the request time, the p50/p99 of the
requests that failed over and of those that did not (interleaved in the
same phase, so under the same conditions), their difference, and the gateway's `citestream_upstream_retries_total{reason="connect"}`.
Exits 1 when a request failed.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from harness.procs import Serve  # noqa: E402
from harness.replay import ReplayServer  # noqa: E402


WARM = 10  # requests per phase not measured (even: the round robin stays aligned)


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * p))] * 1000, 2) if xs else 0.0


def phase(base_urls: list[str], n: int) -> dict:
    config = {
        "upstream": {"base_url": "http://127.0.0.1:9"},
        "routes": [{"model": "replay:*", "base_urls": base_urls}],
        "search": {"provider": "static", "static": {"path": str(ROOT / "examples" / "lisbon" / "sources.json")}},
        "plans": {"default": {"searches_per_day": 1_000_000}},
    }
    serve = Serve.start(config)
    body = json.dumps({"model": "replay:lisbon", "web_search": True,
                       "messages": [{"role": "user", "content": "Weather in Lisbon?"}]}).encode()
    times, errors = [], 0
    try:
        for i in range(WARM + n):
            req = urllib.request.Request(serve.url + "/v1/chat/completions", body,
                                         {"content-type": "application/json"})
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    data = r.read()
                    if r.status != 200 or b'"sources"' not in data:
                        errors += 1
            except OSError:
                errors += 1
            if i >= WARM:
                times.append(time.perf_counter() - t0)
        metrics = serve.metrics()
    finally:
        serve.stop()
    connect = next((float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                    if line.startswith('citestream_upstream_retries_total{reason="connect"}')), 0.0)
    return {"times": times, "errors": errors, "connect_retries": connect}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    args = ap.parse_args(argv)
    a, b = ReplayServer().start(), ReplayServer().start()
    try:
        up = phase([a.url, b.url], args.requests)
        down = phase([dead_url(), a.url], args.requests)
    finally:
        a.stop()
        b.stop()
    # Round robin from 0: the even requests started at the dead endpoint.
    failed_over = down["times"][0::2]
    direct = down["times"][1::2]
    out = {
        "requests_per_phase": args.requests,
        "both_up": {"errors": up["errors"], "p50_ms": pct(up["times"], 0.5), "p99_ms": pct(up["times"], 0.99)},
        "one_down": {"errors": down["errors"], "p50_ms": pct(down["times"], 0.5), "p99_ms": pct(down["times"], 0.99),
                     "connect_retries": down["connect_retries"]},
        "failed_over": {"p50_ms": pct(failed_over, 0.5), "p99_ms": pct(failed_over, 0.99)},
        "direct_in_one_down": {"p50_ms": pct(direct, 0.5), "p99_ms": pct(direct, 0.99)},
    }
    # Interleaved in one phase, so under the same conditions.
    out["failover_added_ms"] = {
        "p50": round(out["failed_over"]["p50_ms"] - out["direct_in_one_down"]["p50_ms"], 2),
        "p99": round(out["failed_over"]["p99_ms"] - out["direct_in_one_down"]["p99_ms"], 2),
    }
    print(json.dumps(out, indent=2))
    return 0 if up["errors"] == 0 and down["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""Numbers of the search cache and the Redis Cluster quota (docs/gateway.md).

Loopback only, bounded (about a minute):
1. time to the first byte of a grounded streamed request with a 300 ms
   `http` search provider, cache miss (a new question each time) vs hit
   (one question again), p50/p99 over 30 requests each;
2. provider calls saved on a replayed mix of 1,000 questions, 30% of them
   repeats of earlier ones (random order, seed 7);
3. the quota round trip (reserve + commit) on one redis-server and on a
   local Redis Cluster, 1 and 100 concurrent (crates/host/examples/quota_rtt.rs).

    cargo build -p citestream-cli && cargo build -p citestream-host --example quota_rtt
    cd tests/e2e && CITESTREAM_BIN=$PWD/../../target/debug/citestream \\
        ../../target/e2e-venv/bin/python bench_cache.py
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.cluster import RedisCluster  # noqa: E402
from harness.procs import ROOT, RedisServer, Serve  # noqa: E402
from harness.replay import ReplayServer  # noqa: E402
from harness.search import SearchBackend  # noqa: E402

FIXTURE = "openai_gpt4o_text_usage_chunk"
RESULTS = [{"link": "https://en.wikipedia.org/wiki/Lisbon", "title": "Lisbon", "snippet": "Lisbon is the capital."}]


def ttfb(client: httpx.Client, url: str, question: str) -> float:
    body = {"model": f"replay:{FIXTURE}", "web_search": True, "stream": True,
            "messages": [{"role": "user", "content": question}]}
    t0 = time.perf_counter()
    with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["x-citestream-search"] == "injected", r.headers
        chunks = r.iter_raw()
        next(chunks)
        took = time.perf_counter() - t0
        for _ in chunks:
            pass
    return took * 1e3


def p(values, q):
    values = sorted(values)
    return values[round((len(values) - 1) * q)]


def main() -> None:
    replay = ReplayServer().start()
    backend = SearchBackend(RESULTS, delay=0.3).start()
    cfg = {"upstream": {"base_url": replay.url},
           "search": {"provider": "http", "http": {"url": backend.url + "/search"}, "cache_ttl": "600s"},
           "plans": {"default": {"searches_per_day": 100000}}, "quota": {"store": "memory"}}
    gw = Serve.start(cfg)
    try:
        with httpx.Client(timeout=30) as c:
            miss = [ttfb(c, gw.url, f"question number {i}") for i in range(30)]
            ttfb(c, gw.url, "the repeated question")
            hit = [ttfb(c, gw.url, "The  repeated QUESTION") for _ in range(30)]
        print(f"ttfb, 300 ms provider: miss p50 {p(miss, .5):.1f} ms p99 {p(miss, .99):.1f} ms; "
              f"hit p50 {p(hit, .5):.1f} ms p99 {p(hit, .99):.1f} ms")
        backend.delay = 0
        rng = random.Random(7)
        asked, mix = [], []
        for i in range(1000):
            if asked and rng.random() < 0.3:
                mix.append(rng.choice(asked))
            else:
                q = f"mix question {i}"
                asked.append(q)
                mix.append(q)
        before = len(backend.queries())
        with httpx.Client(timeout=30) as c:
            for q in mix:
                body = {"model": f"replay:{FIXTURE}", "web_search": True,
                        "messages": [{"role": "user", "content": q}]}
                assert c.post(gw.url + "/v1/chat/completions", json=body).status_code == 200
        calls = len(backend.queries()) - before
        print(f"1,000 questions, {1000 - len(asked)} repeats: {calls} provider calls, {1000 - calls} saved")
    finally:
        gw.stop()
        backend.stop()
        replay.stop()
    exe = ROOT / "target" / "debug" / "examples" / "quota_rtt"
    single = RedisServer.start()
    try:
        print(subprocess.run([str(exe), single.url], check=True, capture_output=True, text=True).stdout, end="")
    finally:
        single.stop()
    cluster = RedisCluster.start()
    try:
        print(subprocess.run([str(exe), "--cluster", *cluster.seeds], check=True, capture_output=True,
                             text=True).stdout, end="")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()

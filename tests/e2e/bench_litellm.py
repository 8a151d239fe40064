"""Benchmark: the citestream callback's per-chunk cost inside LiteLLM,
against LiteLLM's own per-chunk streaming cost for the same stream without
the callback, in the same run (ratios only; no absolute time is asserted).

Two measurements:

1. In-process, per chunk: LiteLLM's own serialization of a chunk for the
   wire (`proxy_server._serialize_streaming_chunk`, what the proxy does to
   every chunk) vs the callback's work on the same chunk
   (`citestream.litellm.rewrite_chunk`: `model_dump_json` → rewriter →
   objects), over the chunk objects of a long recorded stream.
2. End to end: two real LiteLLM proxies (with / without the callback) in
   front of the loopback replay upstream, a long stream (the Lisbon answer
   repeated to ~2,000 chunks), read raw by httpx; the time from the first
   byte to the end divided by the number of chunks, median of R
   interleaved runs.

Run (after the e2e venv and the package are built, e.g. by scripts/test.sh):

    cd tests/e2e && ../../target/e2e-venv/bin/python bench_litellm.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from harness import pyext  # noqa: E402
from harness.litellm_proxy import MASTER_KEY, LiteLLMProxy  # noqa: E402
from harness.replay import EXAMPLES, ReplayServer  # noqa: E402

LISBON = EXAMPLES / "lisbon"
SOURCES = LISBON / "sources.json"


def long_stream(repeat: int) -> bytes:
    events = [e for e in (LISBON / "upstream.sse").read_bytes().split(b"\n\n") if e.strip()]
    content = [e for e in events if b'"content":"' in e and b'"finish_reason":null' in e]
    first, rest = events[0], [e for e in events[1:] if e not in content]
    body = [first] + content * repeat + rest
    return b"\n\n".join(body) + b"\n\n"


def in_process(data: bytes, rounds: int) -> tuple[float, float, int]:
    import citestream
    from citestream.litellm import rewrite_chunk
    from litellm.proxy.proxy_server import _serialize_streaming_chunk
    from litellm.types.utils import ModelResponseStream

    objs = [ModelResponseStream(**json.loads(e[6:])) for e in data.split(b"\n\n") if e.startswith(b"data: {")]
    base, ours = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        for o in objs:
            _serialize_streaming_chunk(o)
        base.append(time.perf_counter() - t)
        rw = citestream.ChatRewriter(SOURCES.read_bytes())
        t = time.perf_counter()
        for o in objs:
            rewrite_chunk(rw, o)
        rw.finish()
        ours.append(time.perf_counter() - t)
    n = len(objs)
    return statistics.median(base) / n, statistics.median(ours) / n, n


def one_stream(url: str, web_search: bool) -> tuple[float, int]:
    import httpx

    body = {"model": "lisbon-long", "stream": True, "messages": [{"role": "user", "content": "Lisbon weather?"}]}
    if web_search:
        body["web_search"] = True
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120,
                      headers={"authorization": f"Bearer {MASTER_KEY}"}) as r:
        r.raise_for_status()
        t0, n, buf = None, 0, b""
        for piece in r.iter_raw():
            if t0 is None:
                t0 = time.perf_counter()
            buf += piece
        end = time.perf_counter()
    n = buf.count(b"\n\ndata: ") + 1
    assert (b'"sources"' in buf) == web_search
    return end - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=60)
    args = ap.parse_args()
    os.environ["CITESTREAM_PYEXT_PREBUILT"] = os.environ.get("CITESTREAM_PYEXT_PREBUILT", "1")
    pyext.build()
    data = long_stream(args.repeat)

    base, ours, n = in_process(data, args.runs)
    print(f"in-process, {n} chunks: litellm serialize {base * 1e6:.1f} us/chunk, "
          f"callback rewrite_chunk {ours * 1e6:.1f} us/chunk, ratio {ours / base:.2f}")

    replay = ReplayServer().start()
    replay.register("lisbon-long", sse=data)
    tmp = Path(tempfile.mkdtemp(prefix="bench-litellm-"))
    cfg = {"search": {"provider": "static", "static": {"path": str(SOURCES)}},
           "plans": {"default": {"searches_per_day": 100000}}}
    with_cb = LiteLLMProxy.start(tmp / "with", replay.url, cfg, callback=True)
    without = LiteLLMProxy.start(tmp / "without", replay.url, None, callback=False)
    try:
        one_stream(with_cb.url, True), one_stream(without.url, False)  # warm up
        a, b = [], []
        for _ in range(args.runs):
            t, n1 = one_stream(without.url, False)
            a.append(t / n1)
            t, n2 = one_stream(with_cb.url, True)
            b.append(t / n2)
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"through the proxy, ~{n1} chunks/stream, median of {args.runs}: without callback "
              f"{ma * 1e6:.1f} us/chunk, with callback {mb * 1e6:.1f} us/chunk, "
              f"added {100 * (mb / ma - 1):+.1f}%")
    finally:
        with_cb.stop()
        without.stop()
        replay.stop()


if __name__ == "__main__":
    main()

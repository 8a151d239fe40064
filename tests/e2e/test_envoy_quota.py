"""Daily search quota shared by two `citestream ext-proc` instances on one
real redis-server (docs/reference/request.md, "Quota"; docs/envoy.md).

Two Envoys (one per body mode), each with its own processor; both
processors on the same Redis store, a plan of 12 searches a day. 30
concurrent grounded requests, alternating between the Envoys: exactly 12
are injected (the upstream saw sources in exactly those), 18 are answered
without sources (`quota-exhausted`, the upstream bytes unchanged), and
both processors agree afterwards.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.checks import SOURCES, client_body, raw_post
from harness.envoy import FULL_DUPLEX, STREAMED, Envoy, ExtProc
from harness.procs import citestream_rewrite

FIXTURE = "openai_gpt4o_text_usage_chunk"
CHAT = "/v1/chat/completions"
LIMIT = 12


@pytest.fixture
def stack(replay_server, redis_server, tmp_json):
    sources = tmp_json(SOURCES, "sources.json")
    cfg = {"search": {"provider": "static", "static": {"path": str(sources)}},
           "plans": {"default": {"searches_per_day": LIMIT}},
           "quota": {"store": "redis", "redis_url": redis_server.url}}
    started = []
    try:
        procs = [ExtProc.start(cfg), ExtProc.start(cfg)]
        started += procs
        envoys = [Envoy.start(processor=p.port, upstream=replay_server.port, mode=m)
                  for p, m in zip(procs, [STREAMED, FULL_DUPLEX])]
        started += envoys
        yield envoys, sources
    finally:
        for p in reversed(started):
            p.stop()


def test_two_processors_share_the_count_on_one_redis(stack, replay):
    envoys, sources = stack

    def grounded(i):
        body, _ = client_body(CHAT, f"replay:{FIXTURE}?delay=0.2&seed={i}", True)
        return raw_post(envoys[i % 2].url + CHAT, body)

    with ThreadPoolExecutor(30) as pool:
        results = list(pool.map(grounded, range(30)))
    assert all(status == 200 for status, _, _ in results), [r[2][:200] for r in results]
    outcomes = [h["x-citestream-search"] for _, h, _ in results]
    assert outcomes.count("injected") == LIMIT and outcomes.count("quota-exhausted") == 30 - LIMIT, outcomes
    for _, h, _ in results:
        assert int(h["x-citestream-searches-remaining"]) in range(LIMIT)
    upstream_body, _ = replay.body(FIXTURE, True, CHAT)
    rewritten = citestream_rewrite(upstream_body, sources)
    for _, h, data in results:
        assert data == (rewritten if h["x-citestream-search"] == "injected" else upstream_body)
    log = replay.wait_for(lambda log: len(log) == 30 and all(ex.done for ex in log))
    injected = [ex for ex in log if SOURCES[0]["url"] in ex.body.decode()]
    assert len(injected) == LIMIT
    assert all("web_search" not in ex.json() for ex in log)
    for e in envoys:
        status, h, _ = raw_post(e.url + CHAT, client_body(CHAT, f"replay:{FIXTURE}", True)[0])
        assert status == 200 and h["x-citestream-search"] == "quota-exhausted"
        assert h["x-citestream-searches-remaining"] == "0"

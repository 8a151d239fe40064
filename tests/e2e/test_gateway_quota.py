"""Daily search quota through `citestream serve` (docs/reference/request.md, "Quota"; docs/gateway.md).

* A plan of 3 searches/day: the 4th grounded request is a 200 without sources
  and `x-citestream-search: quota-exhausted`; the upstream got the request
  stripped but not injected, and the client got the upstream bytes unchanged.
* The count restarts at 00:00 UTC: the gateway's own clock is moved across
  midnight from outside with libfaketime (an LD_PRELOAD library from Debian's
  `faketime` package that the operator-visible process runs under; the
  gateway has no test-only switch). The faked time is read from a file the
  test rewrites; the monotonic clock (timers) is left alone.
* Two `serve` processes on one real redis-server share the count exactly
  under 50 concurrent requests; the Redis keys expire.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from harness.checks import SOURCES, client_body, raw_post
from harness.procs import faketime_env
from harness.replay import FIXTURES

FIXTURE = "openai_gpt4o_text_usage_chunk"
CHAT = "/v1/chat/completions"


def config(replay, sources_path, per_day, **quota):
    return {
        "upstream": {"base_url": replay.url},
        "search": {"provider": "static", "static": {"path": str(sources_path)}},
        "plans": {"default": {"searches_per_day": per_day}},
        "quota": quota or {"store": "memory"},
    }


@pytest.fixture
def sources_path(tmp_json):
    return tmp_json(SOURCES, "sources.json")


def grounded(gw, model=f"replay:{FIXTURE}", stream=True):
    body, _ = client_body(CHAT, model, stream)
    return raw_post(gw.url + CHAT, body)


def test_fourth_search_of_the_day_is_answered_without_sources(serve, replay, sources_path):
    gw = serve(config(replay, sources_path, 3))
    remaining = []
    for _ in range(3):
        status, headers, _ = grounded(gw)
        assert status == 200 and headers["x-citestream-search"] == "injected"
        remaining.append(int(headers["x-citestream-searches-remaining"]))
    assert remaining == [2, 1, 0]
    replay.clear()
    status, headers, data = grounded(gw)
    assert status == 200
    assert headers["x-citestream-search"] == "quota-exhausted"
    assert headers["x-citestream-searches-remaining"] == "0"
    assert data == (FIXTURES / f"{FIXTURE}.sse").read_bytes()  # no sources added anywhere
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    sent = json.loads(client_body(CHAT, f"replay:{FIXTURE}", True)[0])
    del sent["web_search"]
    assert ex.json() == sent  # stripped, nothing injected
    # A request without web_search is not counted and says so.
    body = client_body(CHAT, f"replay:{FIXTURE}", False)[0].replace(b'"web_search" : true,', b"")
    status, headers, _ = raw_post(gw.url + CHAT, body)
    assert status == 200 and headers["x-citestream-search"] == "not-requested"
    assert "x-citestream-searches-remaining" not in headers


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_count_restarts_at_utc_midnight(serve, replay, sources_path, tmp_path, request, store):
    # A day in the future (as in tests/quota_redis.rs): the Redis store's
    # keys expire at the end of the gateway's (fake) day, and redis-server
    # runs on the real clock, so a past day's keys would expire at once.
    clock = tmp_path / "clock"
    clock.write_text("2099-12-31 23:59:58\n")
    quota = {"store": "memory"}
    if store == "redis":
        quota = {"store": "redis", "redis_url": request.getfixturevalue("redis_server").url}
    gw = serve(config(replay, sources_path, 3, **quota), env=faketime_env(clock))
    for _ in range(3):
        assert grounded(gw)[1]["x-citestream-search"] == "injected"
    assert grounded(gw)[1]["x-citestream-search"] == "quota-exhausted"
    clock.write_text("2099-12-31 23:59:59\n")
    assert grounded(gw)[1]["x-citestream-search"] == "quota-exhausted"
    clock.write_text("2100-01-01 00:00:01\n")
    status, headers, _ = grounded(gw)
    assert status == 200 and headers["x-citestream-search"] == "injected"
    assert headers["x-citestream-searches-remaining"] == "2"


def test_two_replicas_share_the_count_under_50_concurrent_requests(serve, replay, sources_path, redis_server):
    cfg = config(replay, sources_path, 20, store="redis", redis_url=redis_server.url)
    gateways = [serve(cfg), serve(cfg)]
    # The upstream waits a little before answering so that the requests overlap.
    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(lambda i: grounded(gateways[i % 2], f"replay:{FIXTURE}?delay=0.2"), range(50)))
    outcomes = [headers["x-citestream-search"] for _, headers, _ in results]
    assert all(status == 200 for status, _, _ in results)
    assert outcomes.count("injected") == 20 and outcomes.count("quota-exhausted") == 30, outcomes
    injected_remaining = sorted(int(h["x-citestream-searches-remaining"]) for _, h, _ in results
                                if h["x-citestream-search"] == "injected")
    assert injected_remaining[0] == 0 and injected_remaining[-1] < 20, injected_remaining
    # Both replicas agree afterwards, and the store's keys expire after their day.
    for gw in gateways:
        assert grounded(gw)[1]["x-citestream-search"] == "quota-exhausted"
    r = redis.Redis.from_url(redis_server.url)
    keys = r.keys("*")
    assert keys, "nothing stored in redis"
    for key in keys:
        assert 0 < r.ttl(key) <= 2 * 86400, (key, r.ttl(key))


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_failed_upstream_answers_cost_no_search(serve, replay, sources_path, request, store):
    """An upstream error status (500, 502, 429) or an unreachable upstream
    gives the reserved search back; a 200 uses it."""
    quota = {"store": "memory"}
    if store == "redis":
        quota = {"store": "redis", "redis_url": request.getfixturevalue("redis_server").url}
    gw = serve(config(replay, sources_path, 3, **quota))
    for status in (500, 502, 429):
        got, headers, _ = grounded(gw, model=f"replay:{FIXTURE}?status={status}")
        assert got == status and headers["x-citestream-search"] == "injected"
        assert headers["x-citestream-searches-remaining"] == "3", (status, headers)
    got, headers, _ = grounded(gw)
    assert got == 200 and headers["x-citestream-searches-remaining"] == "2"
    down = serve({**config(replay, sources_path, 3, **quota),
                  "upstream": {"base_url": "http://127.0.0.1:9", "connect_timeout": "2s"}})
    got, headers, data = grounded(down)
    assert got == 502 and "127.0.0.1:9" not in data.decode(), data
    assert headers["x-citestream-searches-remaining"] == ("2" if store == "redis" else "3")

"""The search cache through `citestream serve` (docs/search.md, "Search cache").

A loopback `http` search provider (harness/search.py) counts its calls:
* two replicas on one redis-server share the cache: the second replica's
  identical question (other case, other spacing) makes no provider call,
  and still counts one search for the quota;
* an entry expires after `search.cache_ttl`;
* a failed search and one that found nothing are never cached;
* 50 concurrent identical questions to one process make one provider call
  (single flight), with the memory store and with the Redis store;
* `/metrics` counts hits and misses.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.checks import raw_post
from harness.search import SearchBackend

FIXTURE = "openai_gpt4o_text_usage_chunk"
CHAT = "/v1/chat/completions"
RESULTS = [
    {"link": "https://en.wikipedia.org/wiki/Lisbon", "title": "Lisbon", "snippet": "Lisbon is the capital of Portugal."},
    {"link": "https://facts.example/portugal", "title": "Portugal facts", "snippet": "Portugal's capital is Lisbon."},
]


@pytest.fixture
def backend():
    b = SearchBackend(RESULTS).start()
    yield b
    b.stop()


def config(replay, backend, quota, ttl="60s", per_day=1000):
    return {
        "upstream": {"base_url": replay.url},
        "search": {"provider": "http", "http": {"url": backend.url + "/search"}, "cache_ttl": ttl},
        "plans": {"default": {"searches_per_day": per_day}},
        "quota": quota,
    }


def quota_of(request, store) -> dict:
    """`[quota]` of the memory store, or of a fresh redis-server."""
    if store == "memory":
        return {"store": "memory"}
    return {"store": "redis", "redis_url": request.getfixturevalue("redis_server").url}


def ask(gw, question, model=f"replay:{FIXTURE}"):
    body = json.dumps({"model": model, "web_search": True, "stream": True,
                       "messages": [{"role": "user", "content": question}]}).encode()
    status, headers, _ = raw_post(gw.url + CHAT, body)
    assert status == 200, (status, headers)
    return headers


def cache_counts(gw) -> dict:
    text = gw.metrics()
    found = dict(re.findall(r'^citestream_search_cache_total\{result="(hit|miss)"\} (\d+)$', text, re.M))
    return {k: int(v) for k, v in found.items()}


def test_two_replicas_on_one_redis_share_the_cache(serve, replay, backend, redis_server):
    cfg = config(replay, backend, {"store": "redis", "redis_url": redis_server.url}, per_day=10)
    a, b = serve(cfg), serve(cfg)
    h = ask(a, "What is the capital of Portugal?")
    assert h["x-citestream-search"] == "injected"
    assert h["x-citestream-searches-remaining"] == "9"
    assert len(backend.queries()) == 1
    # The other replica, the same question with other case and spacing.
    h = ask(b, "  what is THE capital\tof   portugal? ")
    assert h["x-citestream-search"] == "injected"
    assert len(backend.queries()) == 1, "the second replica asked the provider"
    # A cached search is a search like any other for the quota.
    assert h["x-citestream-searches-remaining"] == "8"
    assert cache_counts(a) == {"hit": 0, "miss": 1}
    assert cache_counts(b) == {"hit": 1, "miss": 0}
    # The upstream got the same sources both times.
    exchanges = replay.wait_for(lambda log: len(log) == 2 and all(x.done for x in log))
    bodies = [json.dumps(x.json()["messages"]) for x in exchanges]
    assert all("https://en.wikipedia.org/wiki/Lisbon" in m for m in bodies)
    # Another question is another entry.
    ask(b, "What is the capital of Spain?")
    assert len(backend.queries()) == 2


def test_an_entry_expires_after_the_ttl(serve, replay, backend):
    gw = serve(config(replay, backend, {"store": "memory"}, ttl="1s"))
    ask(gw, "capital of Portugal")
    ask(gw, "capital of Portugal")
    assert len(backend.queries()) == 1
    time.sleep(1.3)
    ask(gw, "capital of Portugal")
    assert len(backend.queries()) == 2
    assert cache_counts(gw) == {"hit": 1, "miss": 2}


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_failures_and_empty_answers_are_not_cached(serve, replay, backend, request, store):
    quota = quota_of(request, store)
    gw = serve(config(replay, backend, quota))
    backend.status = 500
    for _ in range(2):
        assert ask(gw, "capital of Portugal")["x-citestream-search"] == "failed"
    assert len(backend.queries()) == 2
    backend.status, backend.results = 200, []
    for _ in range(2):
        assert ask(gw, "capital of Portugal")["x-citestream-search"] == "nothing-found"
    assert len(backend.queries()) == 4
    backend.results = RESULTS
    for _ in range(2):
        assert ask(gw, "capital of Portugal")["x-citestream-search"] == "injected"
    assert len(backend.queries()) == 5
    assert cache_counts(gw) == {"hit": 1, "miss": 5}


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_fifty_concurrent_identical_questions_search_once(serve, replay, backend, request, store):
    quota = quota_of(request, store)
    gw = serve(config(replay, backend, quota))
    backend.delay = 0.5  # every question arrives while the first search runs
    with ThreadPoolExecutor(50) as pool:
        outcomes = list(pool.map(lambda _: ask(gw, "capital of Portugal")["x-citestream-search"], range(50)))
    assert outcomes == ["injected"] * 50
    assert len(backend.queries()) == 1
    assert cache_counts(gw) == {"hit": 49, "miss": 1}


def test_the_cache_is_off_by_default(serve, replay, backend):
    cfg = config(replay, backend, {"store": "memory"})
    del cfg["search"]["cache_ttl"]
    gw = serve(cfg)
    ask(gw, "capital of Portugal")
    ask(gw, "capital of Portugal")
    assert len(backend.queries()) == 2
    assert cache_counts(gw) == {"hit": 0, "miss": 0}

"""The search's own HTTP client resends through `citestream serve`, counted
in `/metrics` (docs/gateway.md, "Watching it": `citestream_search_retries_total`).

A remote search provider (the `http` provider's loopback backend) and a
query model (`search.query = "model"`, the replay upstream answering as an
OpenAI-compatible model) that both close a kept-alive connection when its
next request arrives, unanswered: the client learns of the close only once
its request is out, the keep-alive race on every reused connection. Every
grounded request still gets its search and its sources; each request
closed under is sent once more on a fresh connection and counted with its
`target` label; the model upstream's `citestream_upstream_retries_total`
stays at 0 (the upstream here keeps its connections).
"""

from __future__ import annotations

import re

from harness.checks import client_body, raw_post
from harness.replay import ReplayServer
from harness.search import SearchBackend
from test_gateway_reload import hup

FIXTURE = "openai_gpt4o_text_usage_chunk"
CHAT = "/v1/chat/completions"
LISBON = [{"link": "https://en.wikipedia.org/wiki/Lisbon", "title": "Lisbon",
           "snippet": "Lisbon is the capital of Portugal."}]


def metric(text: str, series: str) -> float:
    m = re.search(r"^" + re.escape(series) + r" (\S+)$", text, re.M)
    assert m, f"{series} not in /metrics:\n{text}"
    return float(m.group(1))


def search_retries(gw, target: str) -> float:
    return metric(gw.metrics(), f'citestream_search_retries_total{{target="{target}",reason="stale_connection"}}')


def test_provider_and_query_model_resends_are_counted_by_target(serve, replay):
    backend = SearchBackend(LISBON, close_under=True).start()
    model = ReplayServer(closing="under").start()
    try:
        gw = serve({
            "upstream": {"base_url": replay.url},
            "search": {"provider": "http", "http": {"url": backend.url + "/search"}, "query": "model",
                       "query_model": {"base_url": model.url, "model": f"replay:{FIXTURE}"}},
        })
        assert search_retries(gw, "provider") == 0 and search_retries(gw, "query_model") == 0
        for i in range(4):
            body, _ = client_body(CHAT, f"replay:{FIXTURE}", True)
            status, headers, data = raw_post(gw.url + CHAT, body)
            assert status == 200 and headers["x-citestream-search"] == "injected", (i, headers, data[:300])
            assert b"en.wikipedia.org/wiki/Lisbon" in data, i
        # Requests 2 and 4 found the connection the one before had used,
        # closed under them; each was sent again once, on a new connection.
        assert len([q for q in backend.queries() if q.answered]) == 4
        assert backend.closed_under >= 1 and model.closed_under >= 1
        assert search_retries(gw, "provider") == backend.closed_under
        assert search_retries(gw, "query_model") == model.closed_under
        text = gw.metrics()
        assert metric(text, 'citestream_upstream_retries_total{reason="stale_connection"}') == 0
        assert metric(text, 'citestream_searches_total{result="found"}') == 4
    finally:
        model.stop()
        backend.stop()


def test_the_counts_survive_a_reload(serve, replay):
    """One count per process: a reloaded config's new provider client adds
    to the same series."""
    backend = SearchBackend(LISBON, close_under=True).start()
    try:
        cfg = {"upstream": {"base_url": replay.url},
               "search": {"provider": "http", "http": {"url": backend.url + "/search"}}}
        gw = serve(cfg)
        for _ in range(2):
            body, _ = client_body(CHAT, f"replay:{FIXTURE}", True)
            assert raw_post(gw.url + CHAT, body)[1]["x-citestream-search"] == "injected"
        before = search_retries(gw, "provider")
        assert before == backend.closed_under >= 1
        hup(gw)  # the same file: a new Search, a new provider client
        for _ in range(2):
            body, _ = client_body(CHAT, f"replay:{FIXTURE}", True)
            assert raw_post(gw.url + CHAT, body)[1]["x-citestream-search"] == "injected"
        assert search_retries(gw, "provider") == backend.closed_under > before
    finally:
        backend.stop()

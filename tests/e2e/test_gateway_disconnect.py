"""A client that hangs up cancels everything at once (docs/gateway.md).

For each phase the client closes its connection at a chosen moment, and the
component behind the gateway observes the cancelled connection:
* during the search (`http` provider pointing at a slow loopback search
  backend): the search backend sees the gateway hang up, the upstream is
  never called, and the reservation is released: the day's count is as
  before (memory store and the real Redis store — released at once, not
  after a lease);
* while waiting for the upstream's headers (the replay upstream delays
  them): the replay upstream sees the connection closed before it answered;
* mid-stream (the replay upstream writes slowly): the replay upstream sees
  the connection closed before the end of the body.
In the last two phases the search had finished with results, so it counts
(docs/reference/request.md, "Quota": a search that found results uses one), exactly once.
After each, the gateway keeps serving.
"""

from __future__ import annotations

import pytest

from harness.checks import SOURCES, client_body, open_post, raw_post
from harness.search import SearchBackend

CHAT = "/v1/chat/completions"
LONG = "openai_gpt41nano_text_usage"
RESULTS = [{"link": s["url"], "title": s["title"], "snippet": s["text"]} for s in SOURCES]


def _config(replay, search: dict, quota: dict) -> dict:
    return {"upstream": {"base_url": replay.url}, "search": search,
            "plans": {"default": {"searches_per_day": 10}}, "quota": quota}


def _remaining(gw, model=f"replay:{LONG}") -> int:
    status, headers, _ = raw_post(gw.url + CHAT, client_body(CHAT, model, True)[0])
    assert status == 200 and headers["x-citestream-search"] == "injected", headers
    return int(headers["x-citestream-searches-remaining"])


@pytest.fixture
def backend():
    b = SearchBackend(RESULTS, delay=60).start()
    yield b
    b.stop()


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_disconnect_during_search_cancels_it_and_releases_the_reservation(serve, replay, backend, request, store):
    quota = {"store": "memory"}
    if store == "redis":
        quota = {"store": "redis", "redis_url": request.getfixturevalue("redis_server").url}
    gw = serve(_config(replay, {"provider": "http", "timeout": "120s", "http": {"url": backend.url + "/search"}},
                       quota))
    sock = open_post(gw.port, CHAT, client_body(CHAT, f"replay:{LONG}", True)[0])
    backend.wait_for(lambda qs: len(qs) == 1)
    sock.close()
    (q,) = backend.wait_for(lambda qs: qs[0].client_disconnected, timeout=10)
    assert not q.answered
    assert replay.exchanges() == [], "the upstream was called for a cancelled request"
    backend.delay = 0
    # 10 a day, none used by the cancelled request: this one leaves 9.
    assert _remaining(gw) == 9


@pytest.fixture
def static_gateway(serve, replay, tmp_json):
    return serve(_config(replay, {"provider": "static", "static": {"path": str(tmp_json(SOURCES))}},
                         {"store": "memory"}))


def test_disconnect_waiting_for_upstream_headers_cancels_the_upstream(static_gateway, replay):
    gw = static_gateway
    sock = open_post(gw.port, CHAT, client_body(CHAT, f"replay:{LONG}?delay=60", True)[0])
    replay.wait_for(lambda log: len(log) == 1)
    sock.close()
    (ex,) = replay.wait_for(lambda log: log[0].done, timeout=10)
    assert ex.client_disconnected and ex.disconnect_phase == "before-headers"
    # The client left before the upstream's headers: its reserved search
    # is given back, so this one leaves 9 of 10.
    assert _remaining(gw) == 9


def test_disconnect_mid_stream_cancels_the_upstream(static_gateway, replay):
    gw = static_gateway
    sock = open_post(gw.port, CHAT, client_body(CHAT, f"replay:{LONG}?gap=0.05&piece=100", True)[0])
    got = b""
    while b"data:" not in got:
        chunk = sock.recv(4096)
        assert chunk, "gateway closed the stream"
        got += chunk
    assert got.startswith(b"HTTP/1.1 200")
    sock.close()
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done, timeout=10)
    assert ex.client_disconnected and ex.disconnect_phase == "body" and not ex.completed
    assert _remaining(gw) == 8  # the upstream had answered 200: the search counts, once

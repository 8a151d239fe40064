"""`citestream ext-proc` traces behind a real Envoy, received by a loopback
OTLP/HTTP collector (harness/otlp.py, the official protobuf types).

* A grounded streamed request through Envoy, its client sending a
  `traceparent`, is one trace continuing it: `request` (a server span, the
  client's span its parent, the status recorded) and its children `auth`,
  `quota.reserve`, `search`, `upstream`, `response`, with `quota.commit`
  under `response`; the model server (the replay upstream) got a
  `traceparent` naming the `upstream` span, which has the time to the
  response head and to the first body byte.
* With the collector down, requests through Envoy are answered as usual.
"""

from __future__ import annotations

import socket

import pytest

from harness.checks import SOURCES, client_body, raw_post
from harness.envoy import STREAMED, Envoy, ExtProc
from harness.otlp import Collector, attr, hex_id

FIXTURE = "openai_gpt4o_text_usage_chunk"
CHAT = "/v1/chat/completions"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


@pytest.fixture
def collector():
    c = Collector.start()
    yield c
    c.stop()


def start(replay_server, tmp_json, otlp: str):
    sources = tmp_json(SOURCES, "sources.json")
    cfg = {"search": {"provider": "static", "static": {"path": str(sources)}},
           "log": {"otlp_endpoint": otlp}}
    proc = ExtProc.start(cfg)
    try:
        envoy = Envoy.start(processor=proc.port, upstream=replay_server.port, mode=STREAMED)
    except BaseException:
        proc.stop()
        raise
    return proc, envoy


def test_a_request_through_envoy_is_one_trace_continuing_the_clients(replay_server, replay, tmp_json,
                                                                      collector):
    proc, envoy = start(replay_server, tmp_json, collector.endpoint)
    try:
        body, _ = client_body(CHAT, f"replay:{FIXTURE}", True)
        status, headers, _ = raw_post(envoy.url + CHAT, body,
                                      headers={"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"})
        assert status == 200 and headers["x-citestream-search"] == "injected"
        sent = replay.wait_for(lambda xs: len(xs) >= 1)[-1]
    finally:
        envoy.stop()
        assert proc.stop() == 0  # SIGTERM flushes the last spans
    names = {"request", "auth", "quota.reserve", "search", "upstream", "response", "quota.commit"}
    spans = collector.wait_for(lambda ss: names <= {s.name for s in ss})
    by = {s.name: s for s in spans}
    assert names <= set(by), sorted(by)
    assert "quota.release" not in by
    request = by["request"]
    for s in spans:
        assert hex_id(s.trace_id) == TRACE_ID, s.name
    assert hex_id(request.parent_span_id) == CLIENT_SPAN
    assert request.kind == 2  # SPAN_KIND_SERVER
    assert attr(request, "http.response.status_code") == 200
    assert attr(request, "citestream.search") == "injected"
    assert attr(request, "url.path") == CHAT
    for n in ("auth", "quota.reserve", "search", "upstream", "response"):
        assert by[n].parent_span_id == request.span_id, f"{n} is not a child of request"
    assert by["quota.commit"].parent_span_id == by["response"].span_id
    assert attr(by["search"], "citestream.provider") == "static"
    assert attr(by["search"], "citestream.results") == len(SOURCES)
    upstream = by["upstream"]
    assert upstream.kind == 3  # SPAN_KIND_CLIENT
    assert attr(upstream, "http.response.status_code") == 200
    headers_ms = attr(upstream, "citestream.headers_ms")
    first_byte_ms = attr(upstream, "citestream.first_byte_ms")
    assert headers_ms is not None and first_byte_ms is not None, upstream
    assert 0 < headers_ms <= first_byte_ms
    # The model server sees our upstream span as its parent.
    assert sent.header("traceparent") == f"00-{TRACE_ID}-{hex_id(upstream.span_id)}-01"


def test_a_collector_that_is_down_does_not_hold_requests(replay_server, replay, tmp_json):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}"
    proc, envoy = start(replay_server, tmp_json, down)
    try:
        body, _ = client_body(CHAT, f"replay:{FIXTURE}", True)
        for _ in range(20):
            status, headers, _ = raw_post(envoy.url + CHAT, body)
            assert status == 200 and headers["x-citestream-search"] == "injected"
        # Without a client trace, a new one starts and goes upstream.
        tp = replay.exchanges()[-1].header("traceparent")
        assert tp is not None and tp.startswith("00-") and tp.endswith("-01"), tp
    finally:
        envoy.stop()
        assert proc.stop() == 0

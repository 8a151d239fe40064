"""`citestream serve` on every recorded fixture (docs/gateway.md, issue 10 "Tests").

One gateway (static search over `checks.SOURCES`, upstream = the replay
server) for the module. For each fixture in tests/fixtures/upstream/,
streamed and whole, replayed in random piece sizes:
* raw bytes through httpx: the client receives exactly
  `citestream rewrite --sources SOURCES <upstream body>` (chat or messages),
  with the grounding headers; the upstream received the request stripped and
  injected with every other byte kept, and the client's key;
* the official SDK (openai for chat fixtures, anthropic for `anthropic_*`)
  parses the gateway's answer exactly as it parses the expected bytes served
  directly (same chunks/events/body, same exception for error streams).
"""

from __future__ import annotations

import json

import pytest

from harness.checks import (SOURCES, anthropic_collect, check_upstream_request, client_body, endpoint_of,
                            openai_collect, raw_post)
from harness.procs import citestream_rewrite
from harness.replay import FIXTURES

ALL = sorted(p.stem for p in FIXTURES.glob("*.sse"))
MODES = ["stream", "whole"]


@pytest.fixture(scope="module")
def sources_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("sources") / "sources.json"
    path.write_text(json.dumps(SOURCES))
    return path


@pytest.fixture(scope="module")
def gateway(serve_module, replay_server, sources_path):
    return serve_module({
        "upstream": {"base_url": replay_server.url},
        "search": {"provider": "static", "static": {"path": str(sources_path)}},
        "plans": {"default": {"searches_per_day": 1_000_000}},
    })


def expected(replay_server, sources_path, name: str, stream: bool) -> bytes:
    path, endpoint = endpoint_of(name)
    upstream_body, _ = replay_server.body(name, stream, path)
    return citestream_rewrite(upstream_body, sources_path, endpoint=endpoint)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ALL)
def test_raw_bytes_and_upstream_request(gateway, replay, sources_path, name, mode):
    stream = mode == "stream"
    path, _ = endpoint_of(name)
    seed = sum(name.encode()) + stream
    body, span = client_body(path, f"replay:{name}?seed={seed}", stream)
    auth = {"x-api-key": "sk-client-key"} if path == "/v1/messages" else {"authorization": "Bearer sk-client-key"}
    status, headers, data = raw_post(gateway.url + path, body, {**auth, "x-request-id": f"req-{name}"})
    assert status == 200, data[:2000]
    assert data == expected(replay, sources_path, name, stream)
    assert headers["x-citestream-search"] == "injected"
    assert int(headers["x-citestream-searches-remaining"]) >= 0
    assert headers["x-request-id"] == f"req-{name}"
    if stream:
        assert headers["content-type"].startswith("text/event-stream")
        assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    check_upstream_request(body, span, ex.body)
    for k, v in auth.items():
        assert ex.header(k) == v, f"client key not sent upstream as {k}"
    assert ex.header("x-request-id") == f"req-{name}"
    assert ex.header("accept-encoding") in (None, "identity")
    assert ex.completed and not ex.client_disconnected


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ALL)
def test_official_sdk(gateway, replay, sources_path, name, mode):
    stream = mode == "stream"
    path, _ = endpoint_of(name)
    replay.register(f"expect-{name}-{mode}", **{"sse" if stream else "json_body":
                                                expected(replay, sources_path, name, stream)})
    collect = anthropic_collect if path == "/v1/messages" else openai_collect
    seed = 7 * len(name) + stream
    via_gateway = collect(gateway.url, f"replay:{name}?seed={seed}", stream, extra_body={"web_search": True})
    direct = collect(replay.url, f"replay:expect-{name}-{mode}", stream)
    assert via_gateway == direct
    grounded = [ex for ex in replay.exchanges() if f"replay:{name}?" in ex.body.decode(errors="replace")]
    assert len(grounded) == 1 and "web_search" not in grounded[0].json()

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
  directly (same chunks/events/body, same exception for error streams);
* every recorded Responses fixture (tests/fixtures/upstream/responses/),
  streamed, whole and folded, on `/v1/responses`: the client gets exactly
  `citestream rewrite --endpoint responses` of the same bytes, the upstream
  got `web_search` removed and the sources injected into the question's
  text (a string `input` stays a string), and the client's key; the
  official openai SDK parses every rewritten stream, and every final
  response carries `sources`.
"""

from __future__ import annotations

import json

import pytest

import openai
from harness.checks import (QUESTION, RESPONSES_CASES, SOURCES, anthropic_collect, check_responses_exchange,
                            check_upstream_request, client_body, endpoint_of, openai_collect, raw_post,
                            responses_client_body, responses_expected)
from harness.procs import citestream_rewrite
from harness.replay import FIXTURES

ALL = sorted(p.stem for p in FIXTURES.glob("*.sse"))
MODES = ["stream", "whole"]
RESPONSES_STREAMS = sorted(n for n, kind in RESPONSES_CASES if kind == "stream")


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


@pytest.mark.parametrize("name,mode", RESPONSES_CASES, ids=[f"{n}-{m}" for n, m in RESPONSES_CASES])
def test_responses_raw_bytes_and_upstream_request(gateway, replay, name, mode):
    stream = mode == "stream"
    seed = sum(name.encode()) + stream
    items = seed % 2 == 0
    body = responses_client_body(f"replay:{name}?seed={seed}", stream, items)
    status, headers, data = raw_post(gateway.url + "/v1/responses", body,
                                     {"authorization": "Bearer sk-client-key", "x-request-id": f"req-{name}"})
    assert status == 200, data[:2000]
    upstream_body, _ = replay.body(name, stream, "/v1/responses")
    assert data == responses_expected(upstream_body)
    assert headers["x-citestream-search"] == "injected"
    if stream:
        assert headers["content-type"].startswith("text/event-stream")
    check_responses_exchange(replay, body)


@pytest.mark.parametrize("name", RESPONSES_STREAMS)
def test_responses_through_the_sdk(gateway, replay, name):
    """The SDK parses every rewritten stream into its own event types."""
    seed = 3 * len(name)
    c = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-client", max_retries=0)
    try:
        events = list(c.responses.create(model=f"replay:{name}?seed={seed}", input=QUESTION, stream=True,
                                         extra_body={"web_search": True}))
    except openai.APIError as e:  # the recorded error streams
        assert "error" in name, e
        return
    finals = [e for e in events if e.type in ("response.completed", "response.incomplete")]
    for f in finals:
        assert (f.response.model_extra or {}).get("sources"), name
    if not finals:
        assert all("sources" not in (getattr(e, "response", None) and e.response.model_extra or {}) for e in events)

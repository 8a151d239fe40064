"""`citestream ext-proc` behind a real Envoy on every recorded fixture
(docs/envoy.md, issue 11 "Tests").

One processor (static search over `checks.SOURCES`) and two Envoys started
from the shipped `examples/envoy/envoy.yaml` (ports substituted), one per
response body mode: `STREAMED` and `FULL_DUPLEX_STREAMED`. Upstream: the
loopback replay server, every fixture written in random piece sizes
(1 B..16 KiB), streamed and whole. For each:
* raw bytes through httpx: the client receives exactly
  `citestream rewrite --sources SOURCES <upstream body>`, with the grounding
  headers; the upstream received the request with `web_search` stripped and
  the sources injected, every other byte kept, and was asked for an
  uncompressed body;
* the official SDK (openai for chat fixtures, anthropic for `anthropic_*`)
  makes of Envoy's answer exactly what it makes of the expected bytes
  served directly;
* every recorded Responses fixture (tests/fixtures/upstream/responses/),
  streamed, whole and folded, on `/v1/responses`: the client receives
  exactly `citestream rewrite --endpoint responses`, the upstream got
  `web_search` removed and the sources injected into the question's text
  (a string `input` stays a string); `web_search` not a boolean is a 400
  in the OpenAI shape with `param: "web_search"`, nothing sent upstream.
"""

from __future__ import annotations

import json

import pytest

from harness.checks import (RESPONSES_CASES, SOURCES, anthropic_collect, assert_error_shape,
                            check_responses_exchange, check_upstream_request, client_body, endpoint_of,
                            openai_collect, raw_post, responses_client_body, responses_expected)
from harness.envoy import FULL_DUPLEX, STREAMED, Envoy, ExtProc
from harness.procs import citestream_rewrite
from harness.replay import FIXTURES

ALL = sorted(p.stem for p in FIXTURES.glob("*.sse"))
BODIES = ["stream", "whole"]
MODES = [STREAMED, FULL_DUPLEX]


@pytest.fixture(scope="module")
def sources_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("sources") / "sources.json"
    path.write_text(json.dumps(SOURCES))
    return path


@pytest.fixture(scope="module")
def processor(sources_path):
    p = ExtProc.start({
        "search": {"provider": "static", "static": {"path": str(sources_path)}},
        "plans": {"default": {"searches_per_day": 1_000_000}},
    })
    yield p
    p.stop()


@pytest.fixture(scope="module")
def envoys(processor, replay_server):
    started = {}
    try:
        for mode in MODES:
            started[mode] = Envoy.start(processor=processor.port, upstream=replay_server.port, mode=mode)
        yield started
    finally:
        for e in started.values():
            e.stop()


def expected(replay_server, sources_path, name: str, stream: bool) -> bytes:
    path, endpoint = endpoint_of(name)
    upstream_body, _ = replay_server.body(name, stream, path)
    return citestream_rewrite(upstream_body, sources_path, endpoint=endpoint)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("body_kind", BODIES)
@pytest.mark.parametrize("name", ALL)
def test_raw_bytes_and_upstream_request(envoys, replay, sources_path, name, body_kind, mode):
    stream = body_kind == "stream"
    path, _ = endpoint_of(name)
    seed = sum(name.encode()) + stream + 3 * (mode == FULL_DUPLEX)
    body, span = client_body(path, f"replay:{name}?seed={seed}", stream)
    auth = {"x-api-key": "sk-client-key"} if path == "/v1/messages" else {"authorization": "Bearer sk-client-key"}
    rid = f"req-{name}-{body_kind}-{mode}"
    status, headers, data = raw_post(envoys[mode].url + path, body,
                                     {**auth, "accept-encoding": "gzip, br", "x-request-id": rid})
    assert status == 200, data[:2000]
    assert data == expected(replay, sources_path, name, stream)
    assert headers["x-citestream-search"] == "injected"
    assert int(headers["x-citestream-searches-remaining"]) >= 0
    assert headers["x-request-id"] == rid
    if stream:
        assert headers["content-type"].startswith("text/event-stream")
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    check_upstream_request(body, span, ex.body)
    for k, v in auth.items():
        assert ex.header(k) == v, f"client key not sent upstream as {k}"
    assert ex.header("accept-encoding") == "identity"
    assert ex.header("x-request-id") == rid
    assert ex.completed and not ex.client_disconnected


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("body_kind", BODIES)
@pytest.mark.parametrize("name", ALL)
def test_official_sdk(envoys, replay, sources_path, name, body_kind, mode):
    stream = body_kind == "stream"
    path, _ = endpoint_of(name)
    replay.register(f"expect-{name}-{body_kind}", **{"sse" if stream else "json_body":
                                                     expected(replay, sources_path, name, stream)})
    collect = anthropic_collect if path == "/v1/messages" else openai_collect
    seed = 7 * len(name) + stream + (mode == FULL_DUPLEX)
    via_envoy = collect(envoys[mode].url, f"replay:{name}?seed={seed}", stream, extra_body={"web_search": True})
    direct = collect(replay.url, f"replay:expect-{name}-{body_kind}", stream)
    assert via_envoy == direct
    grounded = [ex for ex in replay.exchanges() if f"replay:{name}?" in ex.body.decode(errors="replace")]
    assert len(grounded) == 1 and "web_search" not in grounded[0].json()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,kind", RESPONSES_CASES, ids=[f"{n}-{k}" for n, k in RESPONSES_CASES])
def test_responses_raw_bytes_and_upstream_request(envoys, replay, name, kind, mode):
    stream = kind == "stream"
    seed = sum(name.encode()) + stream + 3 * (mode == FULL_DUPLEX)
    body = responses_client_body(f"replay:{name}?seed={seed}", stream, items=seed % 2 == 1)
    rid = f"req-{name}-{kind}-{mode}"
    status, headers, data = raw_post(envoys[mode].url + "/v1/responses", body,
                                     {"authorization": "Bearer sk-client-key", "accept-encoding": "gzip, br",
                                      "x-request-id": rid})
    assert status == 200, data[:2000]
    upstream_body, _ = replay.body(name, stream, "/v1/responses")
    assert data == responses_expected(upstream_body)
    assert headers["x-citestream-search"] == "injected"
    assert headers["x-request-id"] == rid
    if stream:
        assert headers["content-type"].startswith("text/event-stream")
    ex = check_responses_exchange(replay, body)
    assert ex.header("accept-encoding") == "identity"


@pytest.mark.parametrize("mode", MODES)
def test_responses_web_search_not_a_boolean(envoys, replay, mode):
    model = f"replay:openai_gpt4omini_text_obfuscation?seed={len(mode)}"
    body = ('{"model":"%s","input":"hi","web_search":"yes"}' % model).encode()
    status, _, data = raw_post(envoys[mode].url + "/v1/responses", body)
    assert status == 400
    assert assert_error_shape("/v1/responses", data)["error"]["param"] == "web_search"
    assert not [ex for ex in replay.exchanges() if model.encode() in ex.body]

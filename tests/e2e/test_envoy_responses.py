"""`/v1/responses` through `citestream ext-proc` behind a real Envoy
(docs/envoy.md, docs/reference/responses.md).

One processor (static search over `checks.SOURCES`) and two Envoys from the
shipped `examples/envoy/envoy.yaml`, one per response body mode (`STREAMED`,
`FULL_DUPLEX_STREAMED`); upstream: the replay server. Every recorded
Responses fixture (tests/fixtures/upstream/responses/), streamed, whole and
folded, in random piece sizes: the client receives exactly what `citestream
rewrite --endpoint responses` writes for the same bytes, with the grounding headers;
the upstream got `web_search` removed, the sources injected into the
question's text (a string `input` stays a string), the client's key, and was
asked for an uncompressed body. `web_search` not a boolean: a 400 in the
OpenAI shape with `param: "web_search"`, nothing sent upstream.
"""

from __future__ import annotations

import json

import pytest
from harness.checks import (RESPONSES_CASES, SOURCES, assert_error_shape, check_responses_upstream, raw_post,
                            responses_client_body, responses_expected)
from harness.envoy import FULL_DUPLEX, STREAMED, Envoy, ExtProc

MODES = [STREAMED, FULL_DUPLEX]


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    path = tmp_path_factory.mktemp("sources") / "sources.json"
    path.write_text(json.dumps(SOURCES))
    p = ExtProc.start({
        "search": {"provider": "static", "static": {"path": str(path)}},
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


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,kind", RESPONSES_CASES, ids=[f"{n}-{k}" for n, k in RESPONSES_CASES])
def test_raw_bytes_and_upstream_request(envoys, replay, name, kind, mode):
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
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    assert ex.path == "/v1/responses"
    check_responses_upstream(body, ex.body)
    assert ex.header("authorization") == "Bearer sk-client-key"
    assert ex.header("accept-encoding") == "identity"
    assert ex.completed and not ex.client_disconnected


@pytest.mark.parametrize("mode", MODES)
def test_web_search_not_a_boolean(envoys, replay, mode):
    model = f"replay:openai_gpt4omini_text_obfuscation?seed={len(mode)}"
    body = ('{"model":"%s","input":"hi","web_search":"yes"}' % model).encode()
    status, _, data = raw_post(envoys[mode].url + "/v1/responses", body)
    assert status == 400
    assert assert_error_shape("/v1/responses", data)["error"]["param"] == "web_search"
    assert not [ex for ex in replay.exchanges() if model.encode() in ex.body]

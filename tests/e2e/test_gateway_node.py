"""The official `openai` npm package (Node) as a client of `citestream serve`,
on every recorded chat fixture (streamed and whole) and every recorded
Responses stream (`responses.create`, `responses.stream` and its final
response), replayed in random piece sizes: what the SDK hands out through
the gateway equals what it hands out for the expected bytes (`citestream
rewrite` of the same upstream body with the same sources) served directly; the same error for error streams."""

from __future__ import annotations

import json

import pytest

from harness.checks import RESPONSES_CASES, SOURCES, endpoint_of, responses_expected
from harness.node import node_client
from harness.procs import citestream_rewrite
from harness.replay import FIXTURES

CHAT_FIXTURES = sorted(p.stem for p in FIXTURES.glob("*.sse") if endpoint_of(p.stem)[1] == "chat")


@pytest.fixture(scope="module")
def node():
    return node_client()


def gateway(serve, replay, sources):
    """The gateway in front of the replay server, static search over `sources`."""
    return serve({"upstream": {"base_url": replay.url},
                  "search": {"provider": "static", "static": {"path": str(sources)}},
                  "plans": {"default": {"searches_per_day": 100000}}})


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_openai_npm_client_on_every_chat_fixture(node, serve, replay, tmp_json, stream):
    sources = tmp_json(SOURCES, "sources.json")
    gw = gateway(serve, replay, sources)
    jobs = []
    for i, name in enumerate(CHAT_FIXTURES):
        upstream, _ = replay.body(name, stream)
        mode = "stream" if stream else "whole"
        replay.register(f"expect-{name}-{mode}", **{"sse" if stream else "json_body":
                                                    citestream_rewrite(upstream, sources)})
        jobs.append({"base_url": gw.url, "model": f"replay:{name}?seed={i + 11 * stream}", "stream": stream,
                     "extra": {"web_search": True}})
        jobs.append({"base_url": replay.url, "model": f"replay:expect-{name}-{mode}", "stream": stream})
    results = node(jobs)
    for i, name in enumerate(CHAT_FIXTURES):
        via_gateway, direct = results[2 * i], results[2 * i + 1]
        assert via_gateway == direct, f"{name}: {json.dumps(via_gateway)[:1500]}\n!=\n{json.dumps(direct)[:1500]}"
    grounded = [ex for ex in replay.exchanges() if b"replay:expect-" not in ex.body]
    assert len(grounded) == len(CHAT_FIXTURES)
    assert all("web_search" not in ex.json() and ex.header("authorization") == "Bearer sk-node" for ex in grounded)


RESPONSES_STREAMS = sorted(n for n, kind in RESPONSES_CASES if kind == "stream")


@pytest.mark.parametrize("api", ["responses", "responses_stream"])
def test_openai_npm_client_on_every_responses_stream(node, serve, replay, tmp_json, api):
    """`client.responses.create({stream: true})` and `client.responses.stream()`
    (with its `finalResponse()`) make of the gateway's answer what they make
    of `citestream rewrite --endpoint responses` of the same upstream stream
    served directly."""
    sources = tmp_json(SOURCES, "sources.json")
    gw = gateway(serve, replay, sources)
    jobs = []
    for i, name in enumerate(RESPONSES_STREAMS):
        upstream, _ = replay.body(name, True, "/v1/responses")
        replay.register(f"expect-{name}", sse=responses_expected(upstream))
        jobs.append({"base_url": gw.url, "model": f"replay:{name}?seed={i + 5}", "stream": True, "api": api,
                     "extra": {"web_search": True}})
        jobs.append({"base_url": replay.url, "model": f"replay:expect-{name}", "stream": True, "api": api})
    results = node(jobs)
    cited = 0
    for i, name in enumerate(RESPONSES_STREAMS):
        via_gateway, direct = results[2 * i], results[2 * i + 1]
        assert via_gateway == direct, f"{name}: {json.dumps(via_gateway)[:1500]}\n!=\n{json.dumps(direct)[:1500]}"
        cited += any("sources" in (item.get("response") or item) for item in via_gateway["items"])
    assert cited > 0, "no stream's final response carried sources"
    grounded = [ex for ex in replay.exchanges() if b"replay:expect-" not in ex.body]
    assert len(grounded) == len(RESPONSES_STREAMS)
    assert all(ex.path == "/v1/responses" and "web_search" not in ex.json() for ex in grounded)

"""Search from the conversation through `citestream ext-proc` behind a real
Envoy: the search crate's conversation set (harness/conversations.py) on
the default search config (the bundled corpus), `search.query = "context"`
and `"last"`, each request answered by the replay upstream. The sources
are read back from the body the upstream received (the injected block's
`[n] title` lines): the same numbers as through `citestream serve`, the
Python `Grounding` and the crate's own test, since every host forms the
query with the one implementation."""

from __future__ import annotations

import re

import httpx
import pytest

from harness.conversations import Tally, assert_better, conversations, request
from harness.envoy import STREAMED, Envoy, ExtProc

MODEL = {"chat": "replay:openai_gpt4o_text_usage_chunk", "messages": "replay:anthropic_basic_ping"}
TITLE = re.compile(r"^\[(\d+)\] (.+)$", re.M)


@pytest.fixture
def envoys(replay_server):
    started = []
    try:
        out = {}
        for mode in ("context", "last"):
            proc = ExtProc.start({"search": {"query": mode}, "plans": {"default": {"searches_per_day": 1000}}})
            started.append(proc)
            envoy = Envoy.start(processor=proc.port, upstream=replay_server.port, mode=STREAMED)
            started.append(envoy)
            out[mode] = envoy
        yield out
    finally:
        for p in reversed(started):
            p.stop()


def _injected_titles(sent: dict) -> list[str]:
    """The titles of the sources block in front of the last user message."""
    last = [m for m in sent["messages"] if m.get("role") == "user"][-1]["content"]
    text = last if isinstance(last, str) else last[0]["text"]
    return [t for n, t in TITLE.findall(text)]


def _measure(envoy, replay, convs) -> Tally:
    tally = Tally()
    with httpx.Client(base_url=envoy.url, timeout=60) as http:
        for c in convs:
            endpoint, path, body = request(c)
            body["model"] = MODEL[endpoint]
            replay.clear()
            r = http.post(path, json=body)
            assert r.status_code == 200, r.text
            assert r.headers["x-citestream-search"] == "injected"
            tally.add(c, _injected_titles(replay.exchanges()[-1].json()))
    return tally


def test_the_conversation_set_through_envoy(envoys, replay):
    convs = conversations()
    context = _measure(envoys["context"], replay, convs)
    last = _measure(envoys["last"], replay, convs)
    print(f"ext-proc, query=context: {context.line()}")
    print(f"ext-proc, query=last: {last.line()}")
    assert_better(context, last)

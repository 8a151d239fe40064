"""The LiteLLM callback (citestream.litellm) in a real LiteLLM proxy, with
the official `openai` SDK as client, in front of the loopback replay
upstream (the Lisbon example: examples/lisbon/).

* streamed and whole: the content is the upstream's, the annotations sit at
  66–69 and 137–140, `sources` is on the finish chunk (and on no other),
  the upstream got the sources block and no `web_search`;
* `sources` also survives the proxy's fast serializer (a finish chunk with
  no `system_fingerprint`);
* the quota: with one search a day, the second request gets no sources;
  with the Redis store, the count lives in redis-server;
* `web_search` not a boolean: a 400 in the proxy's OpenAI error shape;
* the string-is-an-error rule: the raw SSE the proxy writes has no error
  frame, and the hook yields only chunk objects.
"""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import openai
import pytest

from harness.litellm_proxy import MASTER_KEY, LiteLLMProxy
from harness.replay import EXAMPLES

LISBON = EXAMPLES / "lisbon"
SOURCES = LISBON / "sources.json"
QUESTION = "What will the weather be like in Lisbon this weekend?"
SPANS = [(66, 69), (137, 140)]


def _upstream_content() -> str:
    text = ""
    for line in (LISBON / "upstream.sse").read_text().splitlines():
        if line.startswith("data: {"):
            for ch in json.loads(line[6:])["choices"]:
                text += ch["delta"].get("content") or ""
    return text


def _config(limit: int, **quota) -> dict:
    return {
        "search": {"provider": "static", "static": {"path": str(SOURCES)}},
        "quota": {"store": "memory", **quota},
        "plans": {"default": {"searches_per_day": limit}},
    }


@pytest.fixture(scope="module")
def nofp(replay_server):
    sse = (LISBON / "upstream.sse").read_bytes()
    replay_server.register("lisbon-nofp", sse=re.sub(rb'"system_fingerprint":"[^"]*",', b"", sse))


@pytest.fixture(scope="module")
def proxy(replay_server, nofp, tmp_path_factory, request):
    p = LiteLLMProxy.start(tmp_path_factory.mktemp("litellm"), replay_server.url, _config(1000))
    yield p
    p.stop()
    if request.session.testsfailed:
        print(f"\n===== litellm output =====\n{p.output()}")


@pytest.fixture
def client(proxy):
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)


def _stream(client, model="lisbon", **extra):
    chunks = list(client.chat.completions.create(
        model=model, stream=True, messages=[{"role": "user", "content": QUESTION}],
        extra_body={"web_search": True, **extra}))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    anns = [a for c in chunks if c.choices for a in (getattr(c.choices[0].delta, "annotations", None) or [])]
    return chunks, content, anns


def _span(a) -> tuple[int, int]:
    a = a if isinstance(a, dict) else a.model_dump()
    return a["url_citation"]["start_index"], a["url_citation"]["end_index"]


@pytest.mark.parametrize("model", ["lisbon", "lisbon-nofp"])
def test_streamed_annotations_and_sources(client, replay, model):
    chunks, content, anns = _stream(client, model)
    assert content == _upstream_content()
    assert [_span(a) for a in anns] == SPANS
    assert [content[s:e] for s, e in SPANS] == ["[1]", "[2]"]
    with_sources = [c for c in chunks if (c.model_extra or {}).get("sources")]
    assert len(with_sources) == 1
    final = with_sources[0]
    assert final.choices and final.choices[0].finish_reason == "stop"
    assert [s["url"] for s in final.model_extra["sources"]] == [s["url"] for s in json.loads(SOURCES.read_text())]
    # What went upstream: the sources block, no web_search.
    [ex] = [e for e in replay.exchanges() if e.path == "/v1/chat/completions"]
    sent = ex.json()
    assert "web_search" not in sent
    # A string content stays a string: the block, then the question.
    content = sent["messages"][-1]["content"]
    assert isinstance(content, str) and content.endswith("\n\n" + QUESTION), content
    assert "[1] Lisbon weather: weekend outlook" in content


def test_whole_annotations_and_sources(client, replay):
    r = client.chat.completions.create(
        model="lisbon", messages=[{"role": "user", "content": QUESTION}], extra_body={"web_search": True})
    msg = r.choices[0].message
    assert msg.content == _upstream_content()
    assert [_span(a) for a in msg.annotations] == SPANS
    assert [s["index"] for s in r.model_extra["sources"]] == [1, 2, 3]


def test_no_web_search_passes_through(client, replay):
    chunks = list(client.chat.completions.create(
        model="lisbon", stream=True, messages=[{"role": "user", "content": QUESTION}]))
    assert not any((c.model_extra or {}).get("sources") for c in chunks)
    assert not any(getattr(c.choices[0].delta, "annotations", None) for c in chunks if c.choices)
    [ex] = [e for e in replay.exchanges() if e.path == "/v1/chat/completions"]
    assert ex.json()["messages"] == [{"role": "user", "content": QUESTION}]


def test_web_search_not_boolean_is_a_400(client, replay):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="lisbon", messages=[{"role": "user", "content": QUESTION}], extra_body={"web_search": "yes"})
    assert e.value.status_code == 400
    err = e.value.body if "type" in (e.value.body or {}) else e.value.body.get("error", {})
    assert err["type"] == "invalid_request_error"
    assert err["param"] == "web_search"
    assert "web_search" in err["message"]
    assert not [x for x in replay.exchanges() if x.path == "/v1/chat/completions"]


def test_raw_sse_has_no_error_frame(proxy, replay):
    """The string-is-an-error rule: the proxy writes a `str` item a hook
    yields as an error and ends the stream; every frame must be a chunk."""
    body = {"model": "lisbon", "stream": True, "web_search": True,
            "messages": [{"role": "user", "content": QUESTION}]}
    r = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {MASTER_KEY}"},
                   timeout=60)
    assert r.status_code == 200
    events = [e for e in r.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    objs = [json.loads(e[6:]) for e in events[:-1]]
    assert all(o.get("object") == "chat.completion.chunk" and "error" not in o for o in objs)
    assert sum("sources" in o for o in objs) == 1


def test_hook_yields_only_chunk_objects(proxy):
    """The same rule at the hook: fed the proxy's own chunk objects, the
    callback yields `ModelResponseStream` objects, never `str` or bytes."""
    from litellm.types.utils import ModelResponseStream

    import citestream
    from citestream.litellm import CitestreamCallback

    cb = CitestreamCallback.__new__(CitestreamCallback)
    cb._pending = {}
    cb.grounding = None
    prepared = citestream.Grounding(str(proxy.tmp / "citestream.toml")).prepare(
        json.dumps({"model": "m", "stream": True, "web_search": True,
                    "messages": [{"role": "user", "content": QUESTION}]}).encode())
    assert prepared.search == "injected" and len(prepared.sources) == 3
    cb._pending["call-1"] = prepared

    async def upstream():
        for line in (LISBON / "upstream.sse").read_text().splitlines():
            if line.startswith("data: {"):
                yield ModelResponseStream(**json.loads(line[6:]))

    async def run():
        return [x async for x in cb.async_post_call_streaming_iterator_hook(None, upstream(), {"litellm_call_id": "call-1"})]

    out = asyncio.run(run())
    assert out and all(isinstance(x, ModelResponseStream) for x in out)
    assert sum(1 for x in out if (x.model_extra or {}).get("sources")) == 1


@pytest.fixture
def quota_proxy(replay_server, nofp, tmp_path, request):
    p = LiteLLMProxy.start(tmp_path / "litellm", replay_server.url, _config(1))
    yield p
    p.stop()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        print(f"\n===== litellm output =====\n{p.output()}")


def test_quota_exhausted_means_no_sources(quota_proxy, replay):
    c = openai.OpenAI(base_url=quota_proxy.url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)
    chunks, content, anns = _stream(c)
    assert [_span(a) for a in anns] == SPANS
    chunks, content, anns = _stream(c)
    assert content == _upstream_content()  # answered, status 200
    assert anns == []
    assert not any((ch.model_extra or {}).get("sources") for ch in chunks)
    sent = [e.json() for e in replay.exchanges() if e.path == "/v1/chat/completions"]
    assert len(sent) == 2 and "web_search" not in sent[1]
    assert sent[1]["messages"] == [{"role": "user", "content": QUESTION}]


def test_quota_on_redis(replay_server, nofp, redis_server, tmp_path, replay):
    """`[quota] store = "redis"`: the core's Redis store (same keys and
    scripts as `citestream serve` replicas) counts the callback's searches."""
    import redis

    url = f"redis://127.0.0.1:{redis_server.port}/"
    p = LiteLLMProxy.start(tmp_path / "litellm", replay_server.url, _config(1, store="redis", redis_url=url))
    try:
        c = openai.OpenAI(base_url=p.url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)
        _, _, anns = _stream(c)
        assert [_span(a) for a in anns] == SPANS
        keys = redis.Redis(port=redis_server.port).keys("*")
        assert keys, "the quota count is not in redis"
        _, content, anns = _stream(c)
        assert content == _upstream_content() and anns == []
    finally:
        p.stop()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_messages_endpoint_with_the_anthropic_sdk(proxy, replay, stream):
    """`/v1/messages` through the proxy: the same callback, the native SSE
    bytes rewritten by the messages rewriter (`sources` on `message_delta`)."""
    import anthropic

    c = anthropic.Anthropic(base_url=proxy.url, api_key=MASTER_KEY, max_retries=0, timeout=60)
    kw = dict(model="claude-ping", max_tokens=50, messages=[{"role": "user", "content": "hi"}],
              extra_body={"web_search": True})
    urls = [s["url"] for s in json.loads(SOURCES.read_text())]
    if stream:
        events = list(c.messages.create(stream=True, **kw))
        deltas = [e for e in events if e.type == "message_delta"]
        assert len(deltas) == 1 and [s["url"] for s in deltas[0].model_extra["sources"]] == urls
        assert not any("sources" in (e.model_extra or {}) for e in events if e.type != "message_delta")
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    else:
        m = c.messages.create(**kw)
        assert [s["url"] for s in m.model_extra["sources"]] == urls
        text = m.content[0].text
    assert text == "Hello there!"
    [ex] = [e for e in replay.exchanges() if e.path == "/v1/messages"]
    sent = ex.json()
    assert "web_search" not in sent
    content = sent["messages"][-1]["content"]
    assert isinstance(content, str) and content.endswith("\n\nhi") and "[1] Lisbon weather" in content


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_upstream_error_passes_and_the_proxy_keeps_serving(client, proxy, replay, stream):
    from citestream.litellm import CitestreamCallback  # noqa: F401  (the module the proxy loaded)

    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="lisbon-400", stream=stream, extra_body={"web_search": True},
                                       messages=[{"role": "user", "content": QUESTION}])
    assert e.value.status_code == 400
    sent = [x.json() for x in replay.exchanges() if x.path == "/v1/chat/completions"]
    assert sent and "web_search" not in sent[0]
    _, content, anns = _stream(client)
    assert content == _upstream_content() and [_span(a) for a in anns] == SPANS

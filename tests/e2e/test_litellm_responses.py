"""LiteLLM's `/v1/responses` route through the citestream callback, in a
real LiteLLM proxy, with the official `openai` SDK as client, in front of
the loopback replay upstream.

The upstream answers with the recorded Responses streams
(tests/fixtures/upstream/responses/) given `[n]` markers (`with_markers`:
appended to each text part's last delta, and put in front of its first
one when the upstream has no annotations of its own there, the part's text
in every snapshot changed to match), streamed, or whole as the replay
server folds them. What the client gets is checked against what
`citestream rewrite --endpoint responses` (the same rewriter as `citestream
serve`, `harness.checks.responses_expected`) makes of the same upstream
bytes:

* `client.responses.create(stream=True)`: the `annotation.added` events
  (the upstream's, then ours, `annotation_index` counting on), the
  annotations of the final response's text parts, `sources` on the final
  response and on no other event, `sequence_number`s consecutive;
* `client.responses.stream(...)`: its final response's annotations and
  `sources`;
* the whole body (`client.responses.create()`): annotations and `sources`;
* the upstream got the sources in `input`, no `web_search`
  (`check_responses_upstream`);
* the raw SSE the proxy writes: every frame an event of the SDK's
  `ResponseStreamEvent` union, then `data: [DONE]`;
* quota: an upstream 500 / 502 releases the reserved search (the next
  request still gets sources, the one after it none);
* `web_search` not a boolean: a 400 in the proxy's error shape; a request
  without `web_search` passes untouched;
* what LiteLLM 1.108 does to upstream streams the callback cannot change
  (docs/python.md, "LiteLLM and /v1/responses"): a stream with an `error`
  event reaches the client as LiteLLM's own `response.failed`, no sources.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from harness.checks import QUESTION, SOURCES, check_responses_upstream, responses_expected
from harness.litellm_proxy import MASTER_KEY, LiteLLMProxy
from harness.replay import RESPONSES_FIXTURES, aggregate
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

EVENTS = TypeAdapter(ResponseStreamEvent)
STREAMS = sorted(p.stem for p in RESPONSES_FIXTURES.glob("*.sse"))
# Streams with an `error` event: LiteLLM raises on it (its Responses
# iterator, `_maybe_raise_for_error_event`) and writes its own
# `response.failed`; they are checked apart.
FAILING = {"openai_gpt4omini_error_event_instead_of_completed", "openai_gpt5nano_error_event_then_failed"}
GROUNDED = [n for n in STREAMS if n not in FAILING]
FINAL = ("response.completed", "response.incomplete")


def _model(name: str) -> str:
    return "resp-" + name


MODELS = {_model(n): ("openai", "marked-" + n) for n in STREAMS}
MODELS.update({"resp-500": ("openai", "marked-openai_gpt4omini_text_obfuscation?status=500"),
               "resp-502": ("openai", "marked-openai_gpt4omini_text_obfuscation?status=502")})


# ---- the upstream streams, with markers ----------------------------------

def _blocks(sse: str) -> list[tuple[list[str], dict | None]]:
    """Each SSE block as (lines, its data JSON object or None)."""
    out = []
    for block in sse.split("\n\n"):
        lines = block.split("\n")
        data = [ln[len("data: "):] for ln in lines if ln.startswith("data: {")]
        out.append((lines, json.loads(data[0]) if data else None))
    return out


def with_markers(sse: bytes) -> bytes:
    """The stream with `[n]` markers in each `output_text` part's text: ` [1]
    [3]` after its last delta, `[2] ` before its first one when the
    upstream annotated none of that part (so the upstream's own offsets
    stay right); the text in `output_text.done`, `content_part.done`,
    `output_item.done` and the final response changed the same way."""
    blocks = _blocks(sse.decode())
    deltas: dict[tuple[int, int], list[int]] = {}
    annotated: set[tuple[int, int]] = set()
    for i, (_, ev) in enumerate(blocks):
        if ev is None:
            continue
        key = (ev.get("output_index"), ev.get("content_index"))
        if ev.get("type") == "response.output_text.delta":
            deltas.setdefault(key, []).append(i)
        elif ev.get("type") == "response.output_text.annotation.added":
            annotated.add(key)
        elif ev.get("type") == "response.output_text.done" and (ev.get("annotations") or []):
            annotated.add(key)
    prefix = {k: ("" if k in annotated else "[2] ") for k in deltas}
    suffix = " [1] [3]"

    def mark(key, text: str) -> str:
        return prefix[key] + text + suffix if key in deltas and isinstance(text, str) else text

    for key, idx in deltas.items():
        blocks[idx[0]][1]["delta"] = prefix[key] + blocks[idx[0]][1]["delta"]
        blocks[idx[-1]][1]["delta"] += suffix
    for _, ev in blocks:
        if ev is None:
            continue
        t = ev.get("type")
        if t == "response.output_text.done":
            ev["text"] = mark((ev["output_index"], ev["content_index"]), ev["text"])
        elif t == "response.content_part.done" and ev["part"].get("type") == "output_text":
            ev["part"]["text"] = mark((ev["output_index"], ev["content_index"]), ev["part"]["text"])
        elif t == "response.output_item.done":
            _mark_item(ev["output_index"], ev["item"], mark)
        elif t in FINAL or t == "response.failed":
            for o, item in enumerate(ev["response"].get("output") or []):
                _mark_item(o, item, mark)
    out = []
    for lines, ev in blocks:
        if ev is not None:
            data = "data: " + json.dumps(ev, ensure_ascii=False, separators=(",", ":"))
            lines = [data if ln.startswith("data: {") else ln for ln in lines]
        out.append("\n".join(lines))
    return "\n\n".join(out).encode()


def _mark_item(o: int, item: dict, mark) -> None:
    if item.get("type") == "message":
        for c, part in enumerate(item.get("content") or []):
            if part.get("type") == "output_text":
                part["text"] = mark((o, c), part["text"])


# ---- what the client got, what it should have got -------------------------

def _plain(d) -> dict:
    """An annotation as a dict, without null members and without the
    `container_id` LiteLLM rewrites in the upstream's container citations
    (`encode_container_id_on_output_item`: it adds its routing to the id)."""
    d = d if isinstance(d, dict) else d.model_dump()
    return {k: v for k, v in d.items() if v is not None and k != "container_id"}


def _final_annotations(response: dict) -> dict[tuple[int, int], list[dict]]:
    return {(o, c): [_plain(a) for a in part.get("annotations") or []]
            for o, item in enumerate(response.get("output") or []) if item.get("type") == "message"
            for c, part in enumerate(item.get("content") or []) if part.get("type") == "output_text"}


def _expected_stream(upstream: bytes) -> tuple[dict, dict]:
    """(annotation.added annotations per part, final response or None) of
    the reference rewrite of `upstream`."""
    added: dict[tuple[int, int], list[dict]] = {}
    final = None
    for _, ev in _blocks(responses_expected(upstream).decode()):
        if ev is None:
            continue
        if ev["type"] == "response.output_text.annotation.added":
            added.setdefault((ev["output_index"], ev["content_index"]), []).append(_plain(ev["annotation"]))
        elif ev["type"] in FINAL:
            final = ev["response"]
    return added, final


def _added(events) -> dict[tuple[int, int], list[dict]]:
    """The annotations of the SDK's `annotation.added` events per text
    part, each `annotation_index` checked to count from 0 in that part."""
    added: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        if e.type == "response.output_text.annotation.added":
            key = (e.output_index, e.content_index)
            assert e.annotation_index == len(added.get(key, [])), key
            added.setdefault(key, []).append(_plain(e.annotation))
    return added


def _sources(response) -> list | None:
    extra = response if isinstance(response, dict) else (response.model_extra or {})
    return extra.get("sources")


@pytest.fixture(scope="module")
def marked(replay_server):
    bodies = {}
    for name in STREAMS:
        bodies[name] = with_markers((RESPONSES_FIXTURES / f"{name}.sse").read_bytes())
        replay_server.register("marked-" + name, sse=bodies[name])
    return bodies


def _config(tmp, limit: int) -> dict:
    path = tmp / "sources.json"
    path.write_text(json.dumps(SOURCES))
    return {
        "search": {"provider": "static", "static": {"path": str(path)}},
        "quota": {"store": "memory"},
        "plans": {"default": {"searches_per_day": limit}},
    }


def _start(tmp, replay_url: str, limit: int) -> LiteLLMProxy:
    return LiteLLMProxy.start(tmp / "litellm", replay_url, _config(tmp, limit), models=MODELS)


@pytest.fixture(scope="module")
def proxy(replay_server, marked, tmp_path_factory, request):
    p = _start(tmp_path_factory.mktemp("litellm-responses"), replay_server.url, 1000)
    yield p
    p.stop()
    if request.session.testsfailed:
        print(f"\n===== litellm output =====\n{p.output()}")


def _client(p: LiteLLMProxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=p.url + "/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)


ASK = {"input": QUESTION, "extra_body": {"web_search": True}}


def _check_upstream(replay) -> None:
    """The one upstream request: no `web_search`, the sources in front of
    the question in `input` (LiteLLM's own members, `model` and the rest,
    are not compared)."""
    [ex] = replay.wait_for(lambda log: len([e for e in log if e.path == "/v1/responses"]) == 1)
    got = ex.json()
    assert "web_search" not in got
    check_responses_upstream(json.dumps({"input": QUESTION, "web_search": True}).encode(),
                             json.dumps({"input": got["input"]}).encode())


# ---- streamed --------------------------------------------------------------

@pytest.mark.parametrize("name", GROUNDED)
def test_streamed_with_create(proxy, replay, marked, name):
    events = list(_client(proxy).responses.create(model=_model(name), stream=True, **ASK))
    want_added, want_final = _expected_stream(marked[name])
    added = _added(events)
    assert added == want_added
    assert any(len(v) > 0 for v in added.values()), "no annotations at all"
    finals = [e for e in events if e.type in FINAL]
    assert len(finals) == 1
    final = finals[0].response
    assert _final_annotations(final.model_dump()) == _final_annotations(want_final)
    assert _sources(final) == want_final["sources"]
    others = [e for e in events if e.type not in FINAL and getattr(e, "response", None) is not None]
    assert not any(_sources(e.response) for e in others)
    seqs = [e.sequence_number for e in events if getattr(e, "sequence_number", None) is not None]
    if seqs:
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), (name, seqs)
    _check_upstream(replay)


@pytest.mark.parametrize("name", GROUNDED)
def test_streamed_with_stream_helper(proxy, replay, marked, name):
    with _client(proxy).responses.stream(model=_model(name), **ASK) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    _, want_final = _expected_stream(marked[name])
    assert _final_annotations(final.model_dump()) == _final_annotations(want_final)
    assert _sources(final) == want_final["sources"]


def test_raw_frames_are_sdk_events(proxy, replay):
    """Every frame the proxy writes is one of the SDK's event types (the
    inserted ones included), `sources` on one of them, then `[DONE]`."""
    body = {"model": _model("openai_gpt4omini_text_obfuscation"), "input": QUESTION, "stream": True,
            "web_search": True}
    r = httpx.post(proxy.url + "/v1/responses", json=body, headers={"authorization": f"Bearer {MASTER_KEY}"},
                   timeout=60)
    assert r.status_code == 200
    frames = [f for f in r.text.split("\n\n") if f.strip()]
    assert frames[-1] == "data: [DONE]"
    objs = [json.loads(f[len("data: "):]) for f in frames[:-1]]
    for o in objs:
        # The recording's `usage` lacks `input_tokens_details.cache_write_tokens`,
        # which this SDK version requires; usage is not ours to check here.
        EVENTS.validate_python({**o, "response": {k: v for k, v in o["response"].items() if k != "usage"}}
                               if isinstance(o.get("response"), dict) else o)
    types = [o["type"] for o in objs]
    assert types.count("response.output_text.annotation.added") == 3
    assert sum("sources" in (o.get("response") or {}) for o in objs) == 1


# ---- whole -----------------------------------------------------------------

@pytest.mark.parametrize("name", GROUNDED)
def test_whole(proxy, replay, marked, name):
    r = _client(proxy).responses.create(model=_model(name), **ASK)
    want = json.loads(responses_expected(aggregate.responses_body(marked[name])))
    assert _final_annotations(r.model_dump()) == _final_annotations(want)
    assert any(_final_annotations(want).values())
    assert _sources(r) == want["sources"]
    _check_upstream(replay)


# ---- request side ----------------------------------------------------------

def test_without_web_search_passes_untouched(proxy, replay):
    name = "openai_gpt4omini_text_obfuscation"
    events = list(_client(proxy).responses.create(model=_model(name), stream=True, input=QUESTION))
    assert not [e for e in events if e.type == "response.output_text.annotation.added"]
    assert not any(_sources(e.response) for e in events if getattr(e, "response", None) is not None)
    [ex] = [e for e in replay.exchanges() if e.path == "/v1/responses"]
    assert ex.json()["input"] == QUESTION


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_web_search_not_a_boolean_is_a_400(proxy, replay, stream):
    with pytest.raises(openai.BadRequestError) as e:
        r = _client(proxy).responses.create(model=_model("openai_gpt4omini_text_obfuscation"), stream=stream,
                                            input=QUESTION, extra_body={"web_search": "yes"})
        if stream:
            list(r)
    err = e.value.body if "type" in (e.value.body or {}) else e.value.body.get("error", {})
    assert err["type"] == "invalid_request_error" and err["param"] == "web_search"
    assert not [x for x in replay.exchanges() if x.path == "/v1/responses"]


# ---- quota -----------------------------------------------------------------

@pytest.fixture
def quota_proxy(replay_server, marked, tmp_path):
    p = _start(tmp_path, replay_server.url, 1)
    yield p
    p.stop()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_upstream_error_costs_no_search(quota_proxy, replay, stream):
    """One search a day: an upstream 500 and a 502 (LiteLLM's failure hook)
    give the reserved search back; the next 200 gets sources and spends it."""
    c = _client(quota_proxy)
    for model in ("resp-500", "resp-502"):
        with pytest.raises(openai.APIStatusError) as e:
            r = c.responses.create(model=model, stream=stream, **ASK)
            if stream:
                list(r)
        assert e.value.status_code >= 500
    failed = [x for x in replay.exchanges() if x.path == "/v1/responses"]  # LiteLLM retries some
    assert len(failed) >= 2 and all(x.status >= 500 for x in failed)
    assert all(SOURCES[0]["url"] in x.json()["input"] for x in failed)  # searched and injected
    name = _model("openai_gpt4omini_text_obfuscation")
    r = c.responses.create(model=name, **ASK)
    assert _sources(r) and any(_final_annotations(r.model_dump()).values())
    r = c.responses.create(model=name, **ASK)
    assert _sources(r) is None and not any(_final_annotations(r.model_dump()).values())
    assert replay.exchanges()[-1].json()["input"] == QUESTION  # nothing injected: quota spent


# ---- what LiteLLM does that the callback cannot change ----------------------

@pytest.mark.parametrize("name", sorted(FAILING))
def test_a_stream_with_an_error_event_gets_no_sources(proxy, replay, marked, name):
    """LiteLLM turns an upstream `error` event into an exception
    (`BaseResponsesAPIStreamingIterator._maybe_raise_for_error_event`) and
    writes its own `response.failed`: the client gets the events before it,
    the annotation events the text parts already earned, and no sources."""
    events = list(_client(proxy).responses.create(model=_model(name), stream=True, **ASK))
    assert not any(_sources(e.response) for e in events if getattr(e, "response", None) is not None)
    assert not [e for e in events if e.type in FINAL]
    assert events[-1].type == "response.failed", [e.type for e in events]
    want_added, want_final = _expected_stream(marked[name])
    assert want_final is None and _added(events) == want_added


# ---- the hook itself --------------------------------------------------------

def test_hook_yields_litellm_event_objects(proxy, marked):
    """Fed the event objects LiteLLM's Responses iterator builds (its OpenAI
    config's `transform_streaming_response`), the hook yields only such
    objects: an event the rewriter left alone is the very object it got,
    a changed or inserted one is LiteLLM's class for its `type`."""
    from litellm.llms.openai.responses.transformation import OpenAIResponsesAPIConfig
    from litellm.types.llms.base import BaseLiteLLMOpenAIResponseObject

    import citestream
    from citestream.litellm import CitestreamCallback

    name = "openai_gpt4omini_code_interpreter_two_messages_file_citation"
    config = OpenAIResponsesAPIConfig()
    upstream = [config.transform_streaming_response(model="m", parsed_chunk=ev, logging_obj=None)
                for _, ev in _blocks(marked[name].decode()) if ev is not None]
    cb = CitestreamCallback.__new__(CitestreamCallback)
    cb._pending = {}
    prepared = citestream.Grounding(str(proxy.tmp / "citestream.toml")).prepare(
        json.dumps({"model": "m", "stream": True, "web_search": True, "input": QUESTION}).encode(),
        endpoint="responses")
    assert prepared.search == "injected" and prepared.endpoint == "responses"
    cb._pending["call-1"] = prepared

    async def events():
        for ev in upstream:
            yield ev

    async def run():
        hook = cb.async_post_call_streaming_iterator_hook(None, events(), {"litellm_call_id": "call-1"})
        return [x async for x in hook]

    out = asyncio.run(run())
    assert all(isinstance(x, BaseLiteLLMOpenAIResponseObject) for x in out)

    def dump(x) -> dict:
        return json.loads(x.model_dump_json(exclude_none=True, exclude_unset=True))

    # The upstream's events come out in order, each the very object while
    # nothing was inserted before it; after that (and on the snapshots)
    # LiteLLM's class for the type, equal but for `sequence_number` (raised
    # by the count inserted) and, on the snapshots, annotations and sources.
    snapshots = ("response.content_part.done", "response.output_item.done", *FINAL)
    urls = {s["url"] for s in SOURCES}
    ups = iter(upstream)
    shift = rebuilt = 0
    for x in out:
        if x.type == "response.output_text.annotation.added" and x.annotation.get("url") in urls:
            shift += 1
            continue
        u = next(ups)
        if shift == 0 and x.type not in snapshots:
            assert x is u, x.type
            continue
        assert type(x) is OpenAIResponsesAPIConfig.get_event_model_class(event_type=x.type)
        gx, gu = dump(x), dump(u)
        assert gx.pop("sequence_number") == gu.pop("sequence_number") + shift
        if x.type not in snapshots:
            assert gx == gu, x.type
        rebuilt += 1
    assert next(ups, None) is None
    want_added, want_final = _expected_stream(marked[name])
    # Three markers in the first message, two in the second (which has an
    # upstream citation of its own).
    assert shift == sum(a.get("url") in urls for v in want_added.values() for a in v) == 5
    assert rebuilt > 0
    got = [dump(x) for x in out]
    assert [g["response"].get("sources") for g in got if g["type"] in FINAL] == [want_final["sources"]]

"""`/v1/responses` through `citestream serve` (docs/gateway.md,
docs/reference/responses.md); every recorded Responses fixture through
the gateway is in test_gateway_fixtures.py.

* The demo upstream (no config): the official `openai` SDK's
  `client.responses.create(stream=True)`, `client.responses.stream(...)`
  and a whole `client.responses.create(...)` get a cited answer: the
  `response.output_text.annotation.added` events, `url_citation`
  annotations on the `output_text` parts, `sources` on the final response,
  `x-citestream-search: injected`.
* Bad input: `web_search` not a boolean (400, OpenAI shape, `param:
  "web_search"`), `input` of unexpected shapes (`no-query`: passed on
  without `web_search`, nothing injected), a stream cut early (every byte
  the upstream sent relayed unchanged, no sources added, no clean end; six
  piece sizes).
* The log line: `cache` (`miss` then `hit`) and `query_chars`, the length
  of the formed search query (`search.max_query_chars` cuts it).
"""

from __future__ import annotations

import json

import openai
import pytest
from harness.checks import QUESTION, SOURCES, assert_error_shape, open_post, raw_post, responses_client_body
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

EVENTS = TypeAdapter(ResponseStreamEvent)


def static_search(path, **extra) -> dict:
    path.write_text(json.dumps(SOURCES))
    return {"provider": "static", "static": {"path": str(path)}, **extra}


@pytest.fixture(scope="module")
def gateway(serve_module, replay_server, tmp_path_factory):
    search = static_search(tmp_path_factory.mktemp("sources") / "sources.json")
    return serve_module({"upstream": {"base_url": replay_server.url}, "search": search})


# ---- the demo upstream, through the openai SDK ---------------------------

@pytest.fixture(scope="module")
def demo(serve_module):
    return serve_module(None)  # no --config: the demo upstream, bundled corpus


def client(gw) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-anything", max_retries=0)


ASK = {"model": "citestream-demo", "input": "What is the capital of Portugal?", "extra_body": {"web_search": True}}


def annotations_of(response) -> list[dict]:
    return [a.model_dump() for item in response.output if item.type == "message"
            for part in item.content if part.type == "output_text" for a in part.annotations]


def test_demo_streamed_with_create(demo):
    raw = client(demo).responses.with_raw_response.create(stream=True, **ASK)
    assert raw.headers["x-citestream-search"] == "injected"
    events = list(raw.parse())
    added = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert added, [e.type for e in events]
    body = json.dumps({"model": ASK["model"], "input": ASK["input"], "web_search": True, "stream": True}).encode()
    _, _, data = raw_post(demo.url + "/v1/responses", body)
    for line in data.split(b"\n"):  # every raw event is one of the SDK's types
        if line.startswith(b"data: "):
            ev = json.loads(line[6:])
            # The demo model's `usage` lacks `input_tokens_details.cache_write_tokens`,
            # which this SDK version requires; usage is not ours to check here.
            if isinstance(ev.get("response"), dict):
                ev["response"].pop("usage", None)
            EVENTS.validate_python(ev)
    final = next(e.response for e in events if e.type == "response.completed")
    anns = annotations_of(final)
    assert [e.annotation.model_dump() for e in added] == anns
    assert all(a["type"] == "url_citation" and a["url"].startswith("http") for a in anns)
    sources = (final.model_extra or {}).get("sources")
    assert sources and {a["url"] for a in anns} <= {s["url"] for s in sources}
    seqs = [e.sequence_number for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_demo_streamed_with_stream_helper(demo):
    with client(demo).responses.stream(**ASK) as stream:
        added = [e for e in stream if e.type == "response.output_text.annotation.added"]
        final = stream.get_final_response()
    anns = annotations_of(final)
    assert added and anns and [e.annotation.model_dump() for e in added] == anns
    assert (final.model_extra or {}).get("sources")


def test_demo_whole(demo):
    raw = client(demo).responses.with_raw_response.create(**ASK)
    assert raw.headers["x-citestream-search"] == "injected"
    final = raw.parse()
    anns = annotations_of(final)
    assert anns and all(a["type"] == "url_citation" for a in anns)
    assert (final.model_extra or {}).get("sources")


# ---- bad input ------------------------------------------------------------

@pytest.mark.parametrize("value", ['"yes"', "1", "null", "{}"])
def test_web_search_not_a_boolean(gateway, replay, value):
    model = f"replay:openai_gpt4omini_text_obfuscation?seed={len(value)}"
    body = ('{"model":"%s","input":"hi","web_search":%s}' % (model, value)).encode()
    status, _, data = raw_post(gateway.url + "/v1/responses", body)
    assert status == 400
    err = assert_error_shape("/v1/responses", data)
    assert err["error"]["param"] == "web_search"
    assert not [ex for ex in replay.exchanges() if model.encode() in ex.body]


@pytest.mark.parametrize("inp", ['42', '{"role":"user"}', '[]', '[{"role":"user","content":7}]',
                                 '[{"type":"function_call_output","call_id":"c","output":"x"}]'])
def test_input_of_unexpected_shapes(gateway, replay, inp):
    """No question to ground (`x-citestream-search: no-query`): the body goes
    upstream without `web_search`, nothing injected, the answer passes
    unchanged."""
    body = ('{"model":"replay:openai_gpt4omini_text_obfuscation","input":%s,"web_search":true}' % inp).encode()
    status, headers, data = raw_post(gateway.url + "/v1/responses", body)
    assert status == 200, data
    assert headers["x-citestream-search"] == "no-query"
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    sent = ex.json()
    assert "web_search" not in sent and sent["input"] == json.loads(inp)
    assert data == replay.body("openai_gpt4omini_text_obfuscation", False, "/v1/responses")[0]


@pytest.mark.parametrize("piece", [1, 7, 64, 301, 1000, 1249])
def test_a_stream_cut_early_gets_no_sources(gateway, replay, piece):
    name = "openai_gpt4omini_text_obfuscation"
    full, _ = replay.body(name, True, "/v1/responses")
    cut = full.index(b"event: response.completed")
    # Whole pieces of `piece` bytes: the upstream stops at the first piece
    # end at or past `cut`, inside the last event (response.completed).
    body = responses_client_body(f"replay:{name}?cut={cut}&piece={piece}", True, False)
    # A raw socket: everything the gateway wrote, up to its close.
    sock = open_post(int(gateway.url.rsplit(":", 1)[1]), "/v1/responses", body)
    raw = b""
    while chunk := sock.recv(65536):
        raw += chunk
    sock.close()
    head, _, chunked = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    got = bytearray()
    while chunked:
        size_line, sep, rest = chunked.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16) if sep else 0
        if size == 0:
            break
        got += rest[:size]
        chunked = rest[size + 2:]
    # The gateway ends its own chunked body without the last chunk: the client sees the cut.
    assert not raw.endswith(b"0\r\n\r\n")
    assert b'"sources"' not in got
    # Every byte the upstream sent before the cut (whole pieces: `cut` or a
    # little more) arrives, unchanged, nothing added.
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    assert cut <= ex.bytes_sent < len(full)
    assert bytes(got) == full[:ex.bytes_sent]


# ---- the log line ---------------------------------------------------------

def test_log_line_cache_and_formed_query_chars(serve, replay, tmp_path):
    search = static_search(tmp_path / "sources.json", cache_ttl="60s", max_query_chars=20)
    gw = serve({"upstream": {"base_url": replay.url}, "search": search})
    for i in range(2):
        body = responses_client_body("replay:openai_gpt4omini_text_obfuscation", True, False)
        status, _, _ = raw_post(gw.url + "/v1/responses", body, {"x-request-id": f"log-{i}"})
        assert status == 200
    lines = {line.get("request_id"): line for line in gw.log_lines() if line.get("request_id", "").startswith("log-")}
    assert lines["log-0"]["cache"] == "miss" and lines["log-1"]["cache"] == "hit"
    for line in lines.values():
        assert line["endpoint"] == "responses" and line["search"] == "injected"
        # The formed query: at most max_query_chars of the question's end.
        assert 0 < line["query_chars"] <= 20 < len(QUESTION), line

"""What every host must do to a grounded request and its response, as
reusable checks for the gateway, Envoy and LiteLLM tests.

Contract
* `SOURCES`: the sources the `static` search provider returns in the tests
  (plain text, distinct URLs, short: the search adapter's rules leave them
  as they are, so they are also "the sources the search returned").
* `endpoint_of(name)`: `/v1/messages` for the `anthropic_*` fixtures and the
  `citestream rewrite --endpoint` value; `/v1/chat/completions` otherwise.
* `client_body(path, model, stream)`: a hand-written request body (odd
  spacing, escapes, unknown fields, earlier turns) with `web_search: true`,
  as bytes, plus the span of the last user message's `content` value.
* `check_upstream_request(sent, span, received, sources)`: the upstream got
  `sent` with the `web_search` member removed and the numbered sources put
  into the last user message (every source's URL and text, in order, before
  the question; a string content still a string ending with the question,
  an array of parts with one text part in front), and every other byte
  unchanged (all differences lie inside the last user message's content
  value).
* `openai_collect` / `anthropic_collect`: what an official SDK makes of a
  call: the list of `model_dump()`s of the chunks / events (or of the whole
  body), and the exception it raised (type and message), if any.
* `raw_post(url, body, headers)`: a POST with httpx returning (status,
  headers, the exact body bytes as received, before any content decoding).
* `responses_client_body(model, stream, items)` /
  `check_responses_upstream(sent, received)`: the same for `/v1/responses`
  (a string `input`, or items ending in the question as `input_text`).
* `check_responses_exchange(replay, sent)`: the replay server's one
  exchange was a completed `/v1/responses` with `sent` checked as above and
  the client's key `Bearer sk-client-key`; returns it.
* `RESPONSES_CASES`: (fixture name, `stream` | `whole` | `folded`) for
  every recorded Responses fixture: each stream streamed, each `.json` body
  whole, and each stream with a final response event folded whole.
  `responses_expected(body)`: what `citestream rewrite --endpoint
  responses --sources SOURCES` writes for `body` (a stream or a whole body).
* `assert_error_shape(path, body)`: `body` is an error in the endpoint's
  shape (OpenAI `{"error":{message,type,param,code}}`, Anthropic
  `{"type":"error","error":{type,message}}`); returns it parsed.
* `open_post(port, path, body, headers)`: a POST written on a raw socket and
  left open, for tests that hang up at a chosen moment.
"""

from __future__ import annotations

import json
import re
import socket

import anthropic
import httpx
import openai

SOURCES = [
    {"title": "Lisbon - Wikipedia", "url": "https://en.wikipedia.org/wiki/Lisbon",
     "text": "Lisbon is the capital and largest city of Portugal."},
    {"title": "Portugal facts", "url": "https://facts.example/portugal?x=1&y=2",
     "text": "Portugal's capital is Lisbon, on the Tagus estuary. Caf\u00e9 culture \u2615."},
    {"title": "Third source", "url": "https://three.example/c", "text": "A third snippet."},
]
QUESTION = "What is the capital of Portugal? Answer with citations."


def endpoint_of(name: str) -> tuple[str, str]:
    """(path, `citestream rewrite --endpoint` value) for a fixture name."""
    if name.startswith("anthropic"):
        return "/v1/messages", "messages"
    return "/v1/chat/completions", "chat"


def client_body(path: str, model: str, stream: bool) -> tuple[bytes, tuple[int, int]]:
    """A grounded request body and the byte span of its last user content."""
    content = json.dumps(QUESTION)
    if path == "/v1/messages":
        content = '[ {"type": "text", "text": ' + content + '} ]'
        head = ('{"model": "%s", "max_tokens": 1024, "system": "Be brief.",\n  "messages": '
                '[{"role": "user", "content": "Earlier question"}, {"role": "assistant", "content": "Earlier answer"},'
                ' {"role": "user", "content": ' % model)
        tail = '}],\n  "web_search" : true, "metadata": {"user_id": "u-1"}, "stream": %s}' % json.dumps(stream)
    else:
        head = ('{"model": "%s",  "messages": [{"role": "system", "content": "Answer briefly. caf\\u00e9"},'
                ' {"role": "user", "content": "Earlier question"}, {"role": "assistant", "content": "Earlier answer"},'
                ' {"role":"user","content":' % model)
        tail = '}],\n  "web_search" : true,\t"temperature": 0.50, "x_unknown": {"k": [1, 2e0]}, "stream": %s}' % (
            json.dumps(stream))
    body = (head + content + tail).encode()
    start = len(head.encode())
    return body, (start, start + len(content.encode()))


def _without_web_search(sent: bytes) -> list[bytes]:
    """`sent` with its `web_search` member removed, each way a separator can go."""
    member = rb'"web_search"\s*:\s*(true|false)'
    return [re.sub(rb",\s*" + member, b"", sent, count=1), re.sub(member + rb"\s*,\s*", b"", sent, count=1)]


def _last_user_text(msg: dict) -> str:
    content = msg["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def check_upstream_request(sent: bytes, span: tuple[int, int], received: bytes, sources=SOURCES) -> None:
    """Asserts the upstream got `sent`, stripped and injected, nothing else changed."""
    got = json.loads(received)
    assert "web_search" not in got, "web_search reached the upstream"
    want = json.loads(sent)
    del want["web_search"]
    assert got["messages"][:-1] == want["messages"][:-1], "earlier turns changed"
    assert {k: v for k, v in got.items() if k != "messages"} == {k: v for k, v in want.items() if k != "messages"}
    # The shape is kept: a string content stays a string (`<block><question>`),
    # an array of parts gets one text part in front.
    sent_content, got_content = want["messages"][-1]["content"], got["messages"][-1]["content"]
    if isinstance(sent_content, str):
        assert isinstance(got_content, str) and got_content.endswith(sent_content), got_content
    else:
        assert isinstance(got_content, list) and got_content[1:] == sent_content, got_content
        assert got_content[0]["type"] == "text" and set(got_content[0]) == {"type", "text"}, got_content[0]
    text = _last_user_text(got["messages"][-1])
    assert QUESTION in text, "the question is gone from the last user message"
    positions = []
    for s in sources:
        assert s["url"] in text and s["text"] in text, f"source {s['url']} not injected: {text!r}"
        positions.append(text.index(s["url"]))
    assert positions == sorted(positions) and positions[-1] < text.rindex(QUESTION), text
    # Byte-level: outside the last user message's content value, nothing changed.
    for cand in _without_web_search(sent):
        if cand == sent:
            continue
        start, end = span
        if sent.find(b'"web_search"') < start:
            start, end = start - (len(sent) - len(cand)), end - (len(sent) - len(cand))
        n = min(len(cand), len(received))
        prefix = next((i for i in range(n) if cand[i] != received[i]), n)
        suffix = next((i for i in range(n - prefix) if cand[-1 - i] != received[-1 - i]), n - prefix)
        if prefix >= start and len(cand) - suffix <= end:
            return
    raise AssertionError(f"bytes outside the last user content changed:\nsent     {sent!r}\nreceived {received!r}")


def raw_post(url: str, body: bytes, headers: dict | None = None, timeout: float = 60.0):
    """(status, headers, exact body bytes) of a POST, no content decoding."""
    hdrs = {"content-type": "application/json", **(headers or {})}
    with httpx.Client(timeout=timeout) as c:
        with c.stream("POST", url, content=body, headers=hdrs) as r:
            data = b"".join(r.iter_raw())
            return r.status_code, r.headers, data


def _exc(e: BaseException | None):
    return None if e is None else (type(e).__name__, str(e))


def openai_collect(base_url: str, model: str, stream: bool, *, api_key: str = "sk-client", extra_body=None,
                   messages=None):
    """(dumps, exception) of `chat.completions.create` through the official SDK."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=60)
    out, exc = [], None
    try:
        res = client.chat.completions.create(
            model=model, messages=messages or [{"role": "user", "content": QUESTION}], stream=stream,
            extra_body=extra_body)
        if stream:
            for chunk in res:
                out.append(chunk.model_dump())
        else:
            out.append(res.model_dump())
    except openai.OpenAIError as e:
        exc = e
    finally:
        client.close()
    return out, _exc(exc)


def anthropic_collect(base_url: str, model: str, stream: bool, *, api_key: str = "sk-client", extra_body=None):
    """(dumps, exception) of `messages.create` through the official SDK."""
    client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
    out, exc = [], None
    try:
        res = client.messages.create(
            model=model, max_tokens=1024, messages=[{"role": "user", "content": QUESTION}], stream=stream,
            extra_body=extra_body)
        if stream:
            for event in res:
                out.append(event.model_dump())
        else:
            out.append(res.model_dump())
    except anthropic.AnthropicError as e:
        exc = e
    finally:
        client.close()
    return out, _exc(exc)


def open_post(port: int, path: str, body: bytes, headers: dict | None = None) -> socket.socket:
    """Writes a POST on a new loopback connection and returns the socket."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    s.sendall(head.encode() + b"content-length: %d\r\n\r\n" % len(body) + body)
    return s


def assert_error_shape(path: str, body: bytes) -> dict:
    """Asserts `body` is an error in the shape of endpoint `path`."""
    err = json.loads(body)
    if path == "/v1/messages":
        assert err["type"] == "error" and isinstance(err["error"]["type"], str), err
    else:
        assert set(err["error"]) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["error"]["message"], str) and err["error"]["message"], err
    return err


def responses_client_body(model: str, stream: bool, items: bool) -> bytes:
    """A grounded `/v1/responses` request body: `input` a string, or items
    (an earlier turn, then the question as `input_text` parts)."""
    if items:
        inp = ('[{"role": "user", "content": "Earlier question"}, {"role": "assistant", "content": "Earlier answer"},'
               ' {"type": "message", "role": "user", "content": [{"type": "input_text", "text": %s}]}]'
               % json.dumps(QUESTION))
    else:
        inp = json.dumps(QUESTION)
    return ('{"model": "%s", "instructions": "Be brief. caf\\u00e9", "input": %s,\n  "web_search" : true, '
            '"x_unknown": {"k": [1, 2e0]}, "stream": %s}' % (model, inp, json.dumps(stream))).encode()


def check_responses_upstream(sent: bytes, received: bytes, sources=SOURCES) -> None:
    """The upstream got `sent` without `web_search`, the sources injected
    into the question's text before it (a string `input` stays a string),
    `instructions` and every other member unchanged."""
    got, want = json.loads(received), json.loads(sent)
    assert "web_search" not in got, "web_search reached the upstream"
    del want["web_search"]
    assert {k: v for k, v in got.items() if k != "input"} == {k: v for k, v in want.items() if k != "input"}
    if isinstance(want["input"], str):
        assert isinstance(got["input"], str), "a string input became items"
        text = got["input"]
    else:
        assert got["input"][:-1] == want["input"][:-1], "earlier items changed"
        last = got["input"][-1]
        assert {k: v for k, v in last.items() if k != "content"} == {
            k: v for k, v in want["input"][-1].items() if k != "content"}
        assert last["content"][-len(want["input"][-1]["content"]):] == want["input"][-1]["content"]
        text = "\n".join(p["text"] for p in last["content"] if p.get("type") == "input_text")
    assert QUESTION in text
    positions = []
    for s in sources:
        assert s["url"] in text and s["text"] in text, f"source {s['url']} not injected: {text!r}"
        positions.append(text.index(s["url"]))
    assert positions == sorted(positions) and positions[-1] < text.rindex(QUESTION), text


def _responses_cases() -> list[tuple[str, str]]:
    from .replay import RESPONSES_FIXTURES
    streams = sorted(p.stem for p in RESPONSES_FIXTURES.glob("*.sse"))
    whole = sorted(p.stem for p in RESPONSES_FIXTURES.glob("*.json"))
    # Streams without a final response event have no whole body to fold.
    no_final = {"openai_gpt4omini_error_event_instead_of_completed"}
    return ([(n, "stream") for n in streams] + [(n, "whole") for n in whole]
            + [(n, "folded") for n in streams if n not in no_final and n not in whole])


RESPONSES_CASES = _responses_cases()


def responses_expected(body: bytes) -> bytes:
    """`citestream rewrite --endpoint responses` of a `/v1/responses` body
    or stream over `SOURCES`."""
    import tempfile
    from pathlib import Path

    from .procs import citestream_rewrite
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sources.json"
        path.write_text(json.dumps(SOURCES))
        return citestream_rewrite(body, path, endpoint="responses")


def check_responses_exchange(replay, sent: bytes):
    """The replay server's one exchange, checked for a grounded `/v1/responses`."""
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    assert ex.path == "/v1/responses"
    check_responses_upstream(sent, ex.body)
    assert ex.header("authorization") == "Bearer sk-client-key", "client key not sent upstream"
    assert ex.completed and not ex.client_disconnected
    return ex

"""Self-tests of the shared harness: the replay upstream serves the recorded
bytes exactly (in pieces), records what it got, sees disconnects; the search
backend; the TOML writer; redis-server starts. The hosts' tests rely on all
of this, so it is checked on its own first."""

from __future__ import annotations

import json
import socket
import tomllib

import httpx
import pytest

from harness.aggregate import chat_body, messages_body
from harness.procs import toml_dumps
from harness.replay import FIXTURES, Scenario, piece_sizes
from harness.search import SearchBackend

ALL = sorted(p.stem for p in FIXTURES.glob("*.sse"))


def test_piece_sizes_cover_the_range_and_sum():
    sizes = [n for seed in range(50) for n in piece_sizes(200_000, seed)]
    assert min(sizes) == 1 and max(sizes) == 16 * 1024
    assert sum(piece_sizes(12345, 7)) == 12345
    assert piece_sizes(10, 1, fixed=3) == [3, 3, 3, 1]


def test_scenario_options():
    sc = Scenario.parse("replay:x?seed=4&delay=0.5&gap=0.01&status=429&gzip=1&cut=10&piece=2")
    assert (sc.name, sc.seed, sc.delay, sc.gap, sc.status, sc.gzip, sc.cut, sc.piece) == (
        "x", 4, 0.5, 0.01, 429, True, 10, 2)
    assert Scenario.parse("gpt-4o") is None
    with pytest.raises(ValueError):
        Scenario.parse("replay:x?nope=1")


@pytest.mark.parametrize("name", ALL)
def test_replay_serves_fixture_bytes(replay, name):
    path = "/v1/messages" if name.startswith("anthropic") else "/v1/chat/completions"
    want = (FIXTURES / f"{name}.sse").read_bytes()
    body = {"model": f"replay:{name}?seed={len(name)}", "stream": True, "messages": []}
    with httpx.Client() as c:
        r = c.post(replay.url + path, json=body, headers={"authorization": "Bearer sk-x"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    assert r.content == want
    (ex,) = replay.wait_for(lambda log: log and log[-1].done)
    assert ex.json() == body and ex.header("Authorization") == "Bearer sk-x"
    assert ex.completed and not ex.client_disconnected and ex.bytes_sent == len(want)


@pytest.mark.parametrize("name", ALL)
def test_whole_bodies_fold_every_fixture(replay, name):
    anthropic = name.startswith("anthropic")
    path = "/v1/messages" if anthropic else "/v1/chat/completions"
    with httpx.Client() as c:
        r = c.post(replay.url + path, json={"model": f"replay:{name}", "stream": False})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body == json.loads(replay.body(name, False, path)[0])
    if anthropic:
        assert body["type"] == "message" and isinstance(body["content"], list)
    else:
        assert body["object"] == "chat.completion" and isinstance(body["choices"], list)


def test_fold_concatenates_content():
    sse = (FIXTURES / "openai_gpt4o_text_usage_chunk.sse").read_bytes()
    body = json.loads(chat_body(sse))
    assert body["choices"][0]["message"]["content"].startswith("I'm unable to provide real-time")
    assert body["usage"]["total_tokens"] > 0
    msg = json.loads(messages_body((FIXTURES / "anthropic_tool_use.sse").read_bytes()))
    assert [b["type"] for b in msg["content"]] == ["text", "tool_use"]
    assert isinstance(msg["content"][1]["input"], dict) and msg["stop_reason"] == "tool_use"


def test_lisbon_whole_body_is_the_recorded_json(replay):
    with httpx.Client() as c:
        r = c.post(replay.url + "/v1/chat/completions", json={"model": "replay:lisbon"})
    assert r.content == (FIXTURES.parents[2] / "examples/lisbon/upstream.json").read_bytes()


def test_error_status_gzip_cut_and_echo(replay):
    with httpx.Client() as c:
        r = c.post(replay.url + "/v1/messages", json={"model": "replay:anthropic_basic_ping?status=529"})
        assert r.status_code == 529 and r.json()["type"] == "error"
        r = c.post(replay.url + "/v1/chat/completions",
                   json={"model": "replay:lisbon?gzip=1", "stream": True})
        assert r.headers["content-encoding"] == "gzip"
        assert r.content == (FIXTURES.parents[2] / "examples/lisbon/upstream.sse").read_bytes()
        r = c.get(replay.url + "/v1/models?x=1")
        assert r.json() == {"object": "replay.echo", "method": "GET", "path": "/v1/models?x=1", "body_bytes": 0}
        r = c.post(replay.url + "/v1/chat/completions", json={"model": "gpt-4o"})
        assert r.status_code == 400
        with pytest.raises(httpx.RemoteProtocolError):
            c.post(replay.url + "/v1/chat/completions",
                   json={"model": "replay:lisbon?cut=100&piece=10", "stream": True})
        log = c.get(replay.url + "/_replay/log").json()
    assert [e["path"] for e in log] == ["/v1/messages", "/v1/chat/completions", "/v1/models?x=1",
                                         "/v1/chat/completions", "/v1/chat/completions"]
    assert log[-1]["bytes_sent"] == 100 and not log[-1]["completed"]


def _raw_request(port: int, body: dict, read: int) -> socket.socket:
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"content-length: %d\r\n\r\n%b" % (len(data), data))
    got = b""
    while len(got) < read:
        got += s.recv(read - len(got))
    return s


@pytest.mark.parametrize("phase,opts,read", [("before-headers", "delay=5", 0), ("body", "gap=0.05&piece=50", 300)])
def test_replay_sees_disconnect(replay, phase, opts, read):
    s = _raw_request(replay.port, {"model": f"replay:openai_gpt41nano_text_usage?{opts}", "stream": True}, read)
    replay.wait_for(lambda log: len(log) == 1)
    s.close()
    (ex,) = replay.wait_for(lambda log: log and log[0].done, timeout=5)
    assert ex.client_disconnected and ex.disconnect_phase == phase and not ex.completed


def test_search_backend_answers_and_sees_disconnect():
    results = [{"link": "https://a.example/", "title": "A", "snippet": "a"}]
    backend = SearchBackend(results).start()
    slow = SearchBackend(results, delay=5).start()
    try:
        r = httpx.post(backend.url + "/search", json={"query": "q", "count": 3})
        assert r.json() == results and backend.queries()[0].body == {"query": "q", "count": 3}
        s = socket.create_connection(("127.0.0.1", slow.port))
        s.sendall(b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
        slow.wait_for(lambda qs: len(qs) == 1)
        s.close()
        slow.wait_for(lambda qs: qs[0].client_disconnected)
    finally:
        backend.stop()
        slow.stop()


def test_toml_writer_round_trips():
    doc = {"server": {"listen": "127.0.0.1:1", "max_request_body": "1KiB"},
           "search": {"provider": "static", "max_results": 5, "static": {"path": "/tmp/a \"b\".json"}},
           "plans": {"default": {"searches_per_day": 3}},
           "accounts": [{"id": "acme", "plan": "default", "keys": ["sha256:ab"]}, {"id": "b", "keys": []}]}
    assert tomllib.loads(toml_dumps(doc)) == doc


def test_redis_server_starts(redis_server):
    import redis

    r = redis.Redis.from_url(redis_server.url)
    assert r.ping() and r.set("k", "v") and r.get("k") == b"v"
    redis_server.stop()
    assert redis_server.proc.returncode is not None


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_upstream_request_check_accepts_a_splice_and_catches_changes(path):
    import re

    from harness.checks import QUESTION, SOURCES, check_upstream_request, client_body

    body, (a, b) = client_body(path, "replay:x", True)
    stripped = re.sub(rb',\s*"web_search"\s*:\s*true', b"", body)
    block = "Sources:\n" + "\n".join(f"[{i + 1}] {s['title']} {s['url']} {s['text']}" for i, s in enumerate(SOURCES))
    part = b'{"type":"text","text":' + json.dumps(block + "\n\n").encode() + b"}"
    if path == "/v1/messages":
        new = b"[" + part + b"," + body[a + 1 : b]
        # The wrong shape: the block merged into the question's own part.
        wrong = body[a:b].replace(b'"text": "', b'"text": ' + json.dumps(block + "\n\n")[:-1].encode(), 1)
    else:
        new = json.dumps(block + "\n\n" + QUESTION).encode()
        # The wrong shape: a string content turned into parts.
        wrong = b"[" + part + b',{"type":"text","text":' + body[a:b] + b"}]"
    shift = 0 if body.find(b'"web_search"') > a else len(body) - len(stripped)
    good = stripped[: a - shift] + new + stripped[b - shift :]
    check_upstream_request(body, (a, b), good)
    for bad in (good.replace(b"Earlier answer", b"Earlier answeR"),  # an earlier turn changed
                stripped[: a - shift] + wrong + stripped[b - shift :],  # the content's shape changed
                good.replace(b'"u-1"}', b'"u-1" }').replace(b"0.50", b"0.5"),  # other bytes re-spelled
                stripped,  # nothing injected
                body):  # web_search not stripped
        with pytest.raises(AssertionError):
            check_upstream_request(body, (a, b), bad)

"""`[inject]` through `citestream serve`: a custom template and both
placements, as the upstream (the replay server, which records every request)
received them.

* placement "user": a string content stays a string, the rendered block
  (header, each source through `source`, `separator`, `footer`) then the
  question, the question's escaped bytes kept; an array of parts gets one
  text part in front; `/v1/messages` likewise;
* placement "system": a chat system message in front of `messages`; a string
  Messages `system` stays a string, the block after a blank line;
* a template naming an unknown placeholder, an unknown placement: start-up
  error, exit 2, one line naming the key.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.checks import SOURCES, raw_post
from harness.procs import citestream_bin, toml_dumps

HEADER = "Sources (cite as [n]):\n"
SOURCE = '<{n}> {title} | {url} | {text} | "{heading}"{year}'
SEPARATOR = "\n"
FOOTER = "\n---\n"


def rendered() -> str:
    """The block the template gives for `SOURCES` (none has a heading or year)."""
    parts = [SOURCE.replace("{n}", str(i + 1)).replace("{title}", s["title"]).replace("{url}", s["url"])
             .replace("{text}", s["text"]).replace("{heading}", "").replace("{year}", "")
             for i, s in enumerate(SOURCES)]
    return HEADER + SEPARATOR.join(parts) + FOOTER


def config(replay_server, sources, placement: str) -> dict:
    return {
        "upstream": {"base_url": replay_server.url},
        "search": {"provider": "static", "static": {"path": str(sources)}},
        "inject": {"placement": placement, "header": HEADER, "source": SOURCE, "separator": SEPARATOR,
                   "footer": FOOTER},
    }


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    path = tmp_path_factory.mktemp("inject") / "sources.json"
    path.write_text(json.dumps(SOURCES))
    return path


@pytest.fixture(scope="module")
def user_gw(serve_module, replay_server, sources):
    return serve_module(config(replay_server, sources, "user"))


@pytest.fixture(scope="module")
def system_gw(serve_module, replay_server, sources):
    return serve_module(config(replay_server, sources, "system"))


def sent_upstream(gw, replay, path: str, body: bytes) -> bytes:
    status, headers, data = raw_post(gw.url + path, body)
    assert status == 200, data[:2000]
    assert headers["x-citestream-search"] == "injected"
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    return ex.body


def test_user_string_content_stays_a_string(user_gw, replay):
    # Escapes the gateway must keep as they were: \u00e9, \", \n, \/.
    q = rb'Caf\u00e9 \"au lait\"\n in Lisbon\/Porto?'
    body = (b'{"model":"replay:openai_gpt41nano_text_usage", "web_search":true, "messages":[{"role":"user",'
            b'"content":"Earlier"},{"role":"user", "content" : "' + q + b'"}]}')
    got = sent_upstream(user_gw, replay, "/v1/chat/completions", body)
    block = json.dumps(rendered(), ensure_ascii=False)[1:-1].encode()  # serde_json escapes this way
    assert got == (b'{"model":"replay:openai_gpt41nano_text_usage", "messages":[{"role":"user",'
                   b'"content":"Earlier"},{"role":"user", "content" : "' + block + q + b'"}]}')
    assert json.loads(got)["messages"][1]["content"] == rendered() + 'Caf\u00e9 "au lait"\n in Lisbon/Porto?'


def test_user_parts_get_a_part_in_front_on_both_endpoints(user_gw, replay):
    parts = [{"type": "text", "text": "What is the capital?"}, {"type": "text", "text": "Briefly."}]
    for path, model in (("/v1/chat/completions", "replay:openai_gpt41nano_text_usage"),
                        ("/v1/messages", "replay:anthropic_basic_ping")):
        replay.clear()
        req = {"model": model, "max_tokens": 64, "web_search": True, "messages": [{"role": "user", "content": parts}]}
        got = json.loads(sent_upstream(user_gw, replay, path, json.dumps(req).encode()))
        assert got["messages"][0]["content"] == [{"type": "text", "text": rendered()}, *parts], path
    replay.clear()
    req = {"model": "replay:anthropic_basic_ping", "max_tokens": 64, "web_search": True,
           "messages": [{"role": "user", "content": "Lisbon?"}]}
    got = json.loads(sent_upstream(user_gw, replay, "/v1/messages", json.dumps(req).encode()))
    assert got["messages"][0]["content"] == rendered() + "Lisbon?"


def test_system_placement(system_gw, replay):
    req = {"model": "replay:openai_gpt41nano_text_usage", "web_search": True,
           "messages": [{"role": "user", "content": "Lisbon?"}]}
    got = json.loads(sent_upstream(system_gw, replay, "/v1/chat/completions", json.dumps(req).encode()))
    assert got["messages"] == [{"role": "system", "content": rendered()}, {"role": "user", "content": "Lisbon?"}]
    replay.clear()
    req = {"model": "replay:anthropic_basic_ping", "max_tokens": 64, "web_search": True, "system": "Be brief.",
           "messages": [{"role": "user", "content": "Lisbon?"}]}
    got = json.loads(sent_upstream(system_gw, replay, "/v1/messages", json.dumps(req).encode()))
    assert got["system"] == "Be brief.\n\n" + rendered()
    assert got["messages"] == req["messages"]


@pytest.mark.parametrize("inject, key", [
    ({"source": "[{n}] {titel}"}, "inject.source"),
    ({"placement": "assistant"}, "inject.placement"),
])
def test_a_bad_inject_table_is_a_start_up_error(tmp_path, inject, key):
    path = tmp_path / "citestream.toml"
    path.write_text(toml_dumps({"inject": inject}))
    p = subprocess.run([citestream_bin(), "serve", "--config", str(path), "--listen", "127.0.0.1:0"],
                       capture_output=True, timeout=30)
    assert p.returncode == 2
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"citestream serve: {key}: "), lines

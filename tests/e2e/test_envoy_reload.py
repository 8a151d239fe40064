"""SIGHUP reload of `citestream ext-proc` behind a real Envoy.

Keys mode: after the config file is rewritten and the processor gets
SIGHUP, the new key is accepted and the removed one is refused with 401 in
the endpoint's shape; a file that does not load is logged and the old
config keeps serving; the processor never restarts.
"""

from __future__ import annotations

import hashlib
import signal
import time

import pytest

from harness.checks import SOURCES, assert_error_shape, client_body, raw_post
from harness.envoy import Envoy, ExtProc
from harness.procs import toml_dumps

CHAT = "/v1/chat/completions"
FIXTURE = "openai_gpt4o_text_usage_chunk"


def doc(sources, key: str) -> dict:
    return {"search": {"provider": "static", "static": {"path": str(sources)}},
            "auth": {"mode": "keys"},
            "accounts": [{"id": "acme", "keys": ["sha256:" + hashlib.sha256(key.encode()).hexdigest()]}]}


@pytest.fixture
def stack(replay_server, tmp_json):
    sources = tmp_json(SOURCES, "sources.json")
    started = []
    try:
        proc = ExtProc.start(doc(sources, "sk-old"))
        started.append(proc)
        envoy = Envoy.start(processor=proc.port, upstream=replay_server.port)
        started.append(envoy)
        yield proc, envoy, sources
    finally:
        for p in reversed(started):
            p.stop()


def status_with(envoy, key: str, i: int) -> tuple[int, bytes]:
    body, _ = client_body(CHAT, f"replay:{FIXTURE}?seed={i}", True)
    status, headers, data = raw_post(envoy.url + CHAT, body, {"authorization": f"Bearer {key}"})
    if status == 200:
        assert headers["x-citestream-search"] == "injected"
    return status, data


def hup(proc, ok: bool) -> None:
    wanted = "config reloaded" if ok else "config reload failed; the old config stays"
    before = sum(1 for e in proc.log_lines() if e.get("message") == wanted)
    proc.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while sum(1 for e in proc.log_lines() if e.get("message") == wanted) == before:
        assert time.monotonic() < deadline, f"no {wanted!r} logged:\n{proc.output()[-4000:]}"
        time.sleep(0.02)


def test_sighup_swaps_the_keys(stack, replay):
    proc, envoy, sources = stack
    assert status_with(envoy, "sk-old", 1)[0] == 200
    assert status_with(envoy, "sk-new", 2)[0] == 401
    proc.config_path.write_text("[auth\n")
    hup(proc, ok=False)
    assert status_with(envoy, "sk-old", 3)[0] == 200
    proc.config_path.write_text(toml_dumps(doc(sources, "sk-new")))
    hup(proc, ok=True)
    assert status_with(envoy, "sk-new", 4)[0] == 200
    status, data = status_with(envoy, "sk-old", 5)
    assert status == 401
    assert_error_shape(CHAT, data)
    assert proc.proc.poll() is None

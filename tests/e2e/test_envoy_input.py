"""Bad input, auth, other paths and compressed bodies through Envoy +
`citestream ext-proc` (docs/reference/responses.md, "Errors and bad input"; docs/gateway.md; docs/envoy.md).

* A bad grounded request (not JSON, not an object, `web_search: "yes"`, no
  body) is answered by Envoy with our 400 in the endpoint's error shape; the
  upstream is not called; the next good request is served.
* `keys` mode: a missing or unknown key is a 401 in the endpoint's shape,
  on any `/v1/` path; a known key goes through.
* Any other request passes through untouched (bodies both ways).
* An upstream error status reaches the client exactly as the upstream
  sent it; a gzip-compressed upstream body is inflated and rewritten (the
  client gets it uncompressed), as `citestream serve` does.
"""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest

from harness.checks import SOURCES, assert_error_shape, client_body, raw_post
from harness.envoy import FULL_DUPLEX, STREAMED, Envoy, ExtProc
from harness.procs import citestream_rewrite

CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"
FIX = {CHAT: "openai_gpt4o_text_usage_chunk", MESSAGES: "anthropic_basic_ping"}
KEY = "sk-acme-123"
MODES = [STREAMED, FULL_DUPLEX]


def _config(sources, **extra):
    cfg = {"search": {"provider": "static", "static": {"path": str(sources)}},
           "plans": {"default": {"searches_per_day": 1000}}}
    cfg.update(extra)
    return cfg


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    path = tmp_path_factory.mktemp("src") / "sources.json"
    path.write_text(json.dumps(SOURCES))
    return path


def _stack(config, replay_server, modes=MODES):
    proc = ExtProc.start(config)
    envoys = {}
    try:
        for m in modes:
            envoys[m] = Envoy.start(processor=proc.port, upstream=replay_server.port, mode=m)
    except BaseException:
        for e in envoys.values():
            e.stop()
        proc.stop()
        raise
    return proc, envoys


@pytest.fixture(scope="module")
def envoys(replay_server, sources):
    proc, envoys = _stack(_config(sources), replay_server)
    yield envoys
    for e in envoys.values():
        e.stop()
    proc.stop()


@pytest.fixture(scope="module")
def keys_envoy(replay_server, sources):
    cfg = _config(sources, auth={"mode": "keys"},
                  accounts=[{"id": "acme", "plan": "default",
                             "keys": ["sha256:" + hashlib.sha256(KEY.encode()).hexdigest()]}])
    proc, envoys = _stack(cfg, replay_server, [STREAMED])
    yield envoys[STREAMED]
    envoys[STREAMED].stop()
    proc.stop()


def assert_still_serving(envoy, replay, path=CHAT, headers=None):
    replay.clear()
    status, hdrs, data = raw_post(envoy.url + path, client_body(path, f"replay:{FIX[path]}", True)[0], headers)
    assert status == 200 and hdrs["x-citestream-search"] == "injected", data[:500]
    assert len(replay.exchanges()) == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
@pytest.mark.parametrize("case", ["not-json", "not-object", "web_search-yes", "empty"])
def test_bad_body_is_our_400_in_the_endpoint_shape(envoys, replay, path, case, mode):
    body = {
        "not-json": b'{"model": "replay:x", "messages": [',
        "not-object": b'["model"]',
        "web_search-yes": client_body(path, f"replay:{FIX[path]}", False)[0].replace(b": true", b': "yes"', 1),
        "empty": b"",
    }[case]
    status, headers, data = raw_post(envoys[mode].url + path, body)
    assert status == 400, data
    assert headers["content-type"] == "application/json"
    err = assert_error_shape(path, data)
    if case == "web_search-yes":
        assert "web_search" in err["error"]["message"]
        if path == CHAT:
            assert err["error"]["param"] == "web_search"
    assert replay.exchanges() == [], "a bad request reached the upstream"
    assert_still_serving(envoys[mode], replay, path)


@pytest.mark.parametrize("path", [CHAT, MESSAGES, "/v1/models"])
@pytest.mark.parametrize("key", [None, "sk-wrong"])
def test_missing_or_unknown_key_is_a_401(keys_envoy, replay, path, key):
    headers = {}
    if key:
        headers = {"x-api-key": key} if path == MESSAGES else {"authorization": f"Bearer {key}"}
    if path == "/v1/models":
        r = httpx.get(keys_envoy.url + path, headers=headers, timeout=30)
        status, data = r.status_code, r.content
    else:
        status, _, data = raw_post(keys_envoy.url + path, client_body(path, f"replay:{FIX[path]}", True)[0],
                                   headers)
    assert status == 401, data
    err = assert_error_shape(MESSAGES if path == MESSAGES else CHAT, data)
    if path == MESSAGES:
        assert err["error"]["type"] == "authentication_error"
    else:
        assert err["error"]["code"] == "invalid_api_key"
    assert replay.exchanges() == []
    good = {"x-api-key": KEY} if path == MESSAGES else {"authorization": f"Bearer {KEY}"}
    if path != "/v1/models":
        assert_still_serving(keys_envoy, replay, path, good)


@pytest.mark.parametrize("mode", MODES)
def test_other_requests_pass_through_untouched(envoys, replay, mode):
    body = b'{"input": "x", "web_search": true, "odd":  [1,2]}'
    r = httpx.post(envoys[mode].url + "/v1/embeddings?x=1", content=body,
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 200
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    assert ex.body == body
    assert ex.path == "/v1/embeddings?x=1"
    assert "x-citestream-search" not in r.headers
    echo = r.json()
    assert echo["path"] == "/v1/embeddings?x=1"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_upstream_error_status_passes_through(envoys, replay, path, mode):
    body = client_body(path, f"replay:{FIX[path]}?status=429", True)[0]
    status, headers, data = raw_post(envoys[mode].url + path, body)
    assert status == 429
    assert_error_shape(path, data)
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    assert headers["x-citestream-search"] == "injected"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stream", [True, False])
def test_compressed_upstream_body_is_inflated_and_rewritten(envoys, replay, sources, mode, stream):
    path = CHAT
    body = client_body(path, f"replay:{FIX[path]}?gzip=1&seed=5", stream)[0]
    status, headers, data = raw_post(envoys[mode].url + path, body, {"accept-encoding": "gzip"})
    assert status == 200
    assert "content-encoding" not in headers
    upstream_body, _ = replay.body(FIX[path], stream, path)
    assert data == citestream_rewrite(upstream_body, sources, endpoint="chat")
    (ex,) = replay.wait_for(lambda log: len(log) == 1 and log[0].done)
    # We asked for identity; this upstream compresses anyway.
    assert ex.header("accept-encoding") == "identity"


@pytest.mark.parametrize("args, needle", [
    (["--config", "/nonexistent/citestream.toml"], "/nonexistent/citestream.toml"),
    (["--listen", "not-an-address"], "--listen"),
    (["--bogus", "1"], "--bogus"),
])
def test_start_up_errors_exit_2_with_one_line(args, needle):
    import subprocess

    from harness.procs import citestream_bin
    p = subprocess.run([citestream_bin(), "ext-proc", *args], capture_output=True, timeout=30)
    assert p.returncode == 2, p
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines

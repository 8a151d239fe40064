"""Bad input and auth through `citestream serve` (docs/reference/responses.md, "Errors and bad input"; docs/gateway.md).

Each bad request gets a clear 4xx in the endpoint's error shape, the
upstream is not called, and the gateway goes on serving the next good
request: non-JSON body, `web_search: "yes"`, a body over
`max_request_body`, an unknown path, a wrong method, a missing or unknown key
in `keys` mode, and slowloris clients trickling their headers. Keys reach the
upstream as the client sent them, or the configured `upstream.api_key` in
the header of the endpoint (Bearer on chat, x-api-key on messages).
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time

import httpx
import pytest

from harness.checks import SOURCES, assert_error_shape, client_body, raw_post

CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"
FIX = {CHAT: "openai_gpt4o_text_usage_chunk", MESSAGES: "anthropic_basic_ping"}
KEY = "sk-acme-123"


def _config(replay, sources, **extra):
    cfg = {"server": {"max_request_body": "4KiB", "header_read_timeout": "2s"},
           "upstream": {"base_url": replay.url},
           "search": {"provider": "static", "static": {"path": str(sources)}},
           "plans": {"default": {"searches_per_day": 1000}}}
    for table, values in extra.items():
        cfg[table] = {**cfg.get(table, {}), **values} if isinstance(values, dict) else values
    return cfg


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    path = tmp_path_factory.mktemp("src") / "sources.json"
    path.write_text(json.dumps(SOURCES))
    return path


@pytest.fixture(scope="module")
def gw(serve_module, replay_server, sources):
    return serve_module(_config(replay_server, sources))


@pytest.fixture(scope="module")
def keys_gw(serve_module, replay_server, sources):
    return serve_module(_config(
        replay_server, sources, auth={"mode": "keys"},
        accounts=[{"id": "acme", "plan": "default", "keys": ["sha256:" + hashlib.sha256(KEY.encode()).hexdigest()]}]))


def assert_still_serving(gw, replay, path=CHAT, headers=None):
    replay.clear()
    status, hdrs, data = raw_post(gw.url + path, client_body(path, f"replay:{FIX[path]}", True)[0], headers)
    assert status == 200 and hdrs["x-citestream-search"] == "injected", data[:500]
    assert len(replay.exchanges()) == 1


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
@pytest.mark.parametrize("case", ["not-json", "not-object", "web_search-yes", "too-large"])
def test_bad_body_is_a_4xx_in_the_endpoint_shape(gw, replay, path, case):
    body = {
        "not-json": b'{"model": "replay:x", "messages": [',
        "not-object": b'["model"]',
        "web_search-yes": client_body(path, f"replay:{FIX[path]}", False)[0].replace(b": true", b': "yes"', 1),
        "too-large": client_body(path, "replay:x" + "x" * 5000, False)[0],
    }[case]
    if case == "web_search-yes":
        assert b'"web_search" : "yes"' in body
    status, _, data = raw_post(gw.url + path, body)
    assert status == (413 if case == "too-large" else 400), data
    err = assert_error_shape(path, data)
    if case != "too-large":
        assert err["error"]["type"] == "invalid_request_error", err
    if case == "web_search-yes" and path == CHAT:
        assert err["error"]["param"] == "web_search", err
    assert replay.exchanges() == []
    assert_still_serving(gw, replay, path)


@pytest.mark.parametrize("method,path,want", [
    ("GET", "/nope", 404), ("POST", "/v2/chat/completions", 404), ("POST", "/", 404),
    ("POST", "/healthz", 405), ("DELETE", "/readyz", 405), ("POST", "/metrics", 405)])
def test_unknown_path_and_wrong_method(gw, replay, method, path, want):
    r = httpx.request(method, gw.url + path, content=b"{}", headers={"content-type": "application/json"})
    assert r.status_code == want, r.text
    assert replay.exchanges() == []
    assert_still_serving(gw, replay)


def test_other_v1_requests_are_proxied_untouched(gw, replay):
    r = httpx.get(gw.url + "/v1/models?limit=2", headers={"authorization": "Bearer sk-x", "x-custom": "1"})
    assert r.status_code == 200
    assert r.json() == {"object": "replay.echo", "method": "GET", "path": "/v1/models?limit=2", "body_bytes": 0}
    body = b'{"input": "caf\\u00e9",  "web_search": "left alone"}'
    r = httpx.post(gw.url + "/v1/embeddings", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200
    # Other methods on the grounded paths are other requests too (e.g. OpenAI's
    # GET /v1/chat/completions lists stored completions): proxied, not refused.
    r = httpx.get(gw.url + CHAT + "?limit=1")
    assert r.status_code == 200 and r.json()["method"] == "GET"
    get, post, listing = replay.exchanges()
    assert get.header("authorization") == "Bearer sk-x" and get.header("x-custom") == "1"
    assert post.body == body  # not parsed, not stripped
    assert listing.path == CHAT + "?limit=1"


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
@pytest.mark.parametrize("key", [None, "sk-unknown"])
def test_missing_or_unknown_key_is_a_401(keys_gw, replay, path, key):
    headers = {}
    if key:
        headers = {"x-api-key": key} if path == MESSAGES else {"authorization": f"Bearer {key}"}
    status, _, data = raw_post(keys_gw.url + path, client_body(path, f"replay:{FIX[path]}", True)[0], headers)
    assert status == 401
    err = json.loads(data)
    if path == MESSAGES:
        assert err["type"] == "error" and err["error"]["type"] == "authentication_error" and err["error"]["message"]
    else:
        assert err["error"]["type"] == "invalid_request_error" and err["error"]["code"] == "invalid_api_key"
        assert err["error"]["param"] is None and err["error"]["message"]
    assert replay.exchanges() == []
    # Either header works for either endpoint; the client's gateway key
    # never goes upstream.
    for hdrs in ({"authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}):
        assert_still_serving(keys_gw, replay, path, hdrs)
        ex = replay.exchanges()[0]
        assert ex.header("authorization") is None and ex.header("x-api-key") is None, ex.headers
        assert KEY not in json.dumps(ex.headers)


@pytest.mark.parametrize("forward", [False, True])
def test_keys_mode_forwards_the_clients_key_only_when_configured(serve, replay, sources, forward):
    gw = serve(_config(
        replay, sources, auth={"mode": "keys"}, upstream={"forward_client_auth": forward},
        accounts=[{"id": "acme", "plan": "default", "keys": ["sha256:" + hashlib.sha256(KEY.encode()).hexdigest()]}]))
    for path in (CHAT, MESSAGES, "/v1/models"):
        replay.clear()
        status, _, _ = raw_post(gw.url + path, client_body(CHAT, f"replay:{FIX[CHAT]}", True)[0]
                                if path == "/v1/models" else client_body(path, f"replay:{FIX[path]}", True)[0],
                                {"authorization": f"Bearer {KEY}"})
        (ex,) = replay.exchanges()
        assert ex.header("authorization") == (f"Bearer {KEY}" if forward else None), (path, ex.headers)


def test_configured_upstream_key_replaces_the_clients(serve, replay, sources):
    gw = serve(_config(replay, sources, upstream={"api_key": "sk-upstream"}))
    for path, header, value in ((CHAT, "authorization", "Bearer sk-upstream"), (MESSAGES, "x-api-key", "sk-upstream")):
        replay.clear()
        status, _, _ = raw_post(gw.url + path, client_body(path, f"replay:{FIX[path]}", True)[0],
                                {"authorization": "Bearer sk-client", "x-api-key": "sk-client"})
        assert status == 200
        (ex,) = replay.exchanges()
        assert ex.header(header) == value
        assert "sk-client" not in json.dumps(ex.headers), ex.headers


def _slowloris(port: int, results: list) -> None:
    """Trickles a request head one byte at a time (for at most 90 s) until the
    gateway closes the connection; appends (closed by the gateway, bytes got)."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-slow: "
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(0.3)
    got, closed, i = b"", False, 0
    deadline = time.monotonic() + 90
    while not closed and time.monotonic() < deadline:
        try:
            s.sendall(head[i:i + 1] if i < len(head) else b"a")
            i += 1
            data = s.recv(4096)
            closed = not data
            got += data
        except socket.timeout:
            continue
        except OSError:
            closed = True
    s.close()
    results.append((closed, got))


@pytest.mark.timeout(150)
def test_slowloris_clients_are_cut_off_and_others_still_served(gw, replay):
    results: list = []
    threads = [threading.Thread(target=_slowloris, args=(gw.port, results)) for _ in range(20)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    assert_still_serving(gw, replay)
    for t in threads:
        t.join(100)
    assert len(results) == 20
    for closed, got in results:
        # Closed by the gateway; whatever it said first is a 4xx (e.g. 408).
        assert closed, "the gateway kept a trickling connection open"
        assert got == b"" or got.startswith(b"HTTP/1.1 4"), got[:200]
    assert_still_serving(gw, replay)

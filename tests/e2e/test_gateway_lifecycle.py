"""`citestream serve` as a process: embedded defaults, drain on SIGTERM,
upstream failures, compressed upstream bodies, the Lisbon example through
the SDK, the operational endpoints, h2c, the CITESTREAM_* and ${VAR} config
rules and start-up errors (docs/gateway.md)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import threading

import httpx
import openai
import pytest

from harness.checks import SOURCES, assert_error_shape, client_body, raw_post
from harness.procs import ROOT, citestream_bin, citestream_rewrite, free_port

CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"
LONG = "openai_gpt41nano_text_usage"
LISBON = ROOT / "examples" / "lisbon"


def _config(replay, sources, **upstream):
    return {"server": {"shutdown_grace": "30s"},
            "upstream": {"base_url": replay.url, **upstream},
            "search": {"provider": "static", "static": {"path": str(sources)}},
            "plans": {"default": {"searches_per_day": 1000}}}


@pytest.fixture
def sources(tmp_json):
    return tmp_json(SOURCES, "sources.json")


def test_embedded_defaults_answer_a_grounded_question_through_the_sdk(serve):
    gw = serve(None)  # no --config: demo upstream, bundled corpus, memory quota, open auth
    out = gw.output()
    assert f"127.0.0.1:{gw.port}" in out and "curl" in out, out
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="anything", max_retries=0, timeout=60)
    question = [{"role": "user", "content": "What is the capital of Portugal?"}]
    whole = client.chat.completions.with_raw_response.create(
        model="citestream-demo", messages=question, extra_body={"web_search": True})
    assert whole.headers["x-citestream-search"] == "injected"
    msg = whole.parse().choices[0].message
    assert msg.annotations, msg
    for a in msg.annotations:
        assert a.type == "url_citation" and msg.content[a.url_citation.start_index:a.url_citation.end_index].startswith("[")
    assert whole.parse().model_extra["sources"]
    chunks = list(client.chat.completions.create(
        model="citestream-demo", messages=question, stream=True, extra_body={"web_search": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    ann = [a for c in chunks if c.choices for a in (c.choices[0].delta.model_extra or {}).get("annotations", [])]
    assert ann and "[1]" in text
    assert any("sources" in (c.model_extra or {}) for c in chunks)
    client.close()


@pytest.mark.parametrize("stream", [True, False])
def test_lisbon_offsets_through_the_sdk(serve, replay, stream):
    gw = serve(_config(replay, LISBON / "sources.json"))
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, timeout=60)
    q = [{"role": "user", "content": "Weather in Lisbon this weekend?"}]
    if stream:
        chunks = list(client.chat.completions.create(model="replay:lisbon?seed=3", messages=q, stream=True,
                                                     extra_body={"web_search": True}))
        anns = [a for c in chunks if c.choices for a in (c.choices[0].delta.model_extra or {}).get("annotations", [])]
        spans = [(a["url_citation"]["start_index"], a["url_citation"]["end_index"]) for a in anns]
    else:
        res = client.chat.completions.create(model="replay:lisbon", messages=q, extra_body={"web_search": True})
        spans = [(a.url_citation.start_index, a.url_citation.end_index) for a in res.choices[0].message.annotations]
    client.close()
    assert spans == [(66, 69), (137, 140)]


def test_sigterm_mid_stream_drains_refuses_new_connections_and_exits_0(serve, replay, sources):
    gw = serve(_config(replay, sources))
    body, _ = client_body(CHAT, f"replay:{LONG}?piece=2000&gap=0.05", True)
    got: dict = {}

    def client() -> None:
        got["response"] = raw_post(gw.url + CHAT, body)

    t = threading.Thread(target=client)
    t.start()
    replay.wait_for(lambda log: log and log[0].bytes_sent > 0)
    gw.proc.send_signal(signal.SIGTERM)
    refused_while_streaming, probes = None, []
    for _ in range(200):  # new connections are refused while the stream drains
        try:
            socket.create_connection(("127.0.0.1", gw.port), timeout=1).close()
            probes.append("accepted")
        except ConnectionRefusedError:
            refused_while_streaming = not replay.exchanges()[0].completed
            break
        except OSError as e:
            probes.append(type(e).__name__)  # e.g. reset: queued before the listener closed
        t.join(0.05)
    assert refused_while_streaming is not None, f"the gateway still accepts connections after SIGTERM: {probes}"
    assert refused_while_streaming, f"new connections were refused only once the open stream had ended: {probes}"
    t.join(60)
    status, headers, data = got["response"]
    assert status == 200
    upstream = replay.body(LONG, True)[0]
    assert data == citestream_rewrite(upstream, sources)  # the open stream completed, whole
    assert gw.proc.wait(60) == 0


def test_upstream_error_status_and_body_are_relayed(serve, replay, sources):
    gw = serve(_config(replay, sources))
    for path in (CHAT, MESSAGES):
        status, _, data = raw_post(gw.url + path, client_body(path, "replay:x?status=429", True)[0])
        assert status == 429
        want = {"type": "error", "error": {"type": "api_error", "message": "replayed error 429"}} if path == MESSAGES \
            else {"error": {"message": "replayed error 429", "type": "replay_error", "param": None, "code": "429"}}
        assert json.loads(data) == want


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_upstream_refused_is_502_and_timeout_is_504(serve, replay, sources, path):
    refused = serve(_config(replay, sources, base_url=f"http://127.0.0.1:{free_port()}"))
    status, _, data = raw_post(refused.url + path, client_body(path, "replay:anthropic_basic_ping", True)[0])
    assert status == 502
    assert_error_shape(path, data)
    slow = serve(_config(replay, sources, headers_timeout="1s"))
    status, _, data = raw_post(slow.url + path, client_body(path, "replay:anthropic_basic_ping?delay=30", True)[0])
    assert status == 504
    assert_error_shape(path, data)


def test_compressed_upstream_body_is_never_corrupted(serve, replay):
    gw = serve(_config(replay, LISBON / "sources.json"))
    status, headers, data = raw_post(gw.url + CHAT, client_body(CHAT, "replay:lisbon?gzip=1", True)[0],
                                     {"accept-encoding": "gzip"})
    assert status == 200
    plain = (LISBON / "upstream.sse").read_bytes()
    if headers.get("content-encoding") == "gzip":
        # passed through untouched, and a header says why it was not rewritten
        assert gzip.decompress(data) == plain
        assert any("encoding" in v for k, v in headers.items() if k.startswith("x-citestream")), headers
    else:
        assert data == citestream_rewrite(plain, LISBON / "sources.json")
    (ex,) = replay.exchanges()
    assert ex.header("accept-encoding") in (None, "identity")


def test_health_ready_metrics_and_request_id(serve, replay, sources):
    gw = serve(_config(replay, sources))
    assert httpx.get(gw.url + "/healthz").status_code == 200
    assert httpx.get(gw.url + "/readyz").status_code == 200
    status, headers, _ = raw_post(gw.url + CHAT, client_body(CHAT, "replay:lisbon", True)[0])
    assert status == 200 and headers["x-request-id"]
    assert replay.exchanges()[0].header("x-request-id") == headers["x-request-id"]
    m = httpx.get(gw.url + "/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    assert "# TYPE" in m.text
    logs = gw.log_lines()
    assert any(line.get("request_id") == headers["x-request-id"] or headers["x-request-id"] in json.dumps(line)
               for line in logs), logs[-5:]


def test_h2c_prior_knowledge_stream(serve, replay, sources):
    gw = serve(_config(replay, sources))
    body, _ = client_body(CHAT, f"replay:{LONG}?seed=5", True)
    with httpx.Client(http1=False, http2=True, timeout=60) as c:
        with c.stream("POST", gw.url + CHAT, content=body, headers={"content-type": "application/json"}) as r:
            data = b"".join(r.iter_raw())
            assert r.http_version == "HTTP/2" and r.status_code == 200
    assert data == citestream_rewrite(replay.body(LONG, True)[0], sources)


def test_env_overrides_and_variables(serve, replay, sources):
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = _config(replay, sources)
    cfg["upstream"] = {"base_url": dead, "api_key": "${E2E_UPSTREAM_KEY}"}
    gw = serve(cfg, env={"CITESTREAM_UPSTREAM_URL": replay.url, "E2E_UPSTREAM_KEY": "sk-from-env"})
    status, _, _ = raw_post(gw.url + CHAT, client_body(CHAT, "replay:lisbon", True)[0])
    assert status == 200
    assert replay.exchanges()[0].header("authorization") == "Bearer sk-from-env"


@pytest.mark.parametrize("toml,names", [
    ('[upstream]\napi_key = "${E2E_SURELY_UNSET_VAR}"\n', ["E2E_SURELY_UNSET_VAR"]),
    ('[server]\nshutdown_grace = "30x"\n', ["shutdown_grace"]),
    ('[server]\nno_such_key = 1\n', ["no_such_key"]),
])
def test_config_errors_are_one_line_naming_the_key_and_exit_2(tmp_path, toml, names):
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    proc = subprocess.run([citestream_bin(), "serve", "--config", str(path), "--listen", f"127.0.0.1:{free_port()}"],
                          capture_output=True, timeout=30, env={k: v for k, v in os.environ.items()
                                                                if not k.startswith("E2E_")})
    assert proc.returncode == 2, proc
    err = proc.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and all(n in err for n in names), err

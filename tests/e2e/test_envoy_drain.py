"""Draining `citestream ext-proc` behind a real Envoy (`server.drain_delay`).

* SIGTERM with `drain_delay = 1500ms`: a probe polling `/readyz` on the
  metrics port sees 503 from the signal on; Envoy's gRPC health checker
  sees the processor fail while its gRPC port still accepts connections;
  a new request through Envoy is still served, grounded, inside the delay;
  the gRPC port stops accepting no earlier than the delay; a stream open
  since before the signal runs on after the port closed and completes with
  exactly the rewritten bytes; then the process exits 0, after that stream.
* SIGINT skips the delay: with `drain_delay = 30s` the process exits at
  once.
"""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from harness.checks import SOURCES, client_body, raw_post
from harness.envoy import STREAMED, Envoy, ExtProc
from harness.envoy import _port_open as accepts
from harness.procs import citestream_rewrite, http_status
from test_envoy_observability import hc, with_health_checks

FIXTURE = "openai_gpt4o_text_usage_chunk"
CHAT = "/v1/chat/completions"
DELAY = 1.5


@pytest.fixture
def start(replay_server, tmp_json):
    sources = tmp_json(SOURCES, "sources.json")
    started = []

    def go(server: dict):
        cfg = {"search": {"provider": "static", "static": {"path": str(sources)}}, "server": server}
        proc = ExtProc.start(cfg)
        started.append(proc)
        envoy = Envoy.start(processor=proc.port, upstream=replay_server.port, mode=STREAMED,
                            transform=with_health_checks)
        started.append(envoy)
        return proc, envoy

    yield go
    for p in reversed(started):
        p.stop()


def test_sigterm_drain_delay_then_close_then_open_streams_finish(start, replay, tmp_json):
    proc, envoy = start({"drain_delay": f"{int(DELAY * 1000)}ms", "shutdown_grace": "30s"})
    deadline = time.monotonic() + 20
    while hc(envoy).get("success", 0) < 1:
        assert time.monotonic() < deadline, "no health check success"
        time.sleep(0.05)
    assert hc(envoy).get("failure", 0) == 0

    # The probe: (time, /readyz status, gRPC port accepts, health check failures).
    seen: list = []
    stop = threading.Event()

    def probe():
        base = f"http://127.0.0.1:{proc.metrics_port}/readyz"
        n = 0
        failures = 0
        while not stop.is_set():
            if n % 10 == 0:
                try:
                    failures = hc(envoy).get("failure", 0)
                except OSError:
                    pass
            seen.append((time.monotonic(), http_status(base, 0.5), accepts(proc.port), failures))
            n += 1
            time.sleep(0.01)

    prober = threading.Thread(target=probe)
    prober.start()

    # A stream of ~12 s (30 pieces, 0.4 s apart), open across the delay and
    # well after it, however slow the machine.
    body, _ = client_body(CHAT, f"replay:{FIXTURE}?piece=300&gap=0.4", True)
    upstream_body, _ = replay.body(FIXTURE, True, CHAT)
    received, first, done = bytearray(), threading.Event(), {}

    def stream():
        with httpx.Client(timeout=60) as c:
            with c.stream("POST", envoy.url + CHAT, content=body,
                          headers={"content-type": "application/json"}) as r:
                done["status"] = r.status_code
                done["search"] = r.headers.get("x-citestream-search")
                for chunk in r.iter_raw():
                    received.extend(chunk)
                    first.set()
        done["at"] = time.monotonic()
        first.set()

    streamer = threading.Thread(target=stream)
    streamer.start()
    assert first.wait(30), "the stream never started"
    assert "at" not in done, "the stream finished before the signal"
    time.sleep(0.1)
    t_term = time.monotonic()
    proc.proc.send_signal(signal.SIGTERM)

    # Inside the delay: a new request is still served, grounded.
    time.sleep(0.5)
    new_body, _ = client_body(CHAT, f"replay:{FIXTURE}?seed=2", True)
    status, headers, _ = raw_post(envoy.url + CHAT, new_body)
    assert status == 200 and headers["x-citestream-search"] == "injected"
    assert time.monotonic() - t_term < DELAY, "the machine was too slow to ask inside the delay"

    code = proc.proc.wait(30)
    exited = time.monotonic()
    stop.set()
    prober.join()
    streamer.join(30)
    assert code == 0, proc.output()

    before = [s for s in seen if s[0] < t_term]
    after = [(at - t_term, ready, up, fails) for at, ready, up, fails in seen if at > t_term]
    assert before and all(ready == 200 and up for _, ready, up, _ in before), before
    closed = [at for at, _, up, _ in after if not up]
    assert closed, "the gRPC port never stopped accepting"
    closed_at = closed[0]
    assert closed_at >= DELAY - 0.1, f"the gRPC port closed {closed_at:.2f}s after SIGTERM, inside the delay"
    # Until the port closed: draining (503) from the first answer after the
    # signal that saw it, and the port still accepting.
    inside = [(at, ready, up, fails) for at, ready, up, fails in after if at < closed_at]
    statuses = [ready for _, ready, _, _ in inside]
    assert 503 in statuses, statuses
    assert all(s == 503 for s in statuses[statuses.index(503):]), statuses
    assert all(up for _, _, up, _ in inside)
    assert any(fails >= 1 for _, _, up, fails in inside), "no failed gRPC health check inside the delay"

    # The stream open since before the signal outlived the listener and is whole.
    assert done["status"] == 200 and done["search"] == "injected"
    assert done["at"] - t_term > closed_at, "the stream ended before the listener closed"
    assert bytes(received) == citestream_rewrite(upstream_body, tmp_json(SOURCES, "expect-sources.json"))
    assert exited >= done["at"] - 0.05, "the process exited before its open stream finished"


def test_sigint_skips_the_drain_delay(start):
    proc, _ = start({"drain_delay": "30s"})
    t0 = time.monotonic()
    proc.proc.send_signal(signal.SIGINT)
    assert proc.proc.wait(10) == 0, proc.output()
    assert time.monotonic() - t0 < 5

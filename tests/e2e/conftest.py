"""pytest fixtures shared by every end-to-end test (gateway, Envoy, LiteLLM).

* `replay_server`: the loopback replay upstream (harness/replay.py), one per
  session; `replay`: the same, its log cleared before the test.
* `serve`: a factory `serve(config, env=None, args=None) -> Serve` that starts
  `citestream serve`; every process it started is stopped at teardown, and
  the output of each is attached to a failing test's report.
  `serve_module`: the same, for processes shared by a module.
* `redis_server`: a real `redis-server` on a free port for one test.
* `tmp_json`: writes an object as JSON into the test's tmp dir, returns the path.
* `ROOT`, `FIXTURES`: repository paths.

The tests need the `citestream` binary ($CITESTREAM_BIN, else
target/debug/citestream) and run in target/e2e-venv (scripts/e2e-venv.sh);
nothing skips: a missing piece is an error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.procs import ROOT, RedisServer, Serve, citestream_bin  # noqa: E402
from harness.replay import FIXTURES, ReplayServer  # noqa: E402

__all__ = ["ROOT", "FIXTURES"]


def pytest_sessionstart(session):
    citestream_bin()  # fails the session at once when the binary is missing


def pytest_collection_finish(session):
    # The Python package (python/) is built once, before any test runs, when
    # a collected test needs it (harness/pyext.py).
    from harness import pyext

    if pyext.needed(session.items):
        pyext.build()


@pytest.fixture(scope="session")
def replay_server():
    server = ReplayServer().start()
    yield server
    server.stop()


@pytest.fixture
def replay(replay_server):
    replay_server.clear()
    replay_server.default = None
    yield replay_server


class ServeFactory:
    """Starts `citestream serve` processes and stops them all at `close()`."""

    def __init__(self):
        self.started: list[Serve] = []

    def __call__(self, config, env=None, args=None, timeout=30.0, cwd=None) -> Serve:
        s = Serve.start(config, env=env, args=args, timeout=timeout, cwd=cwd)
        self.started.append(s)
        return s

    def close(self, failed: bool) -> None:
        for s in self.started:
            s.stop()
        if failed:
            for i, s in enumerate(self.started):
                print(f"\n===== citestream serve #{i} output =====\n{s.output()[-20000:]}")


@pytest.fixture
def serve(request):
    factory = ServeFactory()
    yield factory
    rep = getattr(request.node, "rep_call", None)
    factory.close(rep is not None and rep.failed)


@pytest.fixture(scope="module")
def serve_module(request):
    """Like `serve`, for processes shared by a module's tests."""
    factory = ServeFactory()
    yield factory
    factory.close(request.session.testsfailed > 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def redis_server():
    server = RedisServer.start()
    yield server
    server.stop()


@pytest.fixture
def tmp_json(tmp_path):
    counter = iter(range(1_000_000))

    def write(obj, name: str | None = None) -> Path:
        path = tmp_path / (name or f"data{next(counter)}.json")
        path.write_text(json.dumps(obj, ensure_ascii=False))
        return path

    return write

"""pytest fixtures shared by every end-to-end test (gateway, Envoy, LiteLLM).

* `replay`: the loopback replay upstream (harness/replay.py), one per
  session, its log cleared before each test.
* `serve`: a factory `serve(config, env=None, args=None) -> Serve` that starts
  `citestream serve`; every process it started is stopped at teardown, and
  the output of each is attached to a failing test's report.
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


@pytest.fixture(scope="session")
def _replay_session():
    server = ReplayServer().start()
    yield server
    server.stop()


@pytest.fixture
def replay(_replay_session):
    _replay_session.clear()
    _replay_session.default = None
    yield _replay_session


@pytest.fixture
def serve(request):
    started: list[Serve] = []

    def start(config, env=None, args=None, timeout=30.0) -> Serve:
        s = Serve.start(config, env=env, args=args, timeout=timeout)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for i, s in enumerate(started):
            print(f"\n===== citestream serve #{i} output =====\n{s.output()[-20000:]}")


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

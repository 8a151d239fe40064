"""Redis restarted under load, through `citestream serve` (docs/gateway.md,
"Running in production"; the store's contract in crates/host/src/store/).

A real `serve` with `quota.store = "redis"` in front of the replay upstream,
eight clients sending `web_search: true` streams without pause, while the
redis-server is killed (SIGKILL) and started again on the same port, with
and without persistence (an append-only file synced on every write):

* no request fails: every answer is a 200, with its sources while Redis is
  up (`injected`) and without them while it is down (`quota-unavailable`);
* every request that started after the new server answered PING runs with
  search: the store re-makes the dropped connection and tries the
  operation once more, so no replica's first request after the restart
  goes without search;
* the counts in Redis afterwards are consistent with the requests made.
  What "consistent" means depends on what the restart kept:
  - without persistence the restarted server starts from nothing, so its
    `committed` counts exactly the searches reserved on it: at least every
    search started after it was up, at most every search still running
    when the old one died; and no reservation is left open (a search whose
    reservation the old server held commits to nothing);
  - with persistence every acknowledged reservation survives, so
    `committed + open reservations` is every search let through, plus at
    most one orphan per request in flight at the crash (a reserve that ran
    but whose reply was lost), and the open reservations (commits that
    failed while Redis was down; they hold their slot until their lease
    ends, never letting more through than the limit) are at most the
    requests in flight across the downtime;
  - in both, `committed` never exceeds the searches let through.
* With no request while Redis is down, the first request on each of two
  replicas after the restart searches (its operation fails on the dead
  connection and is tried once more on a new one) and no quota error is
  counted.
* A start with Redis unreachable logs the start-up warning and serves
  (without search); once a redis-server comes up on that port the next
  request runs with search, with no restart of the gateway.
"""

from __future__ import annotations

import datetime
import re
import threading
import time

import pytest
import redis

from harness.checks import SOURCES, client_body, raw_post
from harness.procs import RedisServer, free_port

FIXTURE = "openai_gpt4o_text_usage_chunk"
CHAT = "/v1/chat/completions"
CLIENTS = 8
LIMIT = 100_000  # never reached: the counts are what is checked


def config(replay, sources_path, redis_url):
    return {
        "upstream": {"base_url": replay.url},
        "search": {"provider": "static", "static": {"path": str(sources_path)}},
        "plans": {"default": {"searches_per_day": LIMIT}},
        "quota": {"store": "redis", "redis_url": redis_url},
    }


def today_key(account: str = "anonymous") -> str:
    return f"citestream:quota:{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}:{account}"


class Load:
    """`CLIENTS` threads sending grounded streams until `stop()`; each
    request is logged as (start, end, status, x-citestream-search, sources
    seen)."""

    def __init__(self, gw):
        self.gw, self.log, self.lock = gw, [], threading.Lock()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run) for _ in range(CLIENTS)]
        self.url = SOURCES[0]["url"].encode()

    def _run(self):
        body, _ = client_body(CHAT, f"replay:{FIXTURE}?gap=0.002", True)
        while not self.done.is_set():
            t0 = time.monotonic()
            try:
                status, headers, data = raw_post(self.gw.url + CHAT, body, timeout=30)
                outcome = headers.get("x-citestream-search", "")
            except Exception as e:  # noqa: BLE001 - a failed request is what is counted
                status, outcome, data = None, repr(e), b""
            with self.lock:
                self.log.append((t0, time.monotonic(), status, outcome, self.url in data))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        for t in self.threads:
            t.join(60)

    def snapshot(self):
        with self.lock:
            return list(self.log)

    def wait(self, predicate, what: str, timeout: float = 45.0):
        deadline = time.monotonic() + timeout
        while not predicate(self.snapshot()):
            assert time.monotonic() < deadline, f"{what}: {self.snapshot()[-20:]}"
            time.sleep(0.02)


def usage(r: redis.Redis) -> tuple[int, int]:
    """(committed, open reservations) of today's anonymous key."""
    fields = {k.decode(): v for k, v in r.hgetall(today_key()).items()}
    return int(fields.get("committed", 0)), sum(1 for k in fields if k.startswith("r:"))


@pytest.mark.parametrize("persist", [False, True], ids=["no-persistence", "appendonly"])
def test_redis_killed_and_started_again_under_load(serve, replay, tmp_json, persist):
    first = RedisServer.start(persist=persist)
    port, folder = first.port, first.tmp
    second = None
    try:
        gw = serve(config(replay, tmp_json(SOURCES, "sources.json"), first.url))
        with Load(gw) as load:
            load.wait(lambda log: sum(o == "injected" for *_, o, _ in log) >= 30, "no load")
            killed_at = time.monotonic()
            first.kill()
            load.wait(lambda log: sum(o == "quota-unavailable" and s > killed_at for s, _, _, o, _ in log) >= 5,
                      "no request saw Redis down")
            restart_at = time.monotonic()
            second = RedisServer.start(port=port, tmp=folder, persist=persist)
            up_at = time.monotonic()
            load.wait(lambda log: sum(o == "injected" and s > up_at for s, _, _, o, _ in log) >= 40,
                      "no search after the restart")
        log = load.snapshot()
        time.sleep(0.5)  # the last commits
        committed, open_ = usage(redis.Redis(port=port))
    finally:
        for server in (second, first):
            if server is not None:
                server.stop()

    failed = [e for e in log if e[2] != 200]
    assert not failed, failed[:10]
    assert {o for *_, o, _ in log} == {"injected", "quota-unavailable"}, {o for *_, o, _ in log}
    # An injected answer carries its sources, an unavailable one has none.
    assert all(seen == (o == "injected") for *_, o, seen in log)
    after = [o for s, _, _, o, _ in log if s > up_at]
    assert after and set(after) == {"injected"}, after[:20]
    injected = sum(o == "injected" for *_, o, _ in log)
    # Requests running while the old server died, and across the downtime.
    at_crash = sum(1 for s, e, *_ in log if s <= killed_at <= e)
    across = sum(1 for s, e, *_ in log if s <= up_at and e >= killed_at)
    print(f"\n{'appendonly' if persist else 'no persistence'}: {len(log)} requests, {injected} injected, "
          f"{len(log) - injected} quota-unavailable; Redis: committed {committed}, open {open_}; "
          f"{at_crash} in flight at the crash, {across} across the downtime, "
          f"down {up_at - killed_at:.2f} s (restart {up_at - restart_at:.2f} s)")
    assert committed <= injected
    if persist:
        assert injected <= committed + open_ <= injected + at_crash
        assert open_ <= across
    else:
        started_up = sum(1 for s, _, _, o, _ in log if s > up_at and o == "injected")
        still_running = sum(1 for _, e, _, o, _ in log if e > killed_at and o == "injected")
        assert started_up <= committed <= still_running
        assert open_ == 0
    errors = re.search(r"^citestream_quota_errors_total (\d+)$", gw.metrics(), re.M)
    assert errors and int(errors.group(1)) >= 5  # the downtime was seen and counted


@pytest.mark.parametrize("persist", [False, True], ids=["no-persistence", "appendonly"])
def test_the_first_request_on_each_replica_after_a_quiet_restart_searches(serve, replay, tmp_json, persist):
    """No request while Redis is down: each replica still holds its
    connection to the dead server, so its first operation afterwards fails
    on it and is tried once more on a new one (the issue was that first
    request going without search)."""
    first = RedisServer.start(persist=persist)
    second = None
    try:
        cfg = config(replay, tmp_json(SOURCES, "sources.json"), first.url)
        replicas = [serve(cfg), serve(cfg)]
        body, _ = client_body(CHAT, f"replay:{FIXTURE}", True)
        for gw in replicas:
            assert raw_post(gw.url + CHAT, body)[1]["x-citestream-search"] == "injected"
        time.sleep(0.2)
        assert usage(redis.Redis(port=first.port)) == (2, 0)
        first.kill()
        second = RedisServer.start(port=first.port, tmp=first.tmp, persist=persist)
        for i, gw in enumerate(replicas):
            status, headers, data = raw_post(gw.url + CHAT, body)
            assert status == 200 and headers["x-citestream-search"] == "injected", (i, headers)
            assert SOURCES[0]["url"].encode() in data
        time.sleep(0.2)
        # The two before the crash survive only with persistence.
        assert usage(redis.Redis(port=second.port)) == ((4 if persist else 2), 0)
        for gw in replicas:
            errors = re.search(r"^citestream_quota_errors_total (\d+)$", gw.metrics(), re.M)
            assert errors and int(errors.group(1)) == 0, "the retry on a new connection is not an error"
    finally:
        for server in (second, first):
            if server is not None:
                server.stop()


def test_start_with_redis_unreachable_warns_serves_then_uses_it(serve, replay, tmp_json):
    port = free_port()
    gw = serve(config(replay, tmp_json(SOURCES, "sources.json"), f"redis://127.0.0.1:{port}/0"))
    deadline = time.monotonic() + 10
    while not any("cannot be reached at start-up" in line.get("message", "") and line.get("level") == "WARN"
                  for line in gw.log_lines()):
        assert time.monotonic() < deadline, gw.output()
        time.sleep(0.05)
    body, _ = client_body(CHAT, f"replay:{FIXTURE}", True)
    status, headers, data = raw_post(gw.url + CHAT, body)
    assert status == 200 and headers["x-citestream-search"] == "quota-unavailable"
    assert SOURCES[0]["url"].encode() not in data
    server = RedisServer.start(port=port)
    try:
        status, headers, data = raw_post(gw.url + CHAT, body)
        assert status == 200 and headers["x-citestream-search"] == "injected", headers
        assert headers["x-citestream-searches-remaining"] == str(LIMIT - 1)
        assert SOURCES[0]["url"].encode() in data
        time.sleep(0.2)
        assert usage(redis.Redis(port=port)) == (1, 0)
    finally:
        server.stop()

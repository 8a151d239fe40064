"""SIGHUP reload and SIGTERM/SIGINT drain of the real `citestream serve`.

* Under load: 1,000 requests from 8 clients while the config file is
  rewritten and reloaded 20 times (each version adds a key and drops the
  previous version's): zero failed requests with the key every version has;
  after each reload the new key works and the dropped one gets 401.
* Quota counts survive a reload (the memory store is kept when `[quota]` is
  unchanged); the new plan's limit applies to them.
* An open stream finishes with the config it started with, byte for byte,
  although the reload removed its key and changed the template.
* A file that does not load (bad TOML, an unknown key, a missing folder) is
  logged and the old config keeps serving.
* The search provider and local index are reloaded (static -> local folder).
* Drain: with `server.drain_delay`, a probe polling `/readyz` sees 503 while
  requests are still answered, before the listener closes; exit 0. SIGINT
  skips the delay.
"""

from __future__ import annotations

import hashlib
import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from harness.checks import SOURCES, raw_post
from harness.procs import citestream_rewrite, toml_dumps

STABLE = "sk-stable"


def sha(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def doc(sources, keys: list[str], *, per_day: int = 1_000_000, extra: dict | None = None) -> dict:
    d = {
        "search": {"provider": "static", "static": {"path": str(sources)}},
        "auth": {"mode": "keys"},
        "plans": {"default": {"searches_per_day": per_day}},
        "accounts": [{"id": "acme", "keys": [sha(k) for k in keys]}],
    }
    for k, v in (extra or {}).items():
        d.setdefault(k, {}).update(v)
    return d


def reloaded(gw, before: int, timeout: float = 60.0) -> None:
    """Waits for the reload after `before` "config reloaded" lines to be logged."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [entry for entry in gw.log_lines() if entry.get("message") in ("config reloaded",
                 "config reload failed; the old config stays")]
        if len(lines) > before:
            return
        time.sleep(0.02)
    raise AssertionError(f"no reload logged:\n{gw.output()[-5000:]}")


def log_count(gw) -> int:
    return sum(1 for entry in gw.log_lines()
               if entry.get("message") in ("config reloaded", "config reload failed; the old config stays"))


def hup(gw, ok: bool = True) -> None:
    """SIGHUP, and waits for the reload to be logged: applied (`ok`) or failed."""
    n = log_count(gw)
    gw.proc.send_signal(signal.SIGHUP)
    reloaded(gw, n)
    last = [e for e in gw.log_lines() if e.get("message") in ("config reloaded",
            "config reload failed; the old config stays")][n]
    assert (last["message"] == "config reloaded") == ok, last


def ask(url: str, key: str, *, search: bool = True, client: httpx.Client | None = None) -> httpx.Response:
    body = {"model": "citestream-demo", "web_search": search,
            "messages": [{"role": "user", "content": "What is the capital of Portugal?"}]}
    c = client or httpx
    return c.post(url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"},
                  timeout=30)


def sources_file(tmp_path):
    path = tmp_path / "sources.json"
    path.write_text(json.dumps(SOURCES))
    return path


def test_reload_under_load_keys_come_and_go(serve, tmp_path):
    sources = sources_file(tmp_path)
    gw = serve(doc(sources, [STABLE, "sk-v0"]))
    cfg = gw.config_path
    results: list[int] = []
    lock = threading.Lock()
    done = [0]  # reloads applied so far

    def client(n: int) -> None:
        with httpx.Client() as c:
            for _ in range(n):
                # The load keeps pace with the reloads (at most 48 answers
                # per reload ahead), so the two overlap from start to end.
                while len(results) >= 48 * (done[0] + 1) and done[0] < 20:
                    time.sleep(0.001)
                r = ask(gw.url, STABLE, client=c)
                ok = r.status_code == 200 and r.headers["x-citestream-search"] == "injected" \
                    and "[1]" in r.json()["choices"][0]["message"]["content"]
                with lock:
                    results.append(r.status_code if ok else -r.status_code)

    with ThreadPoolExecutor(8) as pool, httpx.Client() as probe_client:
        futures = [pool.submit(client, 125) for _ in range(8)]
        for v in range(1, 21):
            # Spread the reloads over the load: reload v after 45 v answers.
            deadline = time.monotonic() + 120
            while len(results) < 45 * v and time.monotonic() < deadline:
                time.sleep(0.002)
            cfg.write_text(toml_dumps(doc(sources, [STABLE, f"sk-v{v}"])))
            during = len(results)
            hup(gw)
            done[0] = v
            assert ask(gw.url, f"sk-v{v}", client=probe_client).status_code == 200, f"version {v}'s key refused"
            assert ask(gw.url, f"sk-v{v - 1}", client=probe_client).status_code == 401, \
                f"version {v - 1}'s key still works"
        for f in futures:
            f.result()
    assert during < 1000, "the load was over before the last reload: it did not overlap"
    assert len(results) == 1000
    assert results.count(200) == 1000, sorted(set(results))
    reloads = [e for e in gw.log_lines() if e.get("message") == "config reloaded"]
    assert len(reloads) == 20
    assert gw.proc.poll() is None


def test_counts_survive_and_the_new_plan_applies(serve, tmp_path):
    sources = sources_file(tmp_path)
    gw = serve(doc(sources, [STABLE], per_day=5))
    for left in (4, 3, 2):
        assert ask(gw.url, STABLE).headers["x-citestream-searches-remaining"] == str(left)
    gw.config_path.write_text(toml_dumps(doc(sources, [STABLE], per_day=4)))
    hup(gw)
    r = ask(gw.url, STABLE)
    assert (r.headers["x-citestream-search"], r.headers["x-citestream-searches-remaining"]) == ("injected", "0")
    r = ask(gw.url, STABLE)
    assert r.headers["x-citestream-search"] == "quota-exhausted"


def test_an_open_stream_keeps_its_config(serve, tmp_path, replay):
    sources = sources_file(tmp_path)
    gw = serve(doc(sources, [STABLE], extra={"upstream": {"base_url": replay.url}}))
    name = "openai_gpt41nano_text_usage"
    body = json.dumps({"model": f"replay:{name}?gap=0.05", "stream": True, "web_search": True,
                       "messages": [{"role": "user", "content": "Lisbon?"}]}).encode()
    got = {}

    def stream() -> None:
        got["r"] = raw_post(gw.url + "/v1/chat/completions", body, {"authorization": f"Bearer {STABLE}"})

    t = threading.Thread(target=stream)
    t.start()
    replay.wait_for(lambda log: len(log) == 1)
    # The new config drops the stream's key and changes the template.
    gw.config_path.write_text(toml_dumps(doc(sources, ["sk-other"], extra={
        "upstream": {"base_url": replay.url}, "inject": {"header": "NEW\n"}})))
    hup(gw)
    assert ask(gw.url, STABLE).status_code == 401
    assert replay.exchanges()[0].done is False, "the stream ended before the reload: make it slower"
    t.join(60)
    status, headers, data = got["r"]
    assert status == 200 and headers["x-citestream-search"] == "injected"
    upstream_body, _ = replay.body(name, True)
    assert data == citestream_rewrite(upstream_body, sources)
    assert "NEW\n" not in replay.exchanges()[0].json()["messages"][0]["content"]


def test_a_bad_file_keeps_the_old_config(serve, tmp_path):
    sources = sources_file(tmp_path)
    gw = serve(doc(sources, [STABLE]))
    good = gw.config_path.read_text()
    for bad in ("[auth\nmode = ", good + "\n[server]\nlistn = \"x\"\n",
                toml_dumps(doc(sources, ["sk-new"], extra={"search": {"provider": "local",
                                                                     "local": {"path": str(tmp_path / "nope")}}})),
                toml_dumps(doc(sources, ["sk-new"], extra={"inject": {"source": "{nn}"}}))):
        gw.config_path.write_text(bad)
        hup(gw, ok=False)
        assert ask(gw.url, STABLE).status_code == 200
        assert ask(gw.url, "sk-new").status_code == 401
    failed = [e for e in gw.log_lines() if e.get("message") == "config reload failed; the old config stays"]
    assert len(failed) == 4 and all(e["level"] == "WARN" and "\n" not in e["error"] for e in failed), failed
    assert "server.listn" in failed[1]["error"] and "inject.source" in failed[3]["error"]
    # A good file again: it applies (`--listen` is applied again over the
    # file's `server.listen`, so the address stays).
    gw.config_path.write_text(toml_dumps(doc(sources, ["sk-new"], extra={"server": {"listen": "127.0.0.1:1"}})))
    hup(gw)
    assert ask(gw.url, "sk-new").status_code == 200
    assert not any("server.listen changed" in e.get("message", "") for e in gw.log_lines())


def test_the_search_provider_and_local_index_reload(serve, tmp_path):
    sources = sources_file(tmp_path)
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "trams.md").write_text("# Trams\n\nTram 28 climbs from Baixa to Alfama past the cathedral.\n")
    gw = serve(doc(sources, [STABLE]))
    r = ask(gw.url, STABLE)
    assert r.json()["sources"][0]["url"] == SOURCES[0]["url"]
    gw.config_path.write_text(toml_dumps(doc(sources, [STABLE], extra={"search": {"provider": "local",
                                                                                 "local": {"path": str(kb)}}})))
    hup(gw)
    body = {"model": "citestream-demo", "web_search": True,
            "messages": [{"role": "user", "content": "Which tram climbs to Alfama?"}]}
    r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {STABLE}"})
    assert r.json()["sources"][0]["url"] == "local:trams.md#trams"


def probe(url: str, seen: list, stop: threading.Event) -> None:
    """Polls `url` every 10 ms, recording (monotonic time, status or None when refused)."""
    with httpx.Client(timeout=2) as c:
        while not stop.is_set():
            try:
                status = c.get(url).status_code
            except httpx.HTTPError:
                status = None
            seen.append((time.monotonic(), status))
            time.sleep(0.01)


def test_drain_delay_readyz_503_while_still_serving(serve, tmp_path):
    sources = sources_file(tmp_path)
    gw = serve(doc(sources, [STABLE], extra={"server": {"drain_delay": "1500ms", "shutdown_grace": "5s"}}))
    seen: list = []
    stop = threading.Event()
    t = threading.Thread(target=probe, args=(gw.url + "/readyz", seen, stop))
    t.start()
    time.sleep(0.2)
    t_term = time.monotonic()
    gw.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    # Inside the delay: /readyz says 503, a new connection is still served.
    r = ask(gw.url, STABLE)
    assert r.status_code == 200 and r.headers["x-citestream-search"] == "injected"
    assert gw.proc.wait(20) == 0
    # The process may exit within one probe interval of closing its
    # listener: let the probe see the closed port once more.
    time.sleep(0.1)
    stop.set()
    t.join()
    after = [(at - t_term, s) for at, s in seen if at > t_term]
    statuses = [s for _, s in after]
    assert 503 in statuses, statuses
    first_503 = statuses.index(503)
    assert None in statuses[first_503:], "the listener never closed"
    closed_at = next(at for at, s in after[first_503:] if s is None)
    assert all(s == 503 for s in statuses[first_503:statuses.index(None, first_503)])
    assert closed_at >= 1.4, f"the listener closed {closed_at:.2f}s after SIGTERM, before the drain delay"
    assert all(s == 200 for _, s in [(at, s) for at, s in seen if at < t_term])


def test_sigint_skips_the_delay(serve, tmp_path):
    sources = sources_file(tmp_path)
    gw = serve(doc(sources, [STABLE], extra={"server": {"drain_delay": "30s"}}))
    t0 = time.monotonic()
    gw.proc.send_signal(signal.SIGINT)
    assert gw.proc.wait(10) == 0
    assert time.monotonic() - t0 < 5

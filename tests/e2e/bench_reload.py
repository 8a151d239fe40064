"""How long a SIGHUP takes to put a new config in force in `citestream serve`,
with the bundled corpus and with a generated folder of local documents.

Not a test (no pass/fail): run it by hand on a release build,

    cargo build --release -p citestream-cli
    cd tests/e2e && CITESTREAM_BIN=$PWD/../../target/release/citestream \\
        ../../target/e2e-venv/bin/python bench_reload.py [MB] [ROUNDS]

For each corpus (the bundled one, then MB megabytes of generated markdown,
default 100, written to a temp dir and removed after), the gateway starts in
`keys` mode with the local provider; each round rewrites the file with a new
key and sends SIGHUP. Reported per corpus:
* SIGHUP -> new key accepted: from the signal until the first request with
  the new key is answered 200 (polled every 5 ms);
* the gateway's own `reload_ms` (load + build, as logged);
* requests served meanwhile with the old key by a client polling without
  pause: how many, none failed, and their slowest answer (the rebuild runs
  off the serving path).
"""

from __future__ import annotations

import hashlib
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from harness.procs import Serve, toml_dumps

ROOT = Path(__file__).resolve().parents[2]


def sha(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def config(path: str, keys: list[str]) -> dict:
    return {"search": {"provider": "local", "local": {"path": path}},
            "auth": {"mode": "keys"},
            "accounts": [{"id": "bench", "keys": [sha(k) for k in keys]}]}


def generate(mb: int) -> Path:
    """About `mb` MB of markdown: 5 KB documents of 5 sections each, words
    drawn Zipf-like from the vocabulary of the repository's docs."""
    words = sorted({w for p in (ROOT / "docs").rglob("*.md") for w in p.read_text().split() if w.isalpha()})
    rng = random.Random(7)
    weights = [1 / (i + 1) for i in range(len(words))]
    d = Path(tempfile.mkdtemp(prefix="citestream-reload-bench-"))
    written, n = 0, 0
    while written < mb * 1_000_000:
        parts = [f"---\ntitle: Generated document {n}\nurl: https://example.invalid/doc/{n}\n---\n"]
        for s in range(5):
            parts.append(f"\n## Section {s}\n\n" + " ".join(rng.choices(words, weights, k=170)) + "\n")
        text = "".join(parts)
        (d / f"doc{n:06}.md").write_text(text)
        written += len(text)
        n += 1
    return d


def ask(c: httpx.Client, url: str, key: str) -> int:
    body = {"model": "citestream-demo", "web_search": True,
            "messages": [{"role": "user", "content": "What is the capital of Portugal?"}]}
    return c.post(url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"},
                  timeout=60).status_code


def bench(name: str, path: str, rounds: int) -> None:
    t = time.monotonic()
    gw = Serve.start(config(path, ["k0"]), timeout=600)
    start = time.monotonic() - t
    hup_to_new, reload_ms, served, failed, slowest = [], [], 0, 0, 0.0
    try:
        with httpx.Client() as c:
            for i in range(1, rounds + 1):
                assert ask(c, gw.url, f"k{i - 1}") == 200
                gw.config_path.write_text(toml_dumps(config(path, [f"k{i - 1}", f"k{i}"])))
                stop = threading.Event()
                stats = {"n": 0, "failed": 0, "max": 0.0}

                def load(stop=stop, i=i, stats=stats) -> None:
                    with httpx.Client() as lc:
                        while not stop.is_set():
                            t0 = time.monotonic()
                            ok = ask(lc, gw.url, f"k{i - 1}") == 200
                            stats["max"] = max(stats["max"], time.monotonic() - t0)
                            stats["n"] += 1
                            stats["failed"] += not ok

                th = threading.Thread(target=load)
                th.start()
                time.sleep(0.2)
                t0 = time.monotonic()
                gw.proc.send_signal(signal.SIGHUP)
                while ask(c, gw.url, f"k{i}") != 200:
                    time.sleep(0.005)
                hup_to_new.append(time.monotonic() - t0)
                stop.set()
                th.join()
                served += stats["n"]
                failed += stats["failed"]
                slowest = max(slowest, stats["max"])
        reload_ms = [e["reload_ms"] for e in gw.log_lines() if e.get("message") == "config reloaded"]
    finally:
        gw.stop()
    print(f"| {name} | {start:.2f} s | {statistics.median(hup_to_new):.3f} s (max {max(hup_to_new):.3f}) | "
          f"{statistics.median(reload_ms) / 1000:.3f} s | {served} served, {failed} failed, "
          f"slowest {slowest * 1000:.1f} ms |", flush=True)


def main() -> None:
    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print("| corpus | start (index build) | SIGHUP -> new key accepted (median) | reload_ms (median) | "
          "requests during the reloads (old key) |")
    print("|---|---|---|---|---|")
    bench("bundled", "", rounds)
    if mb > 0:
        d = generate(mb)
        try:
            size = sum(p.stat().st_size for p in d.iterdir()) / 1e6
            bench(f"generated {size:.0f} MB ({len(list(d.iterdir()))} files)", str(d), rounds)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

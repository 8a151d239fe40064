#!/usr/bin/env python3
"""Instructions `citestream serve` spends per unpaced upstream event, with
`web_search` off and on, counted by valgrind's callgrind: the exact,
repeatable form of `scripts/bench_hosts.py`'s unpaced CPU row (whose
figures move by ±25% between repetitions on a shared 2-core machine).

Usage (from the repository root; it re-runs itself in the end-to-end
virtualenv, `scripts/e2e-venv.sh`, as bench_hosts.py does):
    cargo build --release -p citestream-cli
    python3 scripts/bench_serve_callgrind.py [--bin NAME=PATH ...] [--marker-every 20,0] \\
        [--streams 4] [--events 5000] [--repeat 1] [--keep DIR]

What it does, for each binary (`--bin`, default `main=target/release/citestream`),
each `--marker-every` value and each of `off`, `on`:
* starts `scripts/bench_hosts_upstream.py` (226-byte chat events, every
  Nth event citing `[1]`, the others `(1)` in its place: the same bytes
  per event) and `serve` (1 worker, static search, as bench_hosts.py
  starts it) under `valgrind --tool=callgrind`;
* sends one warm-up stream of 500 events, zeroes the counts
  (`callgrind_control -z`), sends `--streams` unpaced streams of
  `--events` events one after another, dumps the counts
  (`callgrind_control -d`) and stops the process: start-up, the warm-up
  and shutdown are not counted, every thread of the process is;
* prints a markdown table: instructions, per event, and for `on` the
  difference to `off` of the same binary and marker rate, per event.

How many events one upstream read brings depends on timing (a process
under valgrind reads slower than the upstream writes, so most reads are
full), which moves a total by up to ~1% between runs: compare levers
over `--repeat 3`. No figure is asserted. Loopback only, bounded: fixed
streams and events, a deadline on each load (bench_hosts.LOAD_TIMEOUT).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

# (Importing bench_hosts outside the end-to-end virtualenv re-runs this
# script in it.)
from bench_hosts import Peer, Upstream, citestream_config, run_load  # noqa: E402
from harness.procs import Serve  # noqa: E402

WARMUP_EVENTS = 500


def wrapper(tmp: Path, bin_: str, out: Path, extra: list[str]) -> str:
    """A script that runs `bin_` under callgrind (as `Serve.start`'s binary)."""
    w = tmp / f"callgrind-{out.stem}.sh"
    args = " ".join(shlex.quote(a) for a in extra)
    w.write_text(f'#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file={out} {args} "{bin_}" "$@"\n')
    w.chmod(0o755)
    return str(w)


def total(dump: Path) -> int:
    """The `summary:` (or `totals:`) instruction count of a callgrind dump."""
    text = dump.read_text()
    m = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
    if not m:
        raise RuntimeError(f"no summary in {dump}")
    return int(m.group(1))


def measure(bin_: str, web_search: bool, marker_every: int, streams: int, events: int, tmp: Path,
            keep: Path | None, extra: list[str]) -> int:
    """Instructions of one `serve` process over `streams` x `events` unpaced events."""
    tag = f"{Path(bin_).name}-{'on' if web_search else 'off'}-m{marker_every}-{time.monotonic_ns()}"
    out = tmp / f"cg-{tag}.out"
    up = Upstream(tmp, marker_every)
    serve = None
    try:
        serve = Serve.start({"server": {"workers": 1}, "upstream": {"base_url": up.url}, **citestream_config(tmp)},
                            bin=wrapper(tmp, bin_, out, extra), timeout=120.0)
        peer = Peer("serve", serve.url, [serve.proc.pid], web_search=web_search)
        up.job(WARMUP_EVENTS)
        _, failed, _ = run_load(peer.url, peer, 1, WARMUP_EVENTS)
        if failed:
            raise RuntimeError(f"the warm-up stream failed; serve's output:\n{serve.output()}")
        pid = str(serve.proc.pid)
        subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
        up.job(events)
        for _ in range(streams):
            _, failed, _ = run_load(peer.url, peer, 1, events)
            if failed:
                raise RuntimeError(f"a measured stream failed; serve's output:\n{serve.output()}")
        subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
        dumps = sorted(tmp.glob(f"cg-{tag}.out.*"), key=lambda p: p.stat().st_mtime)
        if not dumps:
            raise RuntimeError(f"callgrind wrote no dump for {tag}")
        n = total(dumps[-1])
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(dumps[-1], keep / f"{tag}.out")
        return n
    finally:
        if serve:
            serve.stop()
        up.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description="serve's instructions per unpaced event (see the module doc)")
    ap.add_argument("--bin", action="append", metavar="NAME=PATH",
                    help="a binary to measure (repeatable; default main=target/release/citestream)")
    ap.add_argument("--marker-every", default="20", help="comma-separated: every Nth event cites [1] (0: none)")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=1, help="processes per row (the median is shown)")
    ap.add_argument("--keep", type=Path, help="keep each measured dump here (callgrind_annotate)")
    ap.add_argument("--callgrind-arg", action="append", default=[], metavar="ARG",
                    help="another valgrind option (repeatable), e.g. --callgrind-arg=--dump-instr=yes")
    ap.add_argument("--only", choices=("off", "on"), help="measure only this case (no on − off column)")
    args = ap.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise SystemExit("valgrind (with callgrind_control) is required: apt-get install valgrind")
    bins = [b.split("=", 1) for b in (args.bin or [f"main={ROOT / 'target/release/citestream'}"])]
    for name, path in bins:
        if not os.access(path, os.X_OK):
            raise SystemExit(f"--bin {name}={path}: not an executable")
    markers = [int(m) for m in args.marker_every.split(",") if m]
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-callgrind-"))
    n_events = args.streams * args.events
    rows = []
    try:
        for marker in markers:
            for name, path in bins:
                got = {}
                for on in [c == "on" for c in ([args.only] if args.only else ["off", "on"])]:
                    runs = [measure(path, on, marker, args.streams, args.events, tmp, args.keep, args.callgrind_arg)
                            for _ in range(args.repeat)]
                    got[on] = (runs, statistics.median(runs))
                    print(f"{name} {'on' if on else 'off'} marker-every {marker}: {runs}", file=sys.stderr)
                rows.append((marker, name, got))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"### `serve` instructions per unpaced event (callgrind), {when}\n")
    print(f"{args.streams} streams x {args.events:,} events after a {WARMUP_EVENTS}-event warm-up, 1 worker, "
          f"median of {args.repeat} process(es) per cell; every thread of the process.\n")
    print("| marker every | binary | off | on | off per event | on per event | on − off per event | on / off |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for marker, name, got in rows:
        if args.only:
            n = got[args.only == "on"][1]
            print(f"| {marker or 'none'} | {name} | {args.only} only: {n:,.0f} | | {n / n_events:,.1f} per event | | | |")
            continue
        off, on = got[False][1], got[True][1]
        print(f"| {marker or 'none'} | {name} | {off:,.0f} | {on:,.0f} | {off / n_events:,.1f} | "
              f"{on / n_events:,.1f} | {(on - off) / n_events:,.1f} | {on / off:.2f}x |")


if __name__ == "__main__":
    main()

"""The host benchmarks cannot rot. scripts/bench_hosts.py's `--quick` run
starts every peer itself (nginx from Debian's packages, Envoy from the
wheel, the LiteLLM proxy, `citestream serve` with `web_search` off and on,
`citestream ext-proc` behind Envoy in both body modes, and the do-nothing
processor when its source is in the tree), streams through each of them,
and every row comes back measured with no failed stream.
scripts/bench_serve_callgrind.py, on a small load, counts `serve`'s
instructions with `web_search` off and on. No figure is asserted: the
numbers are a benchmark's (BENCHMARKS.md, "Hosts")."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.procs import citestream_bin, ensure_debian

ROOT = Path(__file__).resolve().parents[2]
NOOP_SOURCE = ROOT / "crates" / "ext-proc" / "examples" / "noop_processor.rs"


def noop_bin() -> str | None:
    """The do-nothing processor, built (debug) when its source is here."""
    if not NOOP_SOURCE.exists():
        return None
    # With the features of the suite's own build (`--workspace
    # --all-features`, scripts/test.sh), so only the example is compiled: a
    # narrower feature set would rebuild hyper, tonic and what is above them.
    subprocess.run(["cargo", "build", "--workspace", "--all-features", "--example", "noop_processor"],
                   cwd=ROOT, check=True, timeout=600)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return str(target / "debug" / "examples" / "noop_processor")


@pytest.mark.timeout(900)  # the example build (<= 600 s) and the run (<= 280 s)
def test_quick_run_measures_every_peer(tmp_path):
    out = tmp_path / "hosts.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_hosts.py"), "--quick", "--bin", citestream_bin(),
           "--json", str(out), "--out", str(tmp_path / "hosts.md")]
    noop = noop_bin()
    if noop:
        cmd += ["--noop-bin", noop]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(out.read_text())
    peers = got["peers"]
    expected = ["nginx", "Envoy 1", "LiteLLM", "`citestream serve` (1 worker), `web_search` off",
                "`citestream serve` (1 worker), `web_search` on", "ext-proc`, `STREAMED`", "ext-proc`, `FULL_DUPLEX_STREAMED`"]
    if noop:
        expected += ["do-nothing processor, `STREAMED`", "do-nothing processor, `FULL_DUPLEX_STREAMED`"]
    else:  # the only rows allowed to be missing, and never silently
        assert any("do-nothing" in n for n in got["notes"]), got["notes"]
        assert "do-nothing" in proc.stderr
    for want in expected:
        assert sum(want in p for p in peers) == 1, (want, peers)
    assert len(peers) == len(expected), peers
    for name in peers:
        row = got["rows"][name]
        assert row["failed"] == 0, (name, row)
        for key in ("unpaced_cpu", "paced_cpu", "unpaced_ctx", "paced_ctx"):
            assert row[key] > 0, (name, key, row)
        for key in ("added_p1_50", "added_p1_99", "added_pN_50", "added_pN_99", "rss"):
            assert math.isfinite(row[key]), (name, key, row)
        if got["perf"]:
            assert row["unpaced_perf_sys"] > 0 and row["paced_perf_ctx"] > 0, (name, row)
    assert got["rows"]["direct"]["failed"] == 0
    table = (tmp_path / "hosts.md").read_text()
    assert "| host |" in table and "commit" in table
    assert "`web_search` on / off per repetition: " in table, table


@pytest.mark.timeout(300)
def test_callgrind_counts_serve_off_and_on():
    ensure_debian("valgrind", "valgrind")
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_serve_callgrind.py"), "--bin", f"debug={citestream_bin()}",
           "--streams", "2", "--events", "100", "--marker-every", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 5 | debug |")]
    assert len(rows) == 1, proc.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    off, on = (int(c.replace(",", "")) for c in cells[2:4])
    # Both counted (the rewrite does more than the pass-through; by how
    # much is the benchmark's to say).
    assert 0 < off < on, rows[0]

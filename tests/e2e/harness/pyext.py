"""Builds the `citestream` Python package (python/, PyO3 + maturin) into the
running interpreter's virtualenv, once per test session.

Contract
* `build()` runs `maturin develop` (dev profile, the workspace's target
  directory, so it reuses what `cargo build` already compiled) for
  `sys.prefix`, the e2e virtualenv, then makes `import citestream` work in
  this process too (maturin installs an editable .pth that only new
  processes read). The first call builds; later calls return at once.
  Any failure raises with maturin's output: nothing skips. Concurrent
  sessions on one venv serialise on target/pyext.lock.
* Called from conftest.py when the session collected a test that needs the
  package (tests named test_python* or test_litellm*), before any test runs,
  so the build is not charged to one test's timeout.
* `CITESTREAM_PYEXT_PREBUILT=1` skips the build (the caller installed the
  package already, e.g. `pip install ./python`); the import must still work.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "python"
NEEDS = ("test_python", "test_litellm")
_built = False


def needed(items) -> bool:
    """True when one of the collected items needs the package."""
    return any(Path(str(i.path)).name.startswith(NEEDS) for i in items)


def build() -> None:
    global _built
    if _built:
        return
    if os.environ.get("CITESTREAM_PYEXT_PREBUILT") != "1":
        bin_dir = Path(sys.prefix) / "bin"
        maturin = bin_dir / "maturin"
        if not maturin.exists():
            raise RuntimeError(f"maturin is not installed in {sys.prefix}: it is pinned in tests/e2e/requirements.txt (scripts/e2e-venv.sh)")
        env = dict(os.environ)
        env["VIRTUAL_ENV"] = sys.prefix
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        # Sessions sharing the venv (developers in one work tree) take turns:
        # two concurrent installs would remove each other's files.
        (ROOT / "target").mkdir(exist_ok=True)
        with open(ROOT / "target" / "pyext.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = subprocess.run(
                [str(maturin), "develop", "--manifest-path", str(PACKAGE / "Cargo.toml")],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600,
            )
        if proc.returncode != 0:
            raise RuntimeError(f"maturin develop failed ({proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-10000:]}")
    # The editable install is a .pth file, read at start-up only.
    if str(PACKAGE) not in sys.path:
        sys.path.insert(0, str(PACKAGE))
    importlib.invalidate_caches()
    importlib.import_module("citestream._native")
    _built = True

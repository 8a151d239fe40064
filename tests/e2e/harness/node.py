"""The `openai` npm package on the machine's Node, installed for the tests.

Contract: `node_client()` copies tests/e2e/node/{package.json,
package-lock.json, client.mjs} into target/e2e-node and runs `npm ci` there
(once per lock file: a stamp holds its hash), then returns a function
`run(jobs) -> results` that feeds jobs to client.mjs (see its header) and
returns its parsed output. A missing `node`/`npm` or a failed install is an
error, never a skip.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

from .procs import ROOT

SRC = ROOT / "tests" / "e2e" / "node"
DEST = ROOT / "target" / "e2e-node"


def node_client():
    for tool in ("node", "npm"):
        if not shutil.which(tool):
            raise RuntimeError(f"{tool} is not installed: the openai npm client tests need Node and npm")
    DEST.mkdir(parents=True, exist_ok=True)
    lock = (SRC / "package-lock.json").read_bytes() + (SRC / "package.json").read_bytes()
    stamp = hashlib.sha256(lock).hexdigest()
    stamp_file = DEST / ".stamp"
    if not stamp_file.exists() or stamp_file.read_text() != stamp or not (DEST / "node_modules" / "openai").is_dir():
        for name in ("package.json", "package-lock.json"):
            shutil.copy(SRC / name, DEST / name)
        proc = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=DEST, capture_output=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"npm ci failed in {DEST}: {proc.stderr.decode(errors='replace')}")
        stamp_file.write_text(stamp)
    shutil.copy(SRC / "client.mjs", DEST / "client.mjs")

    def run(jobs: list[dict]) -> list[dict]:
        proc = subprocess.run(["node", str(DEST / "client.mjs")], input=json.dumps(jobs).encode(),
                              capture_output=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"node client.mjs failed: {proc.stderr.decode(errors='replace')}")
        return json.loads(proc.stdout)

    return run

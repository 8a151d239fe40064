#!/usr/bin/env bash
# Builds the end-to-end tests' virtualenv, target/e2e-venv, from
# tests/e2e/requirements.txt (PyPI, pinned). Idempotent: a stamp file holds a
# hash of the requirements file and the base interpreter; the venv is rebuilt
# from scratch only when either changes; the stamp is written last, so a failed
# or interrupted build is redone. Concurrent runs serialise on a lock file.
# Fails loudly (non-zero exit, message on stderr) on any error.
#
# Usage: scripts/e2e-venv.sh        -> prints the venv's python path
# Env:   CITESTREAM_TEST_PYTHON     base interpreter (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
REQ="$ROOT/tests/e2e/requirements.txt"
VENV="$ROOT/target/e2e-venv"
PY=${CITESTREAM_TEST_PYTHON:-python3}

die() { echo "scripts/e2e-venv.sh: $*" >&2; exit 1; }

command -v "$PY" >/dev/null 2>&1 || die "$PY not found (Debian: apt-get install python3 python3-venv)"
"$PY" -c 'import venv, ensurepip' 2>/dev/null \
    || die "$PY lacks the venv/ensurepip modules (Debian: apt-get install python3-venv)"
[ -f "$REQ" ] || die "missing $REQ"

BASE=$("$PY" -c 'import sys; print(sys.version); print(sys.executable)')
STAMP=$( { cat "$REQ"; echo "$BASE"; } | sha256sum | cut -d' ' -f1)

mkdir -p "$ROOT/target"
exec 9>"$ROOT/target/e2e-venv.lock"
flock 9

if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$STAMP" ] && [ -x "$VENV/bin/python" ]; then
    echo "$VENV/bin/python"
    exit 0
fi

echo "scripts/e2e-venv.sh: building $VENV from tests/e2e/requirements.txt" >&2
# The stamp is written last: an interrupted or failed build has none and is
# rebuilt from scratch by the next run.
rm -rf "$VENV"
"$PY" -m venv "$VENV" || die "python3 -m venv failed"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -r "$REQ" >&2 || die "pip install -r tests/e2e/requirements.txt failed"
echo "$STAMP" > "$VENV/.stamp"
echo "$VENV/bin/python"

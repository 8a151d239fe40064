#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need
# (redis-server and redis-cli from Debian's packages; the Python SDK tests build their own
# virtualenv from PyPI), then runs every test, doc tests included.
set -euo pipefail
cd "$(dirname "$0")/.."

# redis-cli (redis-tools) builds the Redis Cluster of the host's cluster tests.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    echo "scripts/test.sh: installing redis-server and redis-tools (Debian packages)" >&2
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
fi
command -v python3 >/dev/null 2>&1 || { echo "scripts/test.sh: python3 is required" >&2; exit 1; }

if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --all-features --no-fail-fast
else
    cargo test --workspace --all-features --no-fail-fast --lib --bins --tests
fi
cargo test --workspace --all-features --doc

# The core's portable build: on x86_64 the JSON string scan is SSE2
# (src/json/simd.rs); every other target runs the SWAR words. Run the core's
# tests once more with SIMD off, so both paths are tested on every machine
# (own target dir: other RUSTFLAGS would rebuild the main one).
if cargo nextest --version >/dev/null 2>&1; then
    RUSTFLAGS="--cfg citestream_disable_simd" CARGO_TARGET_DIR=target/nosimd \
        cargo nextest run -p citestream --all-features --no-fail-fast
else
    RUSTFLAGS="--cfg citestream_disable_simd" CARGO_TARGET_DIR=target/nosimd \
        cargo test -p citestream --all-features --lib --tests --no-fail-fast
fi

# End-to-end tests (tests/e2e, pytest): real SDKs, redis-server, Envoy and
# LiteLLM against the hosts, with the loopback replay upstream. Programs they
# need from Debian: faketime (the quota's midnight test) and Node with npm
# (the openai npm client); the tests install them too when run alone.
E2E_DEBS=""
command -v faketime >/dev/null 2>&1 || E2E_DEBS="$E2E_DEBS faketime"
command -v npm >/dev/null 2>&1 || E2E_DEBS="$E2E_DEBS nodejs npm"
if [ -n "$E2E_DEBS" ]; then
    echo "scripts/test.sh: installing$E2E_DEBS (Debian packages)" >&2
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $E2E_DEBS >/dev/null
fi
E2E_PY=$(scripts/e2e-venv.sh)
# The nextest run above built target/debug/citestream (the CLI's integration
# tests need it) with the workspace's features; building it again with
# `-p citestream-cli` would recompile the hosts with other features.
[ -x target/debug/citestream ] || cargo build -p citestream-cli
export CITESTREAM_BIN="$PWD/target/debug/citestream"
# pytest exits 5 when it collects no test: that is a failure here too.
set +e
(cd tests/e2e && "$E2E_PY" -m pytest -p no:cacheprovider)
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no end-to-end test" >&2
    exit 1
fi
exit "$status"

#!/usr/bin/env bash
# Runs one fuzz target for a while with its corpus, the committed seeds and
# the SSE dictionary:
#
#   fuzz/run.sh TARGET SECONDS     fuzz for SECONDS (new inputs go to
#                                  fuzz/corpus/TARGET, which git ignores)
#   fuzz/run.sh TARGET 0           replay the seeds and corpus once (-runs=0)
#
# Needs a nightly toolchain; installs cargo-fuzz when it is missing and
# exits 0 with a note when no nightly toolchain can be had. Honours
# CARGO_TARGET_DIR (default: fuzz/target).
set -euo pipefail

usage() { echo "usage: fuzz/run.sh TARGET SECONDS" >&2; exit 2; }
[ $# -eq 2 ] || usage
target=$1
seconds=$2
case $seconds in ''|*[!0-9]*) usage ;; esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if ! grep -q "^name = \"$target\"$" fuzz/Cargo.toml; then
    echo "fuzz/run.sh: unknown target '$target'" >&2
    exit 2
fi

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: no nightly toolchain, skipping $target"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/fuzz/target}
corpus=fuzz/corpus/$target
mkdir -p "$corpus"
# The rewriter targets get the JSON/chunk dictionary, the HTTP/1 one its
# own, the parser ones the SSE one; all start from the recorded streams.
case $target in
    chat_*|messages_*|responses_*|request) dict=fuzz/chat.dict ;;
    h1_*) dict=fuzz/h1.dict ;;
    *) dict=fuzz/sse.dict ;;
esac

if [ "$seconds" -eq 0 ]; then
    exec cargo +nightly fuzz run "$target" "$corpus" fuzz/seeds/sse -- \
        -runs=0 -dict="$dict"
fi
# libFuzzer writes new inputs to the first directory only.
exec cargo +nightly fuzz run "$target" "$corpus" fuzz/seeds/sse -- \
    -max_total_time="$seconds" -dict="$dict" -print_final_stats=1

#!/usr/bin/env bash
# Instructions per body message of `citestream ext-proc`'s service against
# the do-nothing processor (`citestream_ext_proc::noop`), in process, under
# callgrind (examples/ext_proc_callgrind.rs: tonic's decoder, the service's
# answer stream, prost's encoder; only `measured` is counted). The counts
# repeat exactly from run to run.
#
# Usage (from the repository root):
#   crates/ext-proc/benches/callgrind.sh [events]     # default 2000
#   BASE_BIN=OTHER/ext_proc_callgrind crates/ext-proc/benches/callgrind.sh
#       # also another build's harness (e.g. main's), both processors, in the same run
#   KEEP=DIR ...                                      # keep the callgrind.out files there
# Prints a Markdown table: Ir per message for each processor, body mode and
# web_search, and citestream / noop (with BASE_BIN: the base's too, and
# this build's citestream over the base's noop).
set -euo pipefail
cd "$(dirname "$0")/../../.."
EVENTS=${1:-2000}
cargo build --release -q -p citestream-ext-proc --example ext_proc_callgrind
BIN=${CARGO_TARGET_DIR:-target}/release/examples/ext_proc_callgrind
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OUT=${KEEP:-$TMP}
mkdir -p "$OUT"
ir() {
    local bin=$1 tag=$2
    shift 2
    local out="$OUT/$tag-$1-$2-$3.out"
    valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='*measured*' \
        "$bin" "$@" "$EVENTS" >"$TMP/stdout" 2>"$TMP/stderr"
    grep -E '^(summary|totals):' "$out" | head -1 | awk '{print $2}'
}
if [ -n "${BASE_BIN:-}" ]; then
    echo "| body mode | web_search | citestream Ir / message | noop Ir / message | citestream / noop | base citestream | base noop | base citestream / base noop | citestream / base noop |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
else
    echo "| body mode | web_search | citestream Ir / message | noop Ir / message | citestream / noop |"
    echo "|---|---|---:|---:|---:|"
fi
for mode in streamed full-duplex; do
    for search in on off; do
        c=$(ir "$BIN" new citestream "$mode" "$search")
        n=$(ir "$BIN" new noop "$mode" "$search")
        if [ -n "${BASE_BIN:-}" ]; then
            bc=$(ir "$BASE_BIN" base citestream "$mode" "$search")
            bn=$(ir "$BASE_BIN" base noop "$mode" "$search")
            awk -v m="$mode" -v s="$search" -v c="$c" -v n="$n" -v bc="$bc" -v bn="$bn" -v e="$EVENTS" \
                'BEGIN { printf "| %s | %s | %.0f | %.0f | %.2fx | %.0f | %.0f | %.2fx | %.2fx |\n",
                         m, s, c / e, n / e, c / n, bc / e, bn / e, bc / bn, c / bn }'
        else
            awk -v m="$mode" -v s="$search" -v c="$c" -v n="$n" -v e="$EVENTS" \
                'BEGIN { printf "| %s | %s | %.0f | %.0f | %.2fx |\n", m, s, c / e, n / e, c / n }'
        fi
    done
done

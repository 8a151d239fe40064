#!/usr/bin/env bash
# Instructions per body message of `citestream ext-proc`'s service against
# the do-nothing processor (`citestream_ext_proc::noop`), in process, under
# callgrind (examples/ext_proc_callgrind.rs: tonic's decoder, the service's
# answer stream, prost's encoder; only `measured` is counted). The counts
# repeat exactly from run to run.
#
# Usage (from the repository root):
#   crates/ext-proc/benches/callgrind.sh [events]     # default 2000
# Prints a Markdown table: Ir per message for each processor, body mode and
# web_search, and citestream / noop.
set -euo pipefail
cd "$(dirname "$0")/../../.."
EVENTS=${1:-2000}
cargo build --release -q -p citestream-ext-proc --example ext_proc_callgrind
BIN=${CARGO_TARGET_DIR:-target}/release/examples/ext_proc_callgrind
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ir() {
    valgrind --tool=callgrind --callgrind-out-file="$TMP/out" --toggle-collect='*measured*' \
        "$BIN" "$@" "$EVENTS" >"$TMP/stdout" 2>"$TMP/stderr"
    grep -E '^(summary|totals):' "$TMP/out" | head -1 | awk '{print $2}'
}
echo "| body mode | web_search | citestream Ir / message | noop Ir / message | citestream / noop |"
echo "|---|---|---:|---:|---:|"
for mode in streamed full-duplex; do
    for search in on off; do
        c=$(ir citestream "$mode" "$search")
        n=$(ir noop "$mode" "$search")
        awk -v m="$mode" -v s="$search" -v c="$c" -v n="$n" -v e="$EVENTS" \
            'BEGIN { printf "| %s | %s | %.0f | %.0f | %.2fx |\n", m, s, c / e, n / e, c / n }'
    done
done

#!/usr/bin/env bash
# Instruction counts for the SSE parsers (citestream, sse-stream 0.3,
# eventsource-stream 0.2) under valgrind's callgrind: repeatable to a few
# parts per million, unlike wall-clock times on a shared machine.
#
# Builds examples/sse_callgrind.rs with the bench profile (LTO, as the
# criterion benches), then runs it once per parser x input x read size,
# counting only the instructions inside its `measured` function (the parse:
# fresh parser, feed every piece, take out every event, touch its data; the
# input generation and splitting are not counted).
#
# Usage: scripts/callgrind.sh [--annotate]
#   SUITE=fixtures                      the chat rewriter on each recorded
#                                       fixture (FIXTURE_READS, default 1460)
#   SUITE=chat                          the response rewriters instead
#                                       (examples/chat_callgrind.rs: ChatStream,
#                                       MessagesStream and ResponsesStream vs
#                                       the naive and conventional gateway
#                                       baselines)
#   READS="event 1460 16384"            read sizes (`event`: one read per SSE event;
#                                       also 1, 64, whole)
#   INPUTS="openai_4000 upstream_fixtures"
#   PARSERS="citestream citestream-ref sse-stream eventsource-stream"
#   LONG=1                              also the long-line check (default on)
#   --annotate   keep the callgrind files and print `callgrind_annotate` of
#                citestream on openai_4000 at 1460 B (where the time goes).
# Prints markdown tables on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

READS=${READS:-"event 1460 16384"}
INPUTS=${INPUTS:-"openai_4000 upstream_fixtures"}
PARSERS=${PARSERS:-"citestream citestream-ref sse-stream eventsource-stream"}
LONG=${LONG:-1}
annotate=0
[[ ${1:-} == --annotate ]] && annotate=1

per() { awk -v a="$1" -v b="$2" 'BEGIN { printf (a / b < 10 ? "%.2f" : "%.1f"), a / b }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind not found" >&2; exit 1; }

if [[ ${SUITE:-sse} == chat ]]; then
    # Instructions per chunk (input event with data) for each rewriter and
    # baseline, inside `measured` only (fresh rewriter per stream, every
    # piece fed, every output drained; inputs built and split outside).
    #   READS, CHAT_INPUTS / MESSAGES_INPUTS / RESPONSES_INPUTS as below;
    #   CHAT_IMPLS / MESSAGES_IMPLS / RESPONSES_IMPLS to run fewer
    #   implementations (the first is the base); ENDPOINTS to run fewer
    #   endpoints (default "chat messages responses")
    READS=${READS:-"event 1460 16384"}
    CHAT_INPUTS=${CHAT_INPUTS:-"openai_obfuscation_4000 openai_4000 fixtures"}
    MESSAGES_INPUTS=${MESSAGES_INPUTS:-"anthropic_4000 fixtures"}
    RESPONSES_INPUTS=${RESPONSES_INPUTS:-"responses_4000 fixtures"}
    bin=$(cargo build --profile bench --example chat_callgrind --message-format=json-render-diagnostics \
        | sed -n 's/.*"executable":"\([^"]*chat_callgrind\)".*/\1/p' | tail -n 1)
    [[ -x $bin ]] || { echo "callgrind.sh: could not find the chat_callgrind binary" >&2; exit 1; }
    tmp=$(mktemp -d)
    trap '[[ $annotate == 1 ]] || rm -rf "$tmp"' EXIT
    echo "### Instructions per chunk (callgrind, \`measured\` only)"
    echo
    echo "| endpoint | input | read | chunks | implementation | instructions | per chunk | per byte | vs citestream |"
    echo "|---|---|---|---|---|---:|---:|---:|---:|"
    for endpoint in ${ENDPOINTS:-chat messages responses}; do
        if [[ $endpoint == chat ]]; then
            inputs=$CHAT_INPUTS impls=${CHAT_IMPLS:-"citestream naive conventional"}
        elif [[ $endpoint == messages ]]; then
            inputs=$MESSAGES_INPUTS impls=${MESSAGES_IMPLS:-"citestream naive"}
        else
            inputs=$RESPONSES_INPUTS impls=${RESPONSES_IMPLS:-"citestream conventional"}
        fi
        for input in $inputs; do
            for read in $READS; do
                base=
                for impl in $impls; do
                    out="$tmp/cg.$endpoint.$impl.$input.$read.out"
                    res=$(valgrind --tool=callgrind \
                        --callgrind-out-file="$out" --toggle-collect='*chat_callgrind::measured*' \
                        "$bin" "$endpoint" "$impl" "$input" "$read" 2>/dev/null)
                    read -r bytes _pieces events _out <<<"$res"
                    ir=$(sed -n 's/^summary: *//p' "$out")
                    [[ -n $ir ]] || { echo "callgrind.sh: no summary for $endpoint $impl $input $read" >&2; exit 1; }
                    [[ -n $base ]] || base=$ir
                    echo "| $endpoint | $input | $read | $events | $impl | $ir | $(per "$ir" "$events") | $(per "$ir" "$bytes") | $(ratio "$ir" "$base")x |"
                done
            done
        done
    done
    if [[ $annotate == 1 ]]; then
        echo
        echo "callgrind files kept in $tmp"
        callgrind_annotate --inclusive=no "$tmp/cg.chat.citestream.openai_obfuscation_4000.1460.out" 2>/dev/null | head -n 40
    fi
    exit 0
fi

if [[ ${SUITE:-sse} == fixtures ]]; then
    # Instructions per chunk of ChatStream on each recorded chat fixture
    # (examples/chat_fixture_costs.rs), then all of them together and the
    # per-stream setup cost (`done`: 26 streams of only `[DONE]`).
    #   READS as above (default here: 1460)
    bin=$(cargo build --profile bench --example chat_fixture_costs --message-format=json-render-diagnostics \
        | sed -n 's/.*"executable":"\([^"]*chat_fixture_costs\)".*/\1/p' | tail -n 1)
    [[ -x $bin ]] || { echo "callgrind.sh: could not find the chat_fixture_costs binary" >&2; exit 1; }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "### Chat rewriter per recorded fixture: instructions per chunk (callgrind, \`measured\` only)"
    echo
    echo "| fixture | read | chunks | instructions | per chunk |"
    echo "|---|---|---:|---:|---:|"
    for read in ${FIXTURE_READS:-1460}; do
        for name in $("$bin" list "$read" | awk '{print $1}') all done; do
            out="$tmp/cg.$name.$read.out"
            res=$(valgrind --tool=callgrind --callgrind-out-file="$out" \
                --toggle-collect='*chat_fixture_costs::measured*' "$bin" "$name" "$read" 2>/dev/null)
            read -r _bytes _pieces events _out <<<"$res"
            ir=$(sed -n 's/^summary: *//p' "$out")
            [[ -n $ir ]] || { echo "callgrind.sh: no summary for fixture $name $read" >&2; exit 1; }
            echo "| $name | $read | $events | $ir | $(per "$ir" "$((events > 0 ? events : 1))") |"
        done
    done
    exit 0
fi

bin=$(cargo build --profile bench --example sse_callgrind --message-format=json-render-diagnostics \
    | sed -n 's/.*"executable":"\([^"]*sse_callgrind\)".*/\1/p' | tail -n 1)
[[ -x $bin ]] || { echo "callgrind.sh: could not find the sse_callgrind binary" >&2; exit 1; }

tmp=$(mktemp -d)
trap '[[ $annotate == 1 ]] || rm -rf "$tmp"' EXIT

# run PARSER INPUT READ -> "bytes pieces events instructions"
run() {
    local out="$tmp/cg.$1.$2.$3.out" res ir
    res=$(valgrind --tool=callgrind --callgrind-out-file="$out" \
        --toggle-collect='*sse_callgrind::measured*' "$bin" "$1" "$2" "$3" 2>/dev/null)
    ir=$(sed -n 's/^summary: *//p' "$out")
    [[ -n $ir ]] || { echo "callgrind.sh: no summary for $*" >&2; exit 1; }
    echo "$res $ir"
}


echo "### Instructions per event (callgrind, \`measured\` only)"
echo
echo "| input | read | events | parser | instructions | per event | per byte | vs citestream |"
echo "|---|---|---|---|---:|---:|---:|---:|"
for input in $INPUTS; do
    for read in $READS; do
        base=
        for parser in $PARSERS; do
            read -r bytes _pieces events ir < <(run "$parser" "$input" "$read")
            [[ -n $base ]] || base=$ir
            echo "| $input | $read | $events | $parser | $ir | $(per "$ir" "$events") | $(per "$ir" "$bytes") | $(ratio "$ir" "$base")x |"
        done
    done
done

if [[ $LONG == 1 ]]; then
    echo
    echo "### One long \`data\` line (linear-time check)"
    echo
    echo "| parser | line | read | instructions | per byte | 1460 B / whole |"
    echo "|---|---|---|---:|---:|---:|"
    # Two lengths per parser: a linear parser keeps its cost per byte.
    # eventsource-stream re-scans the partial line on every read (quadratic),
    # so it gets 256 and 512 KiB (8 MiB would take minutes under callgrind).
    for spec in citestream:1024 citestream:8192 sse-stream:1024 sse-stream:8192 \
        eventsource-stream:256 eventsource-stream:512; do
        parser=${spec%%:*} kib=${spec##*:}
        read -r bytes _ _ small < <(run "$parser" "long_line_$kib" 1460)
        read -r _ _ _ whole < <(run "$parser" "long_line_$kib" whole)
        echo "| $parser | $kib KiB | 1460 | $small | $(per "$small" "$bytes") | $(ratio "$small" "$whole")x |"
        echo "| $parser | $kib KiB | whole | $whole | $(per "$whole" "$bytes") | |"
    done
fi

if [[ $annotate == 1 ]]; then
    echo
    echo "callgrind files kept in $tmp"
    callgrind_annotate --inclusive=no "$tmp/cg.citestream.openai_4000.1460.out" 2>/dev/null | head -n 40
fi

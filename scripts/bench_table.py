#!/usr/bin/env python3
"""Builds the BENCHMARKS.md tables from a criterion run of `benches/sse.rs`
and the output of `scripts/callgrind.sh`.

usage: scripts/bench_table.py CRITERION_DIR CALLGRIND_MD
       scripts/bench_table.py --chat CRITERION_DIR CALLGRIND_MD

CRITERION_DIR is `$CARGO_TARGET_DIR/criterion` (default target/criterion);
CALLGRIND_MD is what `READS="1 64 1460 16384 whole" scripts/callgrind.sh`
printed (with --chat: `benches/chat.rs` and what `SUITE=chat
scripts/callgrind.sh` printed). Times are criterion's median estimates.
"""
import json
import pathlib
import sys

PARSERS = ["citestream", "sse-stream", "eventsource-stream"]
READS = ["1", "64", "1460", "16384", "whole"]


def fmt_time(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def load_criterion(root):
    out = {}
    for bench in pathlib.Path(root).glob("**/new/benchmark.json"):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())
        out[(meta["group_id"], meta["function_id"], meta["value_str"])] = (
            est["median"]["point_estimate"],
            meta.get("throughput", {}).get("Bytes"),
        )
    return out


def load_callgrind(path):
    """(input, read, parser) -> (events, instructions), and for the long
    line (parser, length in KiB, read) -> (instructions, per byte)."""
    out, long = {}, {}
    for line in pathlib.Path(path).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[2].isdigit():
            inp, read, events, parser, ir = cells[:5]
            out[(inp, read, parser)] = (int(events), int(ir))
        elif len(cells) == 6 and cells[1].endswith(" KiB") and cells[3].isdigit():
            parser, kib, read, ir, per = cells[:5]
            long[(parser, int(kib[:-4]), read)] = (int(ir), per)
    return out, long


def kib(label):
    """`8MiB` or `512KiB` -> KiB"""
    return int(label[:-3]) * 1024 if label.endswith("MiB") else int(label[:-3])


def main():
    crit = load_criterion(sys.argv[1])
    cg, cg_long = load_callgrind(sys.argv[2])
    for inp in ["openai_4000", "upstream_fixtures"]:
        group = f"sse/{inp}"
        events = next(v[0] for k, v in cg.items() if k[0] == inp)
        size = next(v[1] for k, v in crit.items() if k[0] == group)
        print(f"#### `{inp}`: {size:,} bytes, {events:,} events\n")
        print(
            "| read | time citestream | MiB/s | per event "
            "| time sse-stream | time eventsource-stream "
            "| sse-stream / citestream | eventsource / citestream "
            "| instr/event citestream | instr/event sse-stream "
            "| instr/event eventsource-stream | instr sse-stream / citestream |"
        )
        print("|---" * 12 + "|")
        for read in READS:
            t = {p: crit.get((group, p, read), (None, None))[0] for p in PARSERS}
            ir = {p: cg.get((inp, read, p), (None, None))[1] for p in PARSERS}
            c = t["citestream"]
            row = [
                {"whole": "whole", "16384": "16 KiB"}.get(read, f"{read} B"),
                fmt_time(c),
                f"{size / c * 1e9 / (1 << 20):.0f}",
                fmt_time(c / events),
                fmt_time(t["sse-stream"]),
                fmt_time(t["eventsource-stream"]),
                f"{t['sse-stream'] / c:.2f}x",
                f"{t['eventsource-stream'] / c:.1f}x",
            ]
            row += [f"{ir[p] / events:,.0f}" if ir[p] else "–" for p in PARSERS]
            row.append(
                f"{ir['sse-stream'] / ir['citestream']:.2f}x"
                if ir["citestream"] and ir["sse-stream"]
                else "–"
            )
            print("| " + " | ".join(row) + " |")
        one = crit[(group, "citestream", "1")][0] / events
        whole = crit[(group, "citestream", "whole")][0] / events
        line = f"\ncitestream per event: 1 B reads {fmt_time(one)}, whole {fmt_time(whole)}: {one / whole:.1f}x"
        ir1, irw = cg.get((inp, "1", "citestream")), cg.get((inp, "whole", "citestream"))
        if ir1 and irw:
            line += f" (instructions: {ir1[1] / irw[1]:.1f}x)"
        print(line + " (goal ≤ 20x).\n")

    print("#### `long_line`: one event, a single `data` line\n")
    print("| parser | line | read | time | MiB/s | time 1460 B / whole | instr/byte | instr 1460 B / whole |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    crit_lines = {(k[1], kib(k[2].split("/")[0])) for k in crit if k[0] == "sse/long_line"}
    cg_lines = {(k[0], k[1]) for k in cg_long}
    for parser in PARSERS:
        for length in sorted(n for p, n in crit_lines | cg_lines if p == parser):
            label = f"{length >> 10} MiB" if length % 1024 == 0 else f"{length} KiB"
            ids = [f"{length >> 10}MiB" if length % 1024 == 0 else f"{length}KiB"]
            t = {r: crit.get(("sse/long_line", parser, f"{ids[0]}/{r}")) for r in ("1460", "whole")}
            c = {r: cg_long.get((parser, length, r)) for r in ("1460", "whole")}
            for r in ("1460", "whole"):
                row = [parser, label, "1460 B" if r == "1460" else "whole"]
                if t[r]:
                    row += [fmt_time(t[r][0]), f"{t[r][1] / t[r][0] * 1e9 / (1 << 20):.0f}"]
                else:
                    row += ["", ""]
                row.append(f"{t['1460'][0] / t['whole'][0]:.1f}x" if r == "1460" and t["1460"] and t["whole"] else "")
                row.append(c[r][1] if c[r] else "")
                row.append(f"{c['1460'][0] / c['whole'][0]:.2f}x" if r == "1460" and c["1460"] and c["whole"] else "")
                print("| " + " | ".join(row) + " |")


def load_callgrind_chat(path):
    """(endpoint, input, read, impl) -> (chunks, instructions)"""
    out = {}
    for line in pathlib.Path(path).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[3].isdigit():
            endpoint, inp, read, chunks, impl, ir = cells[:6]
            out[(endpoint, inp, read, impl)] = (int(chunks), int(ir))
    return out


CHAT_READS = ["1", "1460", "16384", "whole"]


def main_chat(crit_dir, cg_path):
    crit = load_criterion(crit_dir)
    cg = load_callgrind_chat(cg_path)
    inputs = [
        ("chat", "openai_obfuscation_4000"),
        ("chat", "openai_4000"),
        ("chat", "fixtures"),
        ("messages", "anthropic_4000"),
        ("messages", "fixtures"),
    ]
    for endpoint, inp in inputs:
        group = f"{endpoint}/{inp}"
        impls = ["citestream", "naive"] + (["conventional"] if endpoint == "chat" else [])
        base = [b for b in impls if b != "citestream"]
        chunks = next((v[0] for k, v in cg.items() if k[:2] == (endpoint, inp)), None)
        size = next((v[1] for k, v in crit.items() if k[0] == group), None)
        if size is None:
            continue
        print(f"#### `{group}`: {size:,} bytes, {chunks:,} chunks\n")
        head = ["read", "time citestream", "MiB/s", "per chunk"]
        head += [f"time {b}" for b in base] + [f"{b} / citestream" for b in base]
        head += [f"instr/chunk {i}" for i in impls] + [f"instr {b} / citestream" for b in base]
        print("| " + " | ".join(head) + " |")
        print("|---" * len(head) + "|")
        for read in CHAT_READS:
            t = {i: crit.get((group, i, read), (None, None))[0] for i in impls}
            ir = {i: cg.get((endpoint, inp, read, i), (None, None))[1] for i in impls}
            c = t["citestream"]
            row = [{"whole": "whole", "16384": "16 KiB"}.get(read, f"{read} B")]
            row += [fmt_time(c), f"{size / c * 1e9 / (1 << 20):.0f}", fmt_time(c / chunks)]
            row += [fmt_time(t[b]) for b in base]
            row += [f"**{t[b] / c:.1f}x**" for b in base]
            row += [f"{ir[i] / chunks:,.0f}" if ir[i] else "–" for i in impls]
            row += [f"{ir[b] / ir['citestream']:.1f}x" if ir[b] and ir["citestream"] else "–" for b in base]
            print("| " + " | ".join(row) + " |")
        print()


if __name__ == "__main__":
    if sys.argv[1] == "--chat":
        main_chat(sys.argv[2], sys.argv[3])
    else:
        main()

#!/usr/bin/env python3
"""The longest functions of the workspace's non-test Rust code.

    python3 scripts/longest_fns.py [N]

Lines from a function's `fn` line to its closing brace, of every crate's
`src/` (the core, `crates/*/src`, `python/src`), test modules, `tests.rs`
and `*_tests.rs` files left out. Prints the N longest (default 5),
longest first: `lines path:line name`.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from imports import ROOT, blank, crates, cut_test_modules  # noqa: E402

FN_RE = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def functions(path: Path):
    text, _ = cut_test_modules(blank(path.read_text()))
    for m in FN_RE.finditer(text):
        # The body: the first `{` after the signature that is not inside
        # parentheses or angle brackets' generics (a `;` first: no body).
        i, depth = m.end(), 0
        while i < len(text):
            c = text[i]
            if c in "(<[":
                depth += 1
            elif c in ")>]":
                depth -= 1
            elif c == ";" and depth <= 0:
                break
            elif c == "{" and depth <= 0:
                j, braces = i + 1, 1
                while j < len(text) and braces:
                    braces += {"{": 1, "}": -1}.get(text[j], 0)
                    j += 1
                start = text.count("\n", 0, m.start()) + 1
                end = text.count("\n", 0, j) + 1
                yield end - start + 1, start, m.group(1)
                break
            i += 1


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    found = []
    for _, src in crates():
        for path in sorted(src.rglob("*.rs")):
            if path.name == "tests.rs" or path.name.endswith("_tests.rs"):
                continue
            for lines, line, name in functions(path):
                found.append((lines, f"{path.relative_to(ROOT)}:{line}", name))
    for lines, where, name in sorted(found, reverse=True)[:n]:
        print(f"{lines:4} {where} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The import structure of the workspace's modules, layer by layer.

    python3 scripts/imports.py [--crate NAME] [--dot]

For each crate (the core at `src/`, every `crates/*/src`, `python/src`),
every module file outside the tests, and the modules of the same crate it
uses: through `use crate::…`, `use super::…`, `use self::…` and paths
written in the code (`crate::cache::SearchCache::new`). A path is followed
to the module that defines its item: a `pub use` re-export is followed to
its source, so `use super::Frame` in a child counts as an arrow to the
module that defines `Frame`, not to the parent that re-exports it.

A module's own submodules are part of it (a parent may use its children:
that is the arrow pointing down); an arrow to a module's ancestor that is
not a re-export is an arrow running back up, and is listed as one.

It prints each crate's modules in layers: a module's arrows point only to
modules of later layers (uses come after users). Then `circles:` and
`up-arrows:` lines, each `none` when the structure is a clean layering.
Exit status 1 when there is a circle or an up-arrow, so CI can run it.

Reads the files as text (comments and string literals are blanked, test
modules cut: `#[cfg(test)] mod …`, files named `tests.rs` or `*_tests.rs`,
and `tests/`, `benches/`, `examples/` folders are not read).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
ITEM_RE = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+|async\s+|const\s+(?=fn)|extern\s+\"C\"\s+)*"
    r"(fn|struct|enum|union|trait|type|const|static|mod|macro_rules!)\s+(" + IDENT + ")",
    re.M,
)
MOD_DECL_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", re.M)
USE_RE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]*);", re.M | re.S)
PATH_RE = re.compile(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::" + IDENT + r")+)")
CFG_TEST_MOD_RE = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*([;{])")


def crates() -> list[tuple[str, Path]]:
    """(crate name, src folder) for the core and every host."""
    out = [("citestream", ROOT / "src")]
    for d in sorted((ROOT / "crates").iterdir()):
        if (d / "src").is_dir():
            out.append((d.name, d / "src"))
    if (ROOT / "python" / "src").is_dir():
        out.append(("python", ROOT / "python" / "src"))
    return out


def blank(text: str) -> str:
    """Comments, string and char literals replaced by spaces (lines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'" and re.match(r"'(?:\\.|\\u\{[0-9a-fA-F]+\}|\\x..|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(?:\\.|\\u\{[0-9a-fA-F]+\}|\\x..|[^\\'])'", text[i:i + 12])
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def cut_test_modules(text: str) -> tuple[str, set[str]]:
    """The text without inline `#[cfg(test)] mod x { … }` bodies, and the
    names of `#[cfg(test)] mod x;` declarations (their files are skipped)."""
    skipped: set[str] = set()
    while True:
        m = CFG_TEST_MOD_RE.search(text)
        if not m:
            return text, skipped
        if m.group(2) == ";":
            skipped.add(m.group(1))
            text = text[: m.start()] + text[m.end():]
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        text = text[: m.start()] + re.sub(r"[^\n]", " ", text[m.start():j]) + text[j:]


def expand_use(tree: str) -> list[tuple[str, str]]:
    """`a::{b, c::{d as e}}` → [("a::b", "b"), ("a::c::d", "e")]."""
    tree = re.sub(r"\s+", " ", tree).strip()
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree)
    out: list[tuple[str, str]] = []

    def walk(prefix: str, s: str) -> None:
        for part in split_top(s):
            if "{" in part:
                head, _, rest = part.partition("{")
                walk(prefix + head, rest[:-1])
            else:
                add(prefix, part)

    def add(prefix: str, part: str) -> None:
        path, _, alias = part.partition(" as ")
        full = prefix + path
        if full.endswith("::self"):
            full = full[: -len("::self")]
        out.append((full, alias or full.split("::")[-1]))

    walk("", tree)
    return out


def split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p]


class Module:
    def __init__(self, name: str, path: Path, text: str):
        self.name = name  # "" for the crate root
        self.path = path
        self.text = text
        self.items = {m.group(2) for m in ITEM_RE.finditer(text)}
        self.uses = [(bool(pub), full, alias) for pub, tree in USE_RE.findall(text) for full, alias in expand_use(tree)]
        self.reexports = {alias: full for pub, full, alias in self.uses if pub}


def load(src: Path) -> dict[str, Module]:
    """The crate's modules by name, from the root file down `mod` lines."""
    mods: dict[str, Module] = {}
    root = src / "lib.rs" if (src / "lib.rs").exists() else src / "main.rs"

    def visit(name: str, path: Path) -> None:
        raw = path.read_text()
        raw = blank(raw)
        text, skipped = cut_test_modules(raw)
        mods[name] = Module(name, path, text)
        here = path.parent if path.name in ("mod.rs", "lib.rs", "main.rs") else path.parent / path.stem
        for child in MOD_DECL_RE.findall(text):
            if child in skipped or child == "tests" or child.endswith("_tests"):
                continue
            for cand in (here / f"{child}.rs", here / child / "mod.rs"):
                if cand.exists():
                    visit(f"{name}::{child}" if name else child, cand)
                    break

    visit("", root)
    return mods


def parent(name: str) -> str:
    return name.rpartition("::")[0]


MODS: dict[str, "Module"] = {}


def absolute(module: str, path: str) -> list[str] | None:
    """The segments of `path` (written in `module`) from the crate root."""
    segs = path.split("::")
    if segs[0] == "crate":
        base, segs = [], segs[1:]
    elif segs[0] in ("self", "super"):
        base = module.split("::") if module else []
        while segs and segs[0] in ("self", "super"):
            if segs[0] == "super":
                if not base:
                    return None
                base = base[:-1]
            segs = segs[1:]
    elif f"{module}::{segs[0]}" in MODS or (not module and segs[0] in MODS):
        base = module.split("::") if module else []
    else:
        return None
    return base + segs


def resolve(mods: dict[str, Module], segs: list[str], depth: int = 0) -> str | None:
    """The module that defines the item `segs` names (re-exports followed)."""
    cur = ""
    for i, s in enumerate(segs):
        child = f"{cur}::{s}" if cur else s
        if child in mods:
            cur = child
            continue
        m = mods[cur]
        if s in m.reexports and depth < 8:
            target = absolute(cur, m.reexports[s])
            if target is not None:
                got = resolve(mods, target + segs[i + 1:], depth + 1)
                if got is not None:
                    return got
            return cur if s in m.items else None
        # A private `use` of another module's item, then named by path.
        for _pub, full, alias in m.uses:
            if alias == s and depth < 8:
                target = absolute(cur, full)
                if target is not None:
                    got = resolve(mods, target + segs[i + 1:], depth + 1)
                    if got is not None:
                        return got
        return cur
    return cur


WHY: dict[tuple[str, str], set[str]] = {}


def edges(mods: dict[str, Module]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {m: set() for m in mods}
    for name, m in mods.items():
        # A `pub use` is the module's public face, not a use: it is
        # followed where a path goes through it.
        paths = [full for pub, full, _ in m.uses if not pub]
        body = USE_RE.sub(" ", m.text)
        paths += PATH_RE.findall(body)
        children = [c.rpartition("::")[2] for c in mods if parent(c) == name and c]
        if children:
            bare = re.compile(r"(?<![A-Za-z0-9_:])((?:" + "|".join(children) + r")(?:::" + IDENT + r")+)")
            paths += bare.findall(body)
        for p in paths:
            segs = absolute(name, p)
            if segs is None:
                continue
            target = resolve(mods, segs)
            if target is None or target == name:
                continue
            out[name].add(target)
            WHY.setdefault((name, target), set()).add(p)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return comps


def layers(graph: dict[str, set[str]]) -> list[list[str]]:
    """Layer 0: modules nothing else uses; each next layer: what only the
    layers before it use. Modules on a circle are left out."""
    users: dict[str, set[str]] = {v: set() for v in graph}
    for v, ws in graph.items():
        for w in ws:
            users[w].add(v)
    placed: set[str] = set()
    out = []
    while True:
        layer = sorted(v for v in graph if v not in placed and users[v] <= placed)
        if not layer:
            return out
        out.append(layer)
        placed |= set(layer)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--crate", help="only this crate (citestream, host, gateway, …)")
    ap.add_argument("--why", action="store_true", help="the paths behind each arrow of a circle")
    args = ap.parse_args()
    bad = 0
    for crate, src in crates():
        if args.crate and crate != args.crate:
            continue
        mods = load(src)
        MODS.clear()
        MODS.update(mods)
        graph = edges(mods)
        circles = cycles(graph)
        print(f"## {crate} ({src.relative_to(ROOT)}): {len(mods)} modules")
        for i, layer in enumerate(layers(graph)):
            print(f"layer {i}:")
            for v in layer:
                arrow = ", ".join(sorted(graph[v])) or "-"
                print(f"  {v or '(root)'} -> {arrow}")
        print("circles: " + ("; ".join(" <-> ".join(c or "(root)" for c in comp) for comp in circles) if circles else "none"))
        if args.why:
            for comp in circles:
                for v in comp:
                    for w in sorted(graph[v] & set(comp)):
                        print(f"  {v or '(root)'} -> {w or '(root)'}: {', '.join(sorted(WHY[(v, w)]))}")
        print()
        bad += len(circles)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

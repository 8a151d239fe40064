#!/usr/bin/env python3
"""Checks that no dependency of a package asks for a newer Rust than its
minimum supported version: reads `cargo metadata --format-version 1` on
standard input, walks the normal and build dependencies of PACKAGE in the
resolved graph, and fails naming every crate whose `rust-version` is above
MSRV. The fallback of .ci/run's MSRV step when the MSRV toolchain cannot
be installed.

usage: cargo metadata --format-version 1 --all-features | msrv_deps.py PACKAGE MSRV
"""

import json
import sys


def version_tuple(v: str) -> tuple:
    return tuple(int(p) for p in v.split(".")[:3])


def main() -> int:
    package, msrv = sys.argv[1], sys.argv[2]
    meta = json.load(sys.stdin)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(i for i, p in packages.items() if p["name"] == package and p["source"] is None)
    seen, todo = set(), [root]
    while todo:
        node = nodes[todo.pop()]
        for dep in node["deps"]:
            kinds = {k["kind"] for k in dep["dep_kinds"]}
            if kinds & {None, "build"} and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    newer = sorted(
        f'{packages[i]["name"]} {packages[i]["version"]} (rust-version {packages[i]["rust_version"]})'
        for i in seen
        if packages[i].get("rust_version")
        and version_tuple(packages[i]["rust_version"]) > version_tuple(msrv)
    )
    for line in newer:
        print(f"needs a Rust newer than {msrv}: {line}")
    print(f"{len(seen)} dependencies of {package} checked against rust-version {msrv}: "
          f"{len(newer)} newer")
    return 1 if newer else 0


if __name__ == "__main__":
    sys.exit(main())

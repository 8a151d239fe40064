"""The search crate's conversation set (crates/search/tests/data/conversations.txt,
its format described at the top of that file) as request bodies, and the
tally the tests assert on, for measuring it through any host: the same
bodies as crates/search/tests/conversation.rs builds.

Contract
* `conversations()`: every conversation, as dicts with `kind`, `shape`,
  `want` (the answering document's title), `old` (a switch's old subject's
  title, else None) and `turns` [(role, text)].
* `request(c)`: (endpoint name "chat" | "messages", path, body dict) in the
  conversation's shape; system/developer turns go to the top-level `system`
  on messages.
* `Tally`: `add(c, titles)` with the top sources' titles, best first; then
  `follow` / `switch` counts and `line()` for the printout.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "crates/search/tests/data/conversations.txt"


def _title(doc: str) -> str:
    doc = doc.strip()
    return doc.strip('"') if doc.startswith('"') else f"{doc} - The World Factbook"


def conversations() -> list[dict]:
    out: list[dict] = []
    for line in DATA.read_text().splitlines():
        if line.startswith("## "):
            head, docs = line[3:].split("->")
            kind, shape = head.split()
            want, _, old = docs.partition("!")
            out.append({"kind": kind, "shape": shape, "want": _title(want),
                        "old": _title(old) if old else None, "turns": []})
        elif not line.startswith("#") and ": " in line and out:
            role, text = line.split(": ", 1)
            out[-1]["turns"].append((role, text))
    return out


def request(c: dict) -> tuple[str, str, dict]:
    blocks = c["shape"].endswith("-blocks")

    def content(text):
        return [{"type": "text", "text": text}] if blocks else text

    if c["shape"].startswith("chat"):
        msgs = [{"role": r, "content": content(t)} for r, t in c["turns"]]
        return "chat", "/v1/chat/completions", {"model": "citestream-demo", "web_search": True, "messages": msgs}
    system = "\n".join(t for r, t in c["turns"] if r in ("system", "developer"))
    msgs = [{"role": r, "content": content(t)} for r, t in c["turns"] if r in ("user", "assistant")]
    body = {"model": "citestream-demo", "max_tokens": 100, "web_search": True, "messages": msgs}
    if system:
        body["system"] = content(system)
    return "messages", "/v1/messages", body


class Tally:
    def __init__(self) -> None:
        self.follow = {"n": 0, "at1": 0, "at3": 0}
        self.switch = {"n": 0, "at1": 0, "old": 0}

    def add(self, c: dict, titles: list[str]) -> None:
        top = titles[:3]
        if c["kind"] == "switch":
            self.switch["n"] += 1
            self.switch["at1"] += top[:1] == [c["want"]]
            self.switch["old"] += c["old"] in top
        else:
            self.follow["n"] += 1
            self.follow["at1"] += top[:1] == [c["want"]]
            self.follow["at3"] += c["want"] in top

    def line(self) -> str:
        f, s = self.follow, self.switch
        return (f"follow-ups {f['n']}: top-1 {f['at1'] / f['n']:.3f} top-3 {f['at3'] / f['n']:.3f}; "
                f"switches {s['n']}: new first {s['at1'] / s['n']:.3f}, old in top 3 {s['old']}")


def assert_better(context: Tally, last: Tally) -> None:
    """The numbers the search crate's test asserts."""
    f, s, fl, sl = context.follow, context.switch, last.follow, last.switch
    assert f["at3"] >= 0.9 * f["n"], context.line()
    assert f["at3"] >= 2 * fl["at3"] and f["at1"] >= 2 * fl["at1"], (context.line(), last.line())
    assert s["at1"] >= 0.9 * s["n"] and s["at1"] >= sl["at1"], (context.line(), last.line())
    assert s["old"] <= sl["old"], (context.line(), last.line())

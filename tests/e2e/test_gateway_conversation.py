"""Search from the conversation through a real `citestream serve`.

The gateway on its embedded defaults (the demo upstream, the bundled
corpus, `search.query = "context"`): a follow-up that does not name its
subject ("What is the capital of Peru?" / answer / "And what is its
population?") is grounded in Peru's sources, on /v1/chat/completions
through the OpenAI SDK and on /v1/messages through the Anthropic SDK.
Then the whole conversation set of the search crate
(crates/search/tests/data/conversations.txt, the same file and the same
bodies as crates/search/tests/conversation.rs) through the process, with
`query = "context"` and with `query = "last"`: the numbers are the
crate's, since every host forms the query with the one implementation.
"""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import openai

DATA = Path(__file__).resolve().parents[2] / "crates/search/tests/data/conversations.txt"
PERU = "https://www.cia.gov/the-world-factbook/countries/peru/"
FOLLOW_UP = [
    {"role": "user", "content": "What is the capital of Peru?"},
    {"role": "assistant", "content": "The capital of Peru is Lima [1]."},
    {"role": "user", "content": "And what is its population?"},
]


def test_a_follow_up_finds_the_subject_of_the_conversation(serve):
    gw = serve(None)
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="anything", max_retries=0, timeout=60)
    res = client.chat.completions.with_raw_response.create(
        model="citestream-demo", messages=FOLLOW_UP, extra_body={"web_search": True})
    assert res.headers["x-citestream-search"] == "injected"
    sources = res.parse().model_extra["sources"]
    urls = [s["url"] for s in sources]
    assert urls[0].startswith(PERU), urls
    assert sum(u.startswith(PERU) for u in urls[:3]) >= 2, urls
    # The demo model answers from the sources: a population, cited to a
    # Peru passage (before, the UAE's population, cited to the UAE).
    msg = res.parse().choices[0].message
    assert msg.annotations, msg
    assert all(a.url_citation.url.startswith(PERU) for a in msg.annotations), msg.annotations
    assert msg.content.startswith("Population"), msg.content
    client.close()

    # The same conversation on /v1/messages, block content, a system
    # prompt naming another country.
    ac = anthropic.Anthropic(base_url=gw.url, api_key="anything", max_retries=0, timeout=60)
    blocks = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in FOLLOW_UP]
    raw = ac.messages.with_raw_response.create(
        model="citestream-demo", max_tokens=200, messages=blocks,
        system="You are a travel assistant for Norway.", extra_body={"web_search": True})
    body = json.loads(raw.http_response.read())
    assert raw.headers["x-citestream-search"] == "injected"
    cited = [s["url"] for s in body["sources"]]
    assert cited[0].startswith(PERU), cited
    ac.close()


def _conversations():
    out = []
    for line in DATA.read_text().splitlines():
        if line.startswith("## "):
            head, docs = line[3:].split("->")
            kind, shape = head.split()
            want, _, old = docs.partition("!")
            out.append({"kind": kind, "shape": shape, "want": _title(want), "old": _title(old) if old else None,
                        "turns": []})
        elif not line.startswith("#") and ": " in line and out:
            role, text = line.split(": ", 1)
            out[-1]["turns"].append((role, text))
    return out


def _title(doc: str) -> str:
    doc = doc.strip()
    return doc.strip('"') if doc.startswith('"') else f"{doc} - The World Factbook"


def _request(c):
    blocks = c["shape"].endswith("-blocks")

    def content(text):
        return [{"type": "text", "text": text}] if blocks else text

    if c["shape"].startswith("chat"):
        msgs = [{"role": r, "content": content(t)} for r, t in c["turns"]]
        return "/v1/chat/completions", {"model": "citestream-demo", "web_search": True, "messages": msgs}
    system = "\n".join(t for r, t in c["turns"] if r in ("system", "developer"))
    msgs = [{"role": r, "content": content(t)} for r, t in c["turns"] if r in ("user", "assistant")]
    body = {"model": "citestream-demo", "max_tokens": 100, "web_search": True, "messages": msgs}
    if system:
        body["system"] = content(system)
    return "/v1/messages", body


def _measure(gw, conversations):
    follow = {"n": 0, "at1": 0, "at3": 0}
    switch = {"n": 0, "at1": 0, "old": 0}
    with httpx.Client(base_url=gw.url, timeout=60) as http:
        for c in conversations:
            path, body = _request(c)
            r = http.post(path, json=body)
            assert r.status_code == 200, r.text
            titles = [s.get("title") for s in r.json().get("sources", [])][:3]
            if c["kind"] == "switch":
                switch["n"] += 1
                switch["at1"] += titles[:1] == [c["want"]]
                switch["old"] += c["old"] in titles
            else:
                follow["n"] += 1
                follow["at1"] += titles[:1] == [c["want"]]
                follow["at3"] += c["want"] in titles
    return follow, switch


def test_the_conversation_set_through_serve(serve):
    conversations = _conversations()
    assert len(conversations) >= 60
    context = _measure(serve(None), conversations)
    last = _measure(serve({"search": {"query": "last"}}), conversations)
    (f, s), (fl, sl) = context, last
    print(f"serve, query=context: follow-ups {f['n']}: top-1 {f['at1'] / f['n']:.3f} top-3 {f['at3'] / f['n']:.3f}; "
          f"switches {s['n']}: new first {s['at1'] / s['n']:.3f}, old in top 3 {s['old']}")
    print(f"serve, query=last: follow-ups top-1 {fl['at1'] / fl['n']:.3f} top-3 {fl['at3'] / fl['n']:.3f}; "
          f"switches new first {sl['at1'] / sl['n']:.3f}, old in top 3 {sl['old']}")
    assert f["at3"] >= 0.9 * f["n"]
    assert f["at3"] >= 2 * fl["at3"] and f["at1"] >= 2 * fl["at1"]
    assert s["at1"] >= 0.9 * s["n"] and s["at1"] >= sl["at1"]
    assert s["old"] <= sl["old"]

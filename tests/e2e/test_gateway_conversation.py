"""Search from the conversation through a real `citestream serve`.

The gateway on its embedded defaults (the demo upstream, the bundled
corpus, `search.query = "context"`): a follow-up that does not name its
subject ("What is the capital of Peru?" / answer / "And what is its
population?") is grounded in Peru's sources, on /v1/chat/completions
through the OpenAI SDK and on /v1/messages through the Anthropic SDK.
Then the whole conversation set of the search crate
(crates/search/tests/data/conversations.txt, the same file and the same
bodies as crates/search/tests/conversation.rs, harness/conversations.py) through the process, with
`query = "context"` and with `query = "last"`: the numbers are the
crate's, since every host forms the query with the one implementation.
"""

from __future__ import annotations

import json
import anthropic
import httpx
import openai

from harness.conversations import Tally, assert_better, conversations, request

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


def _measure(gw, conversations) -> Tally:
    tally = Tally()
    with httpx.Client(base_url=gw.url, timeout=60) as http:
        for c in conversations:
            _, path, body = request(c)
            r = http.post(path, json=body)
            assert r.status_code == 200, r.text
            tally.add(c, [s.get("title") for s in r.json().get("sources", [])])
    return tally


def test_the_conversation_set_through_serve(serve):
    convs = conversations()
    assert len(convs) >= 60
    context = _measure(serve(None), convs)
    last = _measure(serve({"search": {"query": "last"}}), convs)
    print(f"serve, query=context: {context.line()}")
    print(f"serve, query=last: {last.line()}")
    assert_better(context, last)

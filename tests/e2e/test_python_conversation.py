"""Search from the conversation through the Python package's `Grounding`
(the request side a LiteLLM callback runs): the search crate's conversation
set (harness/conversations.py) on the default config, with
`search.query = "context"` and `"last"`: the same numbers as through
`citestream serve` and the crate's own test, since every host forms the
query with the one implementation."""

from __future__ import annotations

import json

from harness.conversations import Tally, assert_better, conversations, request
from harness.procs import toml_dumps


def _measure(g, convs) -> Tally:
    tally = Tally()
    for c in convs:
        endpoint, _, body = request(c)
        p = g.prepare(json.dumps(body).encode(), endpoint=endpoint)
        assert p.search == "injected", (c, p.search)
        tally.add(c, [s.get("title") for s in p.sources.to_list()])
    return tally


def test_the_conversation_set_through_grounding(tmp_path):
    import citestream

    convs = conversations()
    plans = {"plans": {"default": {"searches_per_day": 1000}}}
    cfg = tmp_path / "context.toml"
    cfg.write_text(toml_dumps(plans))
    context = _measure(citestream.Grounding(str(cfg)), convs)
    cfg = tmp_path / "last.toml"
    cfg.write_text(toml_dumps({**plans, "search": {"query": "last"}}))
    last = _measure(citestream.Grounding(str(cfg)), convs)
    print(f"Grounding, query=context: {context.line()}")
    print(f"Grounding, query=last: {last.line()}")
    assert_better(context, last)

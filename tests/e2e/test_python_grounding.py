"""`citestream.Grounding` (the request side of a config file, from Python):
the example config loads, bad configs raise `ConfigError` naming the key,
and one request goes through quota, search and injection the way
`citestream serve` does it (same crates)."""

from __future__ import annotations

import json

import pytest

from harness.procs import ROOT, toml_dumps
from harness.replay import EXAMPLES

SOURCES = EXAMPLES / "lisbon" / "sources.json"
BODY = json.dumps({"model": "m", "stream": True, "web_search": True,
                   "messages": [{"role": "user", "content": "Lisbon weather?"}]}).encode()


@pytest.fixture(scope="module")
def cs():
    import citestream

    return citestream


def _grounding(cs, tmp_path, doc):
    path = tmp_path / "citestream.toml"
    path.write_text(toml_dumps(doc))
    return cs.Grounding(str(path))


def test_example_config_loads(cs):
    g = cs.Grounding(str(ROOT / "examples" / "litellm" / "citestream.toml"))
    assert g.dialect == "sources"
    assert g.prepare(b'{"model":"m","messages":[]}').search == "not-requested"


@pytest.mark.parametrize("doc,key", [
    ({"search": {"provider": "nope"}}, "search.provider"),
    ({"quota": {"store": "redis"}}, "quota.redis_url"),
    ({"rewrite": {"dialect": "all"}}, "rewrite.dialect"),
])
def test_bad_config_names_the_key(cs, tmp_path, doc, key):
    with pytest.raises(cs.ConfigError, match=key.replace(".", r"\.")):
        _grounding(cs, tmp_path, doc)
    with pytest.raises(cs.ConfigError, match="citestream.toml|No such file"):
        cs.Grounding(str(tmp_path / "missing" / "citestream.toml"))


def test_static_search_quota_and_injection(cs, tmp_path):
    g = _grounding(cs, tmp_path, {
        "search": {"provider": "static", "static": {"path": str(SOURCES)}},
        "rewrite": {"dialect": "both"},
        "plans": {"default": {"searches_per_day": 1}},
    })
    p = g.prepare(BODY)
    assert (p.search, p.remaining, p.account, p.stream, p.endpoint) == ("injected", 0, "anonymous", True, "chat")
    assert len(p.sources) == 3
    sent = json.loads(p.body)
    assert "web_search" not in sent and "[1] Lisbon weather" in sent["messages"][0]["content"]
    rw = p.rewriter()
    out = rw.feed((EXAMPLES / "lisbon" / "upstream.sse").read_bytes()) + rw.finish()
    assert b'"citations":[' in out and b'"sources":[' in out
    again = g.prepare(BODY)
    assert (again.search, again.sources, again.rewriter()) == ("quota-exhausted", None, None)
    assert json.loads(again.body)["messages"] == [{"role": "user", "content": "Lisbon weather?"}]
    assert again.rewrite_body(b'{"x":1}') == b'{"x":1}'


def test_prepare_errors(cs):
    g = cs.Grounding()
    with pytest.raises(cs.RequestError) as e:
        g.prepare(b'{"web_search":1,"messages":[]}')
    assert e.value.status == 400 and e.value.param == "web_search"
    assert json.loads(e.value.body)["error"]["type"] == "invalid_request_error"
    with pytest.raises(cs.RequestError) as e:
        g.prepare(b'{"web_search":1}', endpoint="messages")
    assert json.loads(e.value.body)["type"] == "error"
    with pytest.raises(TypeError):
        g.prepare("{}")
    with pytest.raises(TypeError, match="headers must be"):
        g.prepare(b"{}", headers=3)
    with pytest.raises(cs.CitestreamError, match="invalid header name"):
        g.prepare(b"{}", headers={"bad header": "x"})


def test_http_provider_and_failed_search(cs, tmp_path):
    from harness.search import SearchBackend

    results = [{"link": f"https://r{i}.example/", "title": f"R{i}", "snippet": f"snippet {i}"} for i in range(3)]
    backend = SearchBackend(results).start()
    try:
        g = _grounding(cs, tmp_path, {"search": {"provider": "http", "http": {"url": backend.url + "/search"}}})
        p = g.prepare(BODY)
        assert p.search == "injected"
        assert [s["url"] for s in p.sources.to_list()] == [r["link"] for r in results]
        [q] = backend.queries()
        assert q.body["query"] == "Lisbon weather?"
    finally:
        backend.stop()
    # The backend is gone: a failed search is a request without sources.
    failed = g.prepare(BODY)
    assert (failed.search, failed.sources) == ("failed", None)
    assert failed.remaining == 99

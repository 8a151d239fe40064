"""The `citestream` Python package (python/, PyO3) against the CLI.

* Every recorded upstream stream (tests/fixtures/upstream/*.sse and the
  Lisbon example) fed to `ChatRewriter` / `MessagesRewriter` in pieces of 1,
  7 and 1460 bytes and whole gives exactly the bytes of `citestream
  rewrite` (the CLI binary) for the same sources and options.
* Whole bodies: `rewrite_body` equals `citestream rewrite` on the folded
  body.
* The request side: `inspect` / `strip` / `inject` on the Lisbon request.

The package is built by conftest.py (harness/pyext.py) before the tests
run; it is imported inside the tests for that reason.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from harness import aggregate
from harness.procs import citestream_rewrite
from harness.replay import EXAMPLES, FIXTURES

LISBON = EXAMPLES / "lisbon"
SOURCES = LISBON / "sources.json"
STREAMS = sorted(FIXTURES.glob("*.sse")) + [LISBON / "upstream.sse"]
PIECES = [1, 7, 1460, 0]  # 0 = the whole input in one feed


@pytest.fixture(scope="module")
def cs():
    import citestream

    return citestream


def _name(p: Path) -> str:
    return "lisbon" if p.parent == LISBON else p.stem


def _endpoint(p: Path) -> str:
    return "messages" if p.name.startswith("anthropic_") else "chat"


def _n(p: Path) -> int:
    return 3 if "_n3_" in p.name else 1


@lru_cache(maxsize=None)
def _expected(path: Path, dialect: str, offsets: str) -> bytes:
    return citestream_rewrite(path.read_bytes(), SOURCES, endpoint=_endpoint(path), dialect=dialect,
                              offsets=offsets, n=_n(path))


def _feed(rw, data: bytes, piece: int) -> bytes:
    if piece == 0:
        return rw.feed(data) + rw.finish()
    out = bytearray()
    for i in range(0, len(data), piece):
        out += rw.feed(data[i:i + piece])
    out += rw.finish()
    return bytes(out)


def _rewriter(cs, path: Path, sources, dialect: str, offsets: str):
    cls = cs.MessagesRewriter if _endpoint(path) == "messages" else cs.ChatRewriter
    return cls(sources, dialect=dialect, offsets=offsets, n=_n(path))


@pytest.mark.parametrize("piece", PIECES, ids=lambda p: f"piece{p or 'whole'}")
@pytest.mark.parametrize("path", STREAMS, ids=_name)
def test_stream_matches_cli(cs, path, piece):
    sources = cs.Sources(SOURCES.read_bytes())
    data = path.read_bytes()
    got = _feed(_rewriter(cs, path, sources, "both", "chars"), data, piece)
    assert got == _expected(path, "both", "chars")


@pytest.mark.parametrize("offsets", ["utf16", "bytes"])
@pytest.mark.parametrize("dialect", ["sources", "citations"])
@pytest.mark.parametrize("path", STREAMS, ids=_name)
def test_options_match_cli(cs, path, dialect, offsets):
    # Sources given as a list of dicts this time.
    sources = json.loads(SOURCES.read_text())
    got = _feed(_rewriter(cs, path, sources, dialect, offsets), path.read_bytes(), 7)
    assert got == _expected(path, dialect, offsets)


@pytest.mark.parametrize("path", STREAMS, ids=_name)
def test_whole_body_matches_cli(cs, path):
    endpoint = _endpoint(path)
    if path.parent == LISBON:
        body = (LISBON / "upstream.json").read_bytes()
    elif endpoint == "messages":
        body = aggregate.messages_body(path.read_bytes())
    else:
        body = aggregate.chat_body(path.read_bytes())
    expected = citestream_rewrite(body, SOURCES, endpoint=endpoint, dialect="both", n=_n(path))
    got = cs.rewrite_body(body, cs.Sources(SOURCES.read_bytes()), endpoint=endpoint, dialect="both", n=_n(path))
    assert got == expected


def test_lisbon_annotations_offsets(cs):
    out = _feed(cs.ChatRewriter(SOURCES.read_bytes()), (LISBON / "upstream.sse").read_bytes(), 1)
    chunks = [json.loads(line[6:]) for line in out.decode().split("\n") if line.startswith("data: {")]
    anns = [a for c in chunks for ch in c.get("choices", []) for a in ch.get("delta", {}).get("annotations", [])]
    spans = [(a["url_citation"]["start_index"], a["url_citation"]["end_index"]) for a in anns]
    assert spans == [(66, 69), (137, 140)]
    with_sources = [c for c in chunks if "sources" in c]
    assert len(with_sources) == 1 and with_sources[0]["choices"][0]["finish_reason"] == "stop"


def test_request_side(cs):
    req = {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "What is the weather in Lisbon this weekend?"}]}
    req["web_search"] = True
    body = json.dumps(req).encode()
    i = cs.inspect(body)
    assert i.web_search is True and i.endpoint == "chat"
    assert b"web_search" not in i.body
    assert i.query == req["messages"][-1]["content"]
    assert cs.strip(body) == i.body
    injected = cs.inject(i.body, cs.Sources(SOURCES.read_bytes()))
    v = json.loads(injected)
    # A string content stays a string: `<block><question>`.
    content = v["messages"][-1]["content"]
    assert content == cs.render_sources(cs.Sources(SOURCES.read_bytes())) + req["messages"][-1]["content"]
    assert "[1] Lisbon weather: weekend outlook" in content
    text = cs.render_sources(cs.Sources(SOURCES.read_bytes()), header="H\n", source="<{n}:{title}>", separator="|")
    assert text.startswith("H\n<1:Lisbon weather: weekend outlook>|<2:")
    m = cs.inspect(b'{"model":"m","web_search":false,"messages":[]}', endpoint="messages")
    assert m.web_search is False and m.body == b'{"model":"m","messages":[]}' and m.query is None

"""Bad input to the `citestream` Python package raises a Python exception
with a clear message and never crashes the interpreter.

The crash check runs the whole battery in a child interpreter and asserts it
exits normally: a panic crossing the boundary or a segfault would kill it.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.replay import EXAMPLES, FIXTURES

SOURCES = EXAMPLES / "lisbon" / "sources.json"


@pytest.fixture(scope="module")
def cs():
    import citestream

    return citestream


@pytest.mark.parametrize("bad", ["text", None, 12, 1.5, ["x"], {"a": 1}, object()],
                         ids=["str", "None", "int", "float", "list", "dict", "object"])
def test_feed_takes_only_bytes(cs, bad):
    for cls in (cs.ChatRewriter, cs.MessagesRewriter):
        rw = cls(SOURCES.read_bytes())
        with pytest.raises(TypeError, match="data must be bytes, bytearray or memoryview"):
            rw.feed(bad)
        # The rewriter is still usable afterwards.
        assert rw.feed(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"
        assert rw.finish() == b""


def test_bytes_like_inputs(cs):
    data = (EXAMPLES / "lisbon" / "upstream.sse").read_bytes()
    expect = cs.ChatRewriter(SOURCES.read_bytes()).feed(data)
    assert cs.ChatRewriter(SOURCES.read_bytes()).feed(bytearray(data)) == expect
    assert cs.ChatRewriter(SOURCES.read_bytes()).feed(memoryview(data)) == expect


@pytest.mark.parametrize("bad,exc,msg", [
    ("not json", "SourcesError", "invalid sources"),
    (b"{}", "SourcesError", "expected a JSON array of objects"),
    ("[1, 2]", "SourcesError", "element 0 is not an object"),
    ([{"title": 3}], "SourcesError", "element 0"),
    ([{"url": ["x"]}], "SourcesError", "element 0"),
    ([{"title": object()}], "SourcesError", "not JSON-serializable"),
    ({"title": "t"}, "TypeError", "sources must be a list of dicts"),
    (42, "TypeError", "sources must be a list of dicts"),
    (None, "TypeError", "sources must be a list of dicts"),
], ids=["text", "object", "numbers", "title-int", "url-list", "unserializable", "dict", "int", "None"])
def test_invalid_sources_raise(cs, bad, exc, msg):
    err = TypeError if exc == "TypeError" else getattr(cs, exc)
    with pytest.raises(err, match=msg):
        cs.Sources(bad)
    with pytest.raises(err):
        cs.ChatRewriter(bad)
    with pytest.raises(err):
        cs.rewrite_body(b"{}", bad)
    if err is not TypeError:
        assert issubclass(err, cs.CitestreamError) and issubclass(err, ValueError)


@pytest.mark.parametrize("kwargs,msg", [
    ({"dialect": "all"}, "dialect must be 'sources', 'citations' or 'both'"),
    ({"offsets": "words"}, "offsets must be 'chars', 'utf16' or 'bytes'"),
    ({"n": 0}, "n must be between 1 and"),
    ({"n": -3}, "n must be between 1 and"),
    ({"n": 2**40}, "n must be between 1 and"),
])
def test_bad_options_raise(cs, kwargs, msg):
    with pytest.raises(cs.CitestreamError, match=msg):
        cs.ChatRewriter([], **kwargs)
    with pytest.raises(cs.CitestreamError, match=msg):
        cs.rewrite_body(b"{}", [], **kwargs)
    with pytest.raises(TypeError):
        cs.ChatRewriter([], dialect=3)


def test_feed_after_finish_raises(cs):
    rw = cs.ChatRewriter([])
    rw.feed(b"data: x\n\n")
    rw.finish()
    assert rw.finish() == b""
    with pytest.raises(cs.CitestreamError, match="feed\\(\\) after finish\\(\\)"):
        rw.feed(b"data: y\n\n")


def test_request_errors_carry_the_error_body(cs):
    with pytest.raises(cs.RequestError) as e:
        cs.inspect(b'{"model":"m","web_search":"yes","messages":[]}')
    assert e.value.status == 400 and e.value.param == "web_search"
    body = json.loads(e.value.body)
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["param"] == "web_search"
    with pytest.raises(cs.RequestError) as e:
        cs.inspect(b"[1]", endpoint="messages")
    assert json.loads(e.value.body)["type"] == "error" and e.value.param is None
    with pytest.raises(cs.RequestError, match="could not parse"):
        cs.strip(b"{nope")
    with pytest.raises(cs.InjectError, match="no messages array"):
        cs.inject(b'{"model":"m"}', [{"title": "t"}])
    with pytest.raises(cs.CitestreamError, match="endpoint must be 'chat', 'messages' or 'responses'"):
        cs.inspect(b"{}", endpoint="embeddings")
    with pytest.raises(cs.CitestreamError, match="placement must be"):
        cs.inject(b'{"messages":[]}', [], placement="middle")
    with pytest.raises(TypeError):
        cs.inspect("{}")


def test_unowned_bodies_pass_unchanged(cs):
    for body in [b"", b"not json", b'{"error":{"message":"x"}}', b"\xff\xfe", b"[]"]:
        assert cs.rewrite_body(body, SOURCES.read_bytes()) == body


def test_random_bytes_never_crash(cs):
    rng = random.Random(7)
    corpus = [p.read_bytes() for p in sorted(FIXTURES.glob("*.sse"))[:8]]
    for i in range(300):
        base = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 20)):
            base[rng.randrange(len(base))] = rng.randrange(256)
        cls = cs.MessagesRewriter if i % 2 else cs.ChatRewriter
        rw = cls(SOURCES.read_bytes(), dialect="both")
        out = bytearray()
        step = rng.randint(1, 64)
        for j in range(0, len(base), step):
            out += rw.feed(bytes(base[j:j + step]))
        out += rw.finish()
        assert out  # every input byte is forwarded or rewritten


def test_threads_share_nothing(cs):
    # Large inputs release the GIL; rewriters in parallel threads each get
    # their own correct output.
    data = (EXAMPLES / "lisbon" / "upstream.sse").read_bytes()
    big = data.replace(b"data: [DONE]\n\n", b"") * 200 + b"data: [DONE]\n\n"
    expect = cs.ChatRewriter(SOURCES.read_bytes()).feed(big)
    results = [None] * 4

    def work(k):
        rw = cs.ChatRewriter(SOURCES.read_bytes())
        results[k] = rw.feed(big) + rw.finish()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expect for r in results)


def test_bad_input_in_a_child_interpreter_exits_cleanly():
    script = r"""
import citestream as cs
bad = ["x", None, 1, [1], {"a": 1}, b"\xff", "[{\"title\": 3}]"]
n = 0
for b in bad:
    for f in (lambda: cs.Sources(b), lambda: cs.ChatRewriter([]).feed(b), lambda: cs.inspect(b),
              lambda: cs.rewrite_body(b, []), lambda: cs.inject(b, []), lambda: cs.MessagesRewriter(b)):
        try:
            f()
        except (TypeError, cs.CitestreamError):
            n += 1
print("raised", n)
"""
    path = str(Path(__file__).resolve().parents[2] / "python")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("raised ")
    assert int(proc.stdout.split()[1]) >= 30

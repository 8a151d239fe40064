"""The official `openai` Python SDK reading `/v1/responses` streams rewritten
by the `citestream` package's `ResponsesRewriter`.

Recorded real Responses streams (tests/fixtures/upstream/responses/) get
`[n]` markers put into their text deltas, go through the rewriter, and are
served from a loopback HTTP server of this test to the SDK:
`client.responses.create(stream=True)` (every event validated against the
SDK's `ResponseStreamEvent` union; the `annotation.added` events'
annotations equal the oracle's) and `client.responses.stream(...)` (its
final response's `annotations` equal the oracle's, after the upstream's
own). The oracle finds the markers in the text with a regular expression
(the chosen streams have no backticks, so the code rules do not apply).
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from pathlib import Path

import openai
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/upstream/responses"
SOURCES = [
    {"title": "A", "url": "https://a.example/"},
    {"title": "B \"b\"", "url": "https://b.example/?q=1&r=2"},
    {"title": "C é", "url": "https://c.example/"},
]
STREAMS = [
    "openai_gpt4omini_text_obfuscation",
    "openai_gpt4omini_logprobs_instructions",
    "openai_gpt4omini_text_no_sequence_number",
    "openai_gpt52_web_search_annotation",
    "openai_gpt5_reasoning_summary_encrypted_text",
    "deepseek_v4flash_reasoning_text_uuid_ids",
    "openrouter_gptoss20b_reasoning_text_no_event_lines",
    "xai_grok4fast_web_search_citations_without_indices",
]
EVENTS = TypeAdapter(ResponseStreamEvent)


def marked(raw: bytes) -> bytes:
    """The stream with ` [k]` markers at the start of its text deltas."""
    out = []
    for k, line in enumerate(raw.decode().split("\n")):
        if line.startswith("data: ") and '"response.output_text.delta"' in line:
            line = line.replace('"delta":"', f'"delta":"[{k % 4 + 1}] ', 1)
        out.append(line)
    return "\n".join(out).encode()


def oracle(text: str) -> list[tuple[int, int, int]]:
    """(start, end, number) of each marker of `text` (offsets in code points)."""
    assert "`" not in text
    found = []
    for m in re.finditer(r"\[([1-9][0-9]{0,3})\]", text):
        if m.start() > 0 and text[m.start() - 1] == "\\":
            continue
        if int(m.group(1)) <= len(SOURCES):
            found.append((m.start(), m.end(), int(m.group(1))))
    return found


def expected(text: str) -> list[dict]:
    return [
        {"type": "url_citation", "start_index": s, "end_index": e,
         "url": SOURCES[n - 1]["url"], "title": SOURCES[n - 1]["title"]}
        for s, e, n in oracle(text)
    ]


def rewrite(data: bytes, piece: int) -> bytes:
    import citestream

    rw = citestream.ResponsesRewriter(json.dumps(SOURCES).encode())
    out = bytearray()
    for i in range(0, len(data), piece):
        out += rw.feed(data[i:i + piece])
    out += rw.finish()
    return bytes(out)


class _Serve(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(body: bytes) -> str:
        handler = type("H", (_Serve,), {"body": body})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def events(raw: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in raw.decode().split("\n") if line.startswith("data: {")]


def valid(v: dict) -> bool:
    try:
        EVENTS.validate_python(v)
        return True
    except ValueError:
        return False


def texts(raw: bytes) -> dict[tuple[int, int], str]:
    """Each text part's text, from the upstream's deltas."""
    parts: dict[tuple[int, int], str] = {}
    for line in raw.decode().split("\n"):
        if line.startswith("data: {"):
            v = json.loads(line[6:])
            if v.get("type") == "response.output_text.delta":
                key = (v["output_index"], v["content_index"])
                parts[key] = parts.get(key, "") + v["delta"]
    return parts


@pytest.mark.parametrize("piece", [7, 1460, 1 << 20])
@pytest.mark.parametrize("name", STREAMS)
def test_sdk_reads_rewritten_responses_stream(serve, name, piece):
    upstream = marked((FIXTURES / f"{name}.sse").read_bytes())
    parts = texts(upstream)
    assert parts, name
    rewritten = rewrite(upstream, piece)
    # Every inserted event is one the SDK knows, with the fields it
    # requires; every other event validates when the upstream's did (some
    # recordings predate fields this SDK version requires).
    up = iter(events(upstream))
    for v in events(rewritten):
        if v["type"] == "response.output_text.annotation.added" and v["annotation"]["url"].startswith(
            tuple(s["url"] for s in SOURCES)
        ):
            # (A stream without sequence numbers gets inserted events
            # without one, which this SDK's type requires: checked with one.)
            EVENTS.validate_python({"sequence_number": 0, **v})
            continue
        if valid(next(up)):
            EVENTS.validate_python(v)

    client = openai.OpenAI(base_url=serve(rewritten), api_key="sk-test", max_retries=0)
    added: dict[tuple[int, int], list] = {}
    upstream_added: dict[tuple[int, int], list] = {}
    for ev in client.responses.create(model="m", input="q", stream=True):
        if ev.type == "response.output_text.annotation.added":
            added.setdefault((ev.output_index, ev.content_index), []).append(ev.annotation)
    for line in upstream.decode().split("\n"):
        if line.startswith("data: {") and "annotation.added" in line:
            v = json.loads(line[6:])
            upstream_added.setdefault((v["output_index"], v["content_index"]), []).append(v["annotation"])
    for key, text in parts.items():
        ours = [a for a in added.get(key, [])][len(upstream_added.get(key, [])):]
        assert [dict(a) for a in ours] == expected(text), (name, key)

    with client.responses.stream(model="m", input="q") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    for (o, c), text in parts.items():
        content = final.output[o].content[c]
        got = [a.model_dump(exclude_none=True) for a in content.annotations]
        n_up = len(upstream_added.get((o, c), []))
        assert got[n_up:] == expected(text), (name, o, c)
    assert [s["index"] for s in final.model_extra["sources"]] == [1, 2, 3]

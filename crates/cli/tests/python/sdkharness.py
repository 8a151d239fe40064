"""Shared harness for the SDK tests: paths, the `citestream rewrite` runner and
a tiny loopback HTTP server that replays canned response bytes.

The scripts are driven by tests/python_sdk.rs, which sets:
  CITESTREAM_BIN   path of the `citestream` binary under test
  CITESTREAM_ROOT  the crate root (fixtures, examples)
They can also be run by hand with those two variables set.
"""

from __future__ import annotations

import atexit
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(os.environ.get("CITESTREAM_ROOT") or Path(__file__).resolve().parents[2])
BIN = os.environ.get("CITESTREAM_BIN") or str(ROOT / "target" / "debug" / "citestream")
FIXTURES = ROOT / "tests" / "fixtures" / "upstream"
LISBON = ROOT / "examples" / "lisbon"

# The generic 3-entry sources file used for every fixture.
THREE_SOURCES = [
    {
        "title": "First source",
        "url": "https://one.example/a",
        "text": "Snippet one.",
        "heading": "Heading one",
        "author": "Ann Author",
        "year": "2024",
        "reference": "para. 1",
    },
    {"title": "Second source", "url": "https://two.example/b?q=1&r=2", "text": "Snippet two."},
    {"title": "Third source", "url": "https://three.example/c"},
]

_TMP = tempfile.TemporaryDirectory(prefix="citestream-pysdk-")
atexit.register(_TMP.cleanup)


def sources_file(sources: list[dict]) -> Path:
    """Write `sources` to a fresh file and return its path."""
    fd, name = tempfile.mkstemp(suffix=".json", dir=_TMP.name)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(sources, f, ensure_ascii=False)
    return Path(name)


def load_sources(path: Path) -> list[dict]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def rewrite(
    data: bytes,
    sources: Path,
    *,
    endpoint: str | None = None,
    dialect: str | None = None,
    offsets: str | None = None,
    n: int | None = None,
    chunk_size: int | None = None,
) -> bytes:
    """Run `citestream rewrite` on `data` (via stdin) and return its stdout."""
    args = [BIN, "rewrite", "--sources", str(sources)]
    if endpoint:
        args += ["--endpoint", endpoint]
    if dialect:
        args += ["--dialect", dialect]
    if offsets:
        args += ["--offsets", offsets]
    if n is not None:
        args += ["--n", str(n)]
    if chunk_size is not None:
        args += ["--chunk-size", str(chunk_size)]
    proc = subprocess.run(args, input=data, capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
        )
    return proc.stdout


def expected_sources_member(sources: list[dict]) -> list[dict]:
    """Top-level `sources` = [{index, title, url}] for every source
    (docs/reference/responses.md, "Dialects")."""
    return [{"index": i + 1, "title": s.get("title"), "url": s.get("url")} for i, s in enumerate(sources)]


def expected_citations_member(sources: list[dict]) -> list[dict]:
    """One entry per source, every key present (docs/reference/responses.md,
    "The citations array")."""
    return [
        {
            "cited_text": s.get("text") or "",
            "cited_text_heading": s.get("heading"),
            "document_title": s.get("title"),
            "document_index": i,
            "document_author": s.get("author"),
            "document_year": s.get("year"),
            "document_reference": s.get("reference"),
            "source_url": s.get("url") or "",
        }
        for i, s in enumerate(sources)
    ]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # keep test output readable

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        owner: ReplayServer = self.server.owner
        if "/v1/chat/completions" not in path and "/v1/messages" not in path:
            self._send(404, "application/json", b'{"error":{"message":"no such path"}}')
            return
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        owner.requests.append((path, parsed))
        if owner.response is None:
            self._send(500, "application/json", b'{"error":{"message":"test server has no response set"}}')
            return
        status, ctype, payload = owner.response
        self._send(status, ctype, payload)

    def _send(self, status: int, ctype: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        # Several writes, so the client really reads the body incrementally.
        step = 512
        for i in range(0, len(payload), step):
            self.wfile.write(payload[i : i + step])
            self.wfile.flush()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: "ReplayServer"

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that stops reading early (an SDK raising on an error event)
        # resets the connection; that is not a test failure.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class ReplayServer:
    """Loopback HTTP server answering POSTs under /v1/chat/completions and
    /v1/messages with whatever bytes were last given to `serve`."""

    def __init__(self) -> None:
        self.response: tuple[int, str, bytes] | None = None
        self.requests: list[tuple[str, object]] = []
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, payload: bytes, status: int = 200) -> None:
        """Answer the next requests with `payload`: a JSON body when its first
        non-whitespace byte is `{`, otherwise an SSE stream."""
        ctype = "application/json" if payload.lstrip()[:1] == b"{" else "text/event-stream"
        self.response = (status, ctype, payload)

    def last_request(self) -> tuple[str, object]:
        assert self.requests, "the SDK sent no request to the test server"
        return self.requests[-1]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def print_versions() -> None:
    import anthropic
    import openai
    import pydantic

    print(
        f"python {sys.version.split()[0]}; openai {openai.__version__}; "
        f"anthropic {anthropic.__version__}; pydantic {pydantic.VERSION}",
        flush=True,
    )


def extras(model: object) -> dict:
    """A pydantic model's unknown members (`model_extra`), never None."""
    return dict(getattr(model, "model_extra", None) or {})

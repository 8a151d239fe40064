"""Loopback upstream that replays recorded model-server responses.

The only stand-in the end-to-end tests use: an OpenAI-/Anthropic-compatible
model server on 127.0.0.1 that answers with the recorded real streams of
tests/fixtures/upstream/ (or examples/<name>/upstream.{sse,json}), written in
random piece sizes, and records everything it received.

Contract
* `POST /v1/chat/completions`, `POST /v1/messages` and `POST /v1/responses` pick what to replay from
  the request body's `model` field, so it works through any host (gateway,
  Envoy, LiteLLM) without custom headers:
  `"model": "replay:NAME?opt=value&opt=value"`. NAME is, in lookup order, a
  body registered with `ReplayServer.register` (or `POST /_replay/register`),
  `<extra dir>/NAME.{sse,json}`, `tests/fixtures/upstream/NAME.{sse,json}`,
  `tests/fixtures/upstream/responses/NAME.{sse,json}`,
  `examples/NAME/upstream.{sse,json}`. A request that names no `replay:`
  model uses `ReplayServer.default` when set, else gets a 400.
* `"stream": true` gets the `.sse` body (`text/event-stream`, chunked);
  otherwise the `.json` body, or, when only a stream is recorded, the whole
  body folded from it (`aggregate.py`, chat, messages or responses by path).
  `ReplayServer.body(name, stream, path)` returns exactly the bytes served.
* Options (see `Scenario`): `seed` (piece sizes), `piece` (fixed piece size),
  `delay` (seconds before the status line), `gap` (seconds between pieces),
  `status` (an HTTP error status with an error body in the endpoint's shape,
  or `body=NAME` for a registered/recorded body), `gzip=1`
  (`content-encoding: gzip`), `cut=N` (close the connection after N body
  bytes: a truncated upstream).
* Pieces: sizes drawn log-uniformly from 1 B..16 KiB with `random.Random(seed)`
  (default seed 0), each written as its own HTTP chunk and drained (TCP_NODELAY).
* Recording: every request (method, path, headers in order, body bytes), the
  scenario, the status sent, bytes written, whether the response completed
  and whether the client went away before its end (EOF or reset seen while
  waiting before headers, between pieces or on write) — in-process via
  `ReplayServer.exchanges()` / `wait_for()`, and over `GET /_replay/log`
  (JSON; `POST /_replay/reset` clears it). `/_replay/*` requests are not
  recorded.
* Keep-alive closing (`ReplayServer(closing=...)`, `--closing`), never
  announced with `connection: close`, the way real servers drop kept-alive
  connections: `"each"` closes every connection right after its answer;
  `"random:N"` after 1..N answers (drawn per connection); `"idle:S"` when no
  request came for S seconds after an answer (uvicorn's keep-alive timeout,
  5 s by default); `"mixed"` gives
  each new connection one of the three (random:4, idle:0.05); `"under"`
  answers a connection's first request and closes the connection when the
  next one arrives, without answering it (`ReplayServer.closed_under`
  counts them): the keep-alive race every time, as a client sees a close it
  learns of only once its request is out. `None` keeps
  connections open. `ReplayServer.connections` counts accepted ones;
  `ReplayServer.record = False` keeps no log (long soaks).
* Any other path (e.g. `GET /v1/models`) answers 200 with a JSON echo of the
  request, and is recorded, for proxy tests.
* Runs in-process (`ReplayServer().start()`, its own event loop in a daemon
  thread, a free port) or as `python -m harness.replay [--port N]` (prints
  `replay listening on 127.0.0.1:PORT` and serves until killed). Stdlib only.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import json
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

try:
    from . import aggregate
except ImportError:  # run as a plain script
    import aggregate  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "upstream"
EXAMPLES = ROOT / "examples"
MAX_PIECE = 16 * 1024
GROUNDED = ("/v1/chat/completions", "/v1/messages", "/v1/responses")
RESPONSES_FIXTURES = FIXTURES / "responses"


@dataclass
class Scenario:
    """What to answer, parsed from `replay:NAME?opt=value&...`."""

    name: str
    seed: int = 0
    piece: int = 0
    delay: float = 0.0
    gap: float = 0.0
    status: int = 200
    body: str = ""
    gzip: bool = False
    cut: int = -1

    @classmethod
    def parse(cls, model: object) -> "Scenario | None":
        if not isinstance(model, str) or not model.startswith("replay:"):
            return None
        name, _, query = model[len("replay:") :].partition("?")
        sc = cls(name=name)
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key in ("seed", "piece", "status", "cut"):
                setattr(sc, key, int(value))
            elif key in ("delay", "gap"):
                setattr(sc, key, float(value))
            elif key == "gzip":
                sc.gzip = value not in ("", "0", "false")
            elif key == "body":
                sc.body = value
            else:
                raise ValueError(f"unknown replay option {key!r}")
        return sc


def parse_closing(spec: str | None) -> tuple[str | None, float]:
    """`None`, `"each"`, `"random:N"`, `"idle:S"`, `"mixed"`, `"under"` as (kind, number)."""
    if spec is None or spec == "":
        return None, 0.0
    kind, _, arg = spec.partition(":")
    if kind in ("each", "mixed", "under") and not arg:
        return kind, 0.0
    if kind in ("random", "idle") and arg:
        return kind, float(arg)
    raise ValueError(f"closing must be each, random:N, idle:SECONDS, mixed or under, not {spec!r}")


def piece_sizes(total: int, seed: int, fixed: int = 0) -> list[int]:
    """Sizes (summing to `total`) of the pieces a body is written in."""
    rng = random.Random(seed)
    sizes = []
    while total > 0:
        n = fixed or min(MAX_PIECE, int(2 ** rng.uniform(0, 14.1)))
        n = max(1, min(n, total))
        sizes.append(n)
        total -= n
    return sizes


@dataclass
class Exchange:
    """One request the replay server received and what it did about it."""

    id: int
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    scenario: str | None = None
    status: int | None = None
    bytes_sent: int = 0
    completed: bool = False
    client_disconnected: bool = False
    disconnect_phase: str | None = None
    done: bool = False
    received_at: float = field(default_factory=time.monotonic)

    def header(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive), or None."""
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)

    def json(self):
        """The request body parsed as JSON."""
        return json.loads(self.body)

    def to_json(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "body"}
        d["headers"] = [list(h) for h in self.headers]
        d["body_b64"] = base64.b64encode(self.body).decode()
        d["body_text"] = self.body.decode("utf-8", "replace")
        return d


class _Request:
    def __init__(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes):
        self.method, self.target, self.headers, self.body = method, target, headers, body
        self.path = urlsplit(target).path

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked HTTP/1.1 body (trailers skipped), de-chunked."""
    parts = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = []
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers.append((k.strip(), v.strip()))
    req = _Request(method, target, headers, b"")
    if (req.header("transfer-encoding") or "").lower() == "chunked":
        req.body = await read_chunked(reader)
    else:
        req.body = await reader.readexactly(int(req.header("content-length") or 0))
    return req


async def _cancel(task: asyncio.Future) -> None:
    """Cancels `task` and waits until it is over (a pending read must end
    before the next read of the same stream starts)."""
    if not task.done():
        task.cancel()
    try:
        await task
    except (asyncio.CancelledError, ConnectionError):
        pass


def _error_body(path: str, status: int, message: str) -> bytes:
    if path == "/v1/messages":
        err = {"type": "error", "error": {"type": "api_error", "message": message}}
    else:
        err = {"error": {"message": message, "type": "replay_error", "param": None, "code": str(status)}}
    return json.dumps(err).encode()


class LoopbackServer:
    """An asyncio HTTP/1.1 server on 127.0.0.1 run on its own thread.
    Subclasses implement `_conn(reader, writer)`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host, self.port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _start_async(self) -> None:
        self._server = await asyncio.start_server(self._conn, self.host, self.port, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]

    def start(self):
        """Starts serving on a background thread; returns once listening."""
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start_async())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=type(self).__name__, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return self

    def stop(self) -> None:
        """Closes the listener and every open connection; joins the thread."""
        if self._loop is None:
            return
        loop = self._loop

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    @property
    def url(self) -> str:
        """Base URL, e.g. `http://127.0.0.1:PORT` (no trailing slash)."""
        return f"http://{self.host}:{self.port}"


class ReplayServer(LoopbackServer):
    """The replay upstream; see the module docs."""

    def __init__(self, extra_dirs: list[Path] | None = None, host: str = "127.0.0.1", port: int = 0,
                 closing: str | None = None, seed: int = 0):
        super().__init__(host, port)
        self.extra_dirs = [Path(d) for d in extra_dirs or []]
        parse_closing(closing)  # fail early on a bad spec
        self.closing = closing
        self.connections = 0
        self.closed_under = 0
        self.record = True  # False: keep no log (long soaks)
        self._close_rng = random.Random(seed)
        self.default: str | None = None
        self._registered: dict[str, dict[str, bytes]] = {}
        self._log: list[Exchange] = []
        self._cond = threading.Condition()

    # ---- bodies -------------------------------------------------------
    def register(self, name: str, *, sse: bytes | None = None, json_body: bytes | None = None) -> None:
        """Makes `replay:NAME` answer with these bytes."""
        entry = self._registered.setdefault(name, {})
        if sse is not None:
            entry["sse"] = sse
        if json_body is not None:
            entry["json"] = json_body

    def _find(self, name: str, kind: str) -> bytes | None:
        if kind in self._registered.get(name, {}):
            return self._registered[name][kind]
        if "/" in name or name.startswith("."):
            return None
        for path in [d / f"{name}.{kind}" for d in self.extra_dirs] + [
            FIXTURES / f"{name}.{kind}",
            RESPONSES_FIXTURES / f"{name}.{kind}",
            EXAMPLES / name / f"upstream.{kind}",
        ]:
            if path.is_file():
                return path.read_bytes()
        return None

    def body(self, name: str, stream: bool, path: str = "/v1/chat/completions") -> tuple[bytes, str]:
        """(bytes, content type) that `replay:NAME` is answered with."""
        sse, whole = self._find(name, "sse"), self._find(name, "json")
        if stream and sse is not None:
            return sse, "text/event-stream"
        if whole is not None:
            return whole, "application/json"
        if sse is None:
            raise KeyError(f"no recorded body named {name!r}")
        fold = {"/v1/messages": aggregate.messages_body,
                "/v1/responses": aggregate.responses_body}.get(path, aggregate.chat_body)
        return fold(sse), "application/json"

    # ---- log ----------------------------------------------------------
    def exchanges(self) -> list[Exchange]:
        """A copy of the log, oldest first."""
        with self._cond:
            return list(self._log)

    def clear(self) -> None:
        with self._cond:
            self._log.clear()

    def wait_for(self, predicate, timeout: float = 10.0) -> list[Exchange]:
        """Waits until `predicate(exchanges)` is true; returns the log.
        Raises TimeoutError with the log when it does not become true."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self._log):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"replay log never matched: {[e.to_json() for e in self._log]!r}"[:4000])
                self._cond.wait(min(left, 0.02))  # fields also change without a notify
            return list(self._log)

    def _record(self, req: _Request) -> Exchange:
        with self._cond:
            ex = Exchange(len(self._log) + 1, req.method, req.target, req.headers, req.body)
            if self.record:
                self._log.append(ex)
            self._cond.notify_all()
            return ex

    def _finish(self, ex: Exchange) -> None:
        with self._cond:
            ex.done = True
            self._cond.notify_all()

    # ---- serving ------------------------------------------------------
    def _conn_policy(self) -> tuple[int | None, float | None]:
        """(answers before closing, idle seconds) for a new connection."""
        kind, arg = parse_closing(self.closing)
        if kind == "mixed":
            kind, arg = self._close_rng.choice([("each", 0.0), ("random", 4.0), ("idle", 0.05)])
        if kind == "each":
            return 1, None
        if kind == "random":
            return self._close_rng.randint(1, int(arg)), None
        if kind == "idle":
            return None, arg
        return None, None

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections += 1
        budget, idle = self._conn_policy()
        under = parse_closing(self.closing)[0] == "under"
        answered = 0
        try:
            while True:
                if idle is not None and answered > 0:
                    try:
                        req = await asyncio.wait_for(_read_request(reader), idle)
                    except asyncio.TimeoutError:
                        break  # idle too long: closed, as uvicorn does
                else:
                    req = await _read_request(reader)
                if req is None:
                    break
                if under and answered > 0:
                    self.closed_under += 1
                    break  # closed under the request, unanswered
                if (req.header("expect") or "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                if not await self._respond(req, reader, writer):
                    break
                answered += 1
                if budget is not None and answered >= budget:
                    break  # closed after the answer, without `connection: close`
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    async def _respond(self, req: _Request, reader, writer) -> bool:
        if req.path.startswith("/_replay/"):
            await self._control(req, writer)
            return True
        ex = self._record(req)
        try:
            if req.method == "POST" and req.path in GROUNDED:
                return await self._replay(req, ex, reader, writer)
            echo = {"object": "replay.echo", "method": req.method, "path": req.target, "body_bytes": len(req.body)}
            await self._simple(ex, writer, 200, json.dumps(echo).encode())
            return True
        finally:
            self._finish(ex)

    async def _simple(self, ex: Exchange | None, writer, status: int, body: bytes, ctype="application/json") -> None:
        head = f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()
        if ex is not None:
            ex.status, ex.bytes_sent, ex.completed = status, len(body), True

    async def _control(self, req: _Request, writer) -> None:
        if req.path == "/_replay/log":
            body = json.dumps([e.to_json() for e in self.exchanges()]).encode()
        elif req.path == "/_replay/reset" and req.method == "POST":
            self.clear()
            body = b"{}"
        elif req.path == "/_replay/register" and req.method == "POST":
            q = dict(parse_qsl(urlsplit(req.target).query))
            kind = "sse" if q.get("kind", "sse") == "sse" else "json"
            self.register(q["name"], **{"sse" if kind == "sse" else "json_body": req.body})
            body = b"{}"
        elif req.path == "/_replay/default" and req.method == "POST":
            self.default = req.body.decode() or None
            body = b"{}"
        else:
            await self._simple(None, writer, 404, b'{"error":"unknown replay control path"}')
            return
        await self._simple(None, writer, 200, body)

    def _scenario(self, req: _Request) -> Scenario:
        try:
            model = json.loads(req.body).get("model")
        except (ValueError, AttributeError):
            model = None
        sc = Scenario.parse(model)
        if sc is None and self.default:
            sc = Scenario.parse(self.default if self.default.startswith("replay:") else "replay:" + self.default)
        if sc is None:
            raise ValueError(f"no replay scenario: model {model!r} does not start with 'replay:'")
        return sc

    async def _replay(self, req: _Request, ex: Exchange, reader, writer) -> bool:
        try:
            sc = self._scenario(req)
            ex.scenario = sc.name
            try:
                stream = bool(json.loads(req.body).get("stream"))
            except (ValueError, AttributeError):
                stream = False
            if sc.status != 200:
                body = self.body(sc.body, False, req.path)[0] if sc.body else _error_body(
                    req.path, sc.status, f"replayed error {sc.status}"
                )
                ctype = "application/json"
            else:
                body, ctype = self.body(sc.body or sc.name, stream, req.path)
        except (ValueError, KeyError) as e:
            await self._simple(ex, writer, 400, _error_body(req.path, 400, str(e)))
            return True
        watch = asyncio.ensure_future(reader.read(1))
        try:
            return await self._send(sc, ex, body, ctype, watch, writer)
        finally:
            await _cancel(watch)

    async def _gone(self, ex: Exchange, watch: asyncio.Future, timeout: float, phase: str) -> bool:
        """Waits up to `timeout`; True (and recorded) when the client went away."""
        if timeout > 0 and not watch.done():
            await asyncio.wait({watch}, timeout=timeout)
        if watch.done() and (watch.cancelled() or watch.exception() is not None or watch.result() == b""):
            ex.client_disconnected, ex.disconnect_phase = True, phase
            return True
        return False

    async def _send(self, sc: Scenario, ex: Exchange, body: bytes, ctype: str, watch, writer) -> bool:
        if await self._gone(ex, watch, sc.delay, "before-headers"):
            return False
        headers = [f"content-type: {ctype}", "cache-control: no-cache", f"x-replay-exchange: {ex.id}"]
        if sc.gzip:
            body = gzip.compress(body)
            headers.append("content-encoding: gzip")
        chunked = ctype == "text/event-stream"
        headers.append("transfer-encoding: chunked" if chunked else f"content-length: {len(body)}")
        ex.status = sc.status
        phase = "before-headers"
        try:
            head = f"HTTP/1.1 {sc.status} X\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
            writer.write(head.encode())
            await writer.drain()
            phase = "body"
            sent = 0
            for n in piece_sizes(len(body), sc.seed, sc.piece):
                if 0 <= sc.cut <= sent:
                    break
                piece = body[sent : sent + n]
                writer.write(b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece)
                await writer.drain()
                sent += n
                ex.bytes_sent = sent
                if await self._gone(ex, watch, sc.gap, "body"):
                    return False
            if 0 <= sc.cut < len(body):
                return False  # truncated upstream: close without the last chunk
            if chunked:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            ex.completed = True
        except (ConnectionError, RuntimeError):
            ex.client_disconnected, ex.disconnect_phase = True, phase
            return False
        return not watch.done()  # a pipelined byte was read: close rather than lose it

def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="citestream replay upstream (tests/e2e)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--extra-dir", action="append", default=[])
    ap.add_argument("--default", help="scenario for requests whose model is not replay:...")
    ap.add_argument("--closing", help="each | random:N | idle:SECONDS | mixed (keep-alive closing)")
    args = ap.parse_args(argv)
    server = ReplayServer(args.extra_dir, args.host, args.port, closing=args.closing)
    server.default = args.default

    async def serve() -> None:
        await server._start_async()
        print(f"replay listening on {server.host}:{server.port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()

"""Loopback search backend for the `http` search provider (docs/reference/config.md:
`POST {url} {"query","count"} -> [{"link","title","snippet"}]`).

Contract: `SearchBackend(results, delay=0).start()` answers every POST with
`results` (a list of `{"link","title","snippet"}` dicts) after `delay`
seconds, with HTTP status `status` (200; set it, or `results`, between
requests to make the backend fail or find nothing). While it waits it watches the connection: a client that goes away
is recorded (`Query.client_disconnected`). Every request is recorded as a
`Query` (path, headers, parsed JSON body); `wait_for(predicate)` waits on the
list. `close_under=True`: a connection's first request is answered and the
connection is closed when its next request arrives, unanswered
(`closed_under` counts them; the replay upstream's `closing="under"`).
Stdlib only; same lifecycle as the replay upstream.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass

from .replay import LoopbackServer, _cancel, _read_request


@dataclass
class Query:
    """One request the search backend received."""

    path: str
    headers: list[tuple[str, str]]
    body: object
    client_disconnected: bool = False
    answered: bool = False


class SearchBackend(LoopbackServer):
    """A slow-able `http`-provider search backend on loopback."""

    def __init__(self, results: list[dict], delay: float = 0.0, close_under: bool = False):
        super().__init__()
        self.results, self.delay, self.close_under = results, delay, close_under
        self.closed_under = 0
        self.status = 200
        self._queries: list[Query] = []
        self._cond = threading.Condition()

    def queries(self) -> list[Query]:
        with self._cond:
            return list(self._queries)

    def wait_for(self, predicate, timeout: float = 10.0) -> list[Query]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self._queries):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"search log never matched: {self._queries!r}"[:4000])
                self._cond.wait(min(left, 0.02))  # fields also change without a notify
            return list(self._queries)

    def _note(self, q: Query, **changes) -> None:
        with self._cond:
            for k, v in changes.items():
                setattr(q, k, v)
            self._cond.notify_all()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = 0
        try:
            while True:
                req = await _read_request(reader)
                if req is None:
                    return
                if self.close_under and answered > 0:
                    self.closed_under += 1
                    return  # closed under the request, unanswered
                try:
                    body = json.loads(req.body)
                except ValueError:
                    body = req.body
                q = Query(req.target, req.headers, body)
                self._note(q)
                with self._cond:
                    self._queries.append(q)
                    self._cond.notify_all()
                watch = asyncio.ensure_future(reader.read(1))
                await asyncio.wait({watch}, timeout=self.delay)
                if watch.done():
                    self._note(q, client_disconnected=True)
                    return
                await _cancel(watch)
                data = json.dumps(self.results).encode()
                writer.write(
                    b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                    % (self.status, len(data), data)
                )
                await writer.drain()
                answered += 1
                self._note(q, answered=True)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

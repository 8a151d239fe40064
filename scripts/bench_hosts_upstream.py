#!/usr/bin/env python3
"""The SSE upstream of `scripts/bench_hosts.py`: a small, fast loopback
model server in its own process (stdlib only, one `selectors` loop).

Usage: bench_hosts_upstream.py [--port N]   (prints `listening PORT`, serves until killed)

Contract
* `POST /_bench/job` with `{"events": N, "gap_us": G, "hold": false,
  "marker_every": M, "pair": false}` sets
  what every later stream gets (the job crosses any proxy unchanged because
  no proxy sees it); `POST /_bench/release` ends every held stream.
* Any other request (a chat completions call from a proxy, whatever its
  path and body) is answered `200`, `text/event-stream`, chunked, with N
  `chat.completion.chunk` events of exactly `EVENT_BYTES` bytes, each its
  own HTTP chunk, then a finish event and `data: [DONE]`. Each event's
  content starts with `ts-<16 digits>-`: `time.monotonic_ns()` when the
  event was written (CLOCK_MONOTONIC, the same clock in every process, so
  a client reads its latency from the bytes; a proxy that re-serializes
  events, like LiteLLM, keeps the content). Every `M`th event's text cites
  source `[1]` (`M = 1`, the default: every event; `0`: none); the others
  read `(1)` in its place, so every event has the same size.
* `gap_us = 0`: unpaced; all N events are queued at once and written as
  fast as the socket takes them (stamped with the queueing time plus the
  event's index in ns, so no two are alike). `gap_us > 0`: the first event at once,
  then one every G µs (each due one gap after the previous one was due, or
  at once when late: the rate holds without bursts). `hold`: the first
  event, then nothing until `/_bench/release` (RSS per open stream).
* `pair` (paced only): streams are served two by two, in the order they
  arrive: the first waits (its response head written) for the second, then
  each event goes to both at once, back to back (the order alternating
  from event to event), each copy stamped when it is written. A client
  reading one stream directly and one through a proxy gets each event's
  added latency as the difference of the two copies' latencies: a delay
  both copies share (the upstream late, the client descheduled) cancels.
* Keep-alive: after a response the connection waits for the next request.
  Request bodies with `content-length` or chunked are read and ignored.
* Loopback only; nothing is recorded; bounded by the job it is given.
"""

from __future__ import annotations

import argparse
import heapq
import json
import selectors
import socket
import time

EVENT_BYTES = 226
_HEAD = 'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench","choices":[{"index":0,"delta":{"content":"ts-'
_TAIL = '"},"finish_reason":null}]}\n\n'
_TEXT = "- Lisbon is sunny today [1]. "
_PLAIN = "- Lisbon is sunny today (1). "  # the same size, no marker
_PAD = EVENT_BYTES - len(_HEAD) - 16 - len(_TEXT) - len(_TAIL)
assert _PAD >= 0, _PAD
_FINISH = ('data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"bench",'
           '"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n').encode()
RESPONSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def event(ts_ns: int, marked: bool = True) -> bytes:
    """One event of exactly EVENT_BYTES bytes stamped with `ts_ns`; its text
    cites `[1]` when `marked`."""
    return f"{_HEAD}{ts_ns:016d}{_TEXT if marked else _PLAIN}{'x' * _PAD}{_TAIL}".encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


END = chunk(_FINISH) + b"0\r\n\r\n"


class Conn:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.inbuf = bytearray()
        self.out = bytearray()
        self.left = 0  # events still to write in the current response
        self.sent = 0  # events written in the current response
        self.gap_ns = 0
        self.due = 0  # when the event just written was due (ns)
        self.streaming = False
        self.held = False
        self.partner: Conn | None = None  # `pair`: the stream this one's events also go to


class Upstream:
    def __init__(self, port: int):
        self.sel = selectors.DefaultSelector()
        self.listener = socket.create_server(("127.0.0.1", port), backlog=1024)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.port = self.listener.getsockname()[1]
        self.job = {"events": 10, "gap_us": 0, "hold": False, "marker_every": 1, "pair": False}
        self.waiting: Conn | None = None  # `pair`: a stream waiting for its partner
        self.timers: list[tuple[int, int, Conn]] = []  # (time ns, tiebreak, conn)
        self.held: list[Conn] = []
        self.conns: set[Conn] = set()

    # -- writing ---------------------------------------------------------
    def send(self, c: Conn, data: bytes) -> None:
        if not c.out:
            try:
                n = c.sock.send(data)
            except BlockingIOError:
                n = 0
            except OSError:
                self.close(c)
                return
            data = data[n:]
            if not data:
                return
            self.sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        c.out += data

    def flush(self, c: Conn) -> None:
        try:
            n = c.sock.send(c.out)
        except BlockingIOError:
            return
        except OSError:
            self.close(c)
            return
        del c.out[:n]
        if not c.out:
            self.sel.modify(c.sock, selectors.EVENT_READ, c)

    def close(self, c: Conn) -> None:
        if c in self.conns:
            self.conns.discard(c)
            self.sel.unregister(c.sock)
            c.sock.close()
        c.streaming = False

    # -- one response ----------------------------------------------------
    def marked(self, i: int) -> bool:
        every = int(self.job["marker_every"])
        return every > 0 and i % every == 0

    def start_stream(self, c: Conn) -> None:
        job = self.job
        c.streaming, c.left, c.gap_ns = True, int(job["events"]), int(job["gap_us"]) * 1000
        c.sent = 0
        self.send(c, RESPONSE_HEAD)
        if c.gap_ns == 0 and not job["hold"]:
            # Each stamp distinct: LiteLLM ends a stream that repeats a chunk.
            ts = time.monotonic_ns()
            self.send(c, b"".join(chunk(event(ts + i, self.marked(i))) for i in range(c.left)) + END)
            c.left, c.streaming = 0, False
            return
        c.partner = None
        if job.get("pair") and not job["hold"]:
            w = self.waiting
            if w is None or not w.streaming or w not in self.conns:
                self.waiting = c  # its events start when its partner's request comes
                return
            self.waiting = None
            c.partner = w
        c.due = time.monotonic_ns()
        self.next_event(c)
        if job["hold"] and c.streaming:
            c.held = True
            self.held.append(c)

    def next_event(self, c: Conn) -> None:
        to = [c] if c.partner is None else [c, c.partner]
        if c.left > 0:
            for d in to[::-1] if c.sent % 2 else to:
                self.send(d, chunk(event(time.monotonic_ns(), self.marked(c.sent))))
            c.left -= 1
            c.sent += 1
        if c.left == 0:
            for d in to:
                self.send(d, END)
                d.streaming = False
        elif not self.job["hold"]:
            # Due one gap after the previous one was due (epoll waits in whole
            # milliseconds), never before now: the rate holds, no bursts.
            c.due = max(c.due + c.gap_ns, time.monotonic_ns())
            heapq.heappush(self.timers, (c.due, id(c), c))

    # -- reading requests ------------------------------------------------
    def on_read(self, c: Conn) -> None:
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close(c)
            return
        c.inbuf += data
        while not c.streaming and c in self.conns:
            req = take_request(c.inbuf)
            if req is None:
                return
            path, body = req
            if path.startswith("/_bench/"):
                self.control(c, path, body)
            else:
                self.start_stream(c)

    def control(self, c: Conn, path: str, body: bytes) -> None:
        if path == "/_bench/job":
            self.job = {"events": 10, "gap_us": 0, "hold": False, "marker_every": 1, "pair": False,
                        **json.loads(body)}
            self.waiting = None
        elif path == "/_bench/release":
            for h in self.held:
                if h.streaming:
                    h.left = 0
                    self.send(h, END)
                    h.streaming = h.held = False
            self.held = []
        self.send(c, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    def run(self) -> None:
        while True:
            timeout = None
            if self.timers:
                timeout = max(0.0, (self.timers[0][0] - time.monotonic_ns()) / 1e9)
            for key, mask in self.sel.select(timeout):
                if key.fileobj is self.listener:
                    self.accept()
                    continue
                c = key.data
                if mask & selectors.EVENT_WRITE and c in self.conns:
                    self.flush(c)
                if mask & selectors.EVENT_READ and c in self.conns:
                    self.on_read(c)
            now = time.monotonic_ns()
            while self.timers and self.timers[0][0] <= now:
                _, _, c = heapq.heappop(self.timers)
                if c.streaming and c in self.conns:
                    self.next_event(c)

    def accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = Conn(sock)
            self.conns.add(c)
            self.sel.register(sock, selectors.EVENT_READ, c)


def take_request(buf: bytearray) -> tuple[str, bytes] | None:
    """Removes one whole request from `buf`: (path, body), or None when incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buf[:end]).decode("latin-1").split("\r\n")
    path = head[0].split(" ")[1] if " " in head[0] else "/"
    fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
    pos = end + 4
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                return None
            size = int(bytes(buf[pos:nl]).split(b";")[0], 16)
            if size == 0:
                fin = buf.find(b"\r\n\r\n", nl)  # no trailers expected: "0\r\n\r\n"
                if fin < 0:
                    return None
                pos = fin + 4
                break
            if len(buf) < nl + 2 + size + 2:
                return None
            body += buf[nl + 2:nl + 2 + size]
            pos = nl + 2 + size + 2
    else:
        length = int(fields.get("content-length", "0"))
        if len(buf) < pos + length:
            return None
        body = buf[pos:pos + length]
        pos += length
    del buf[:pos]
    return path, bytes(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    up = Upstream(ap.parse_args().port)
    print(f"listening {up.port}", flush=True)
    up.run()


if __name__ == "__main__":
    main()

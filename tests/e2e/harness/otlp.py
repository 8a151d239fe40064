"""A loopback OpenTelemetry collector: an HTTP server taking OTLP/HTTP
protobuf trace exports (`POST /v1/traces`), decoded with the official
`opentelemetry-proto` package, the spans kept in arrival order.

`Collector.start()` binds a free loopback port; `endpoint` is the value for
`log.otlp_endpoint`; `wait_for(pred)` waits until the spans received satisfy
`pred`. Ids are given as lowercase hex (`hex(span.trace_id)`).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def hex_id(b: bytes) -> str:
    return b.hex()


def attr(span, key: str):
    """The value of `span`'s attribute `key` (str, int, float or bool), or None."""
    for kv in span.attributes:
        if kv.key == key:
            v = kv.value
            return getattr(v, v.WhichOneof("value"))
    return None


class Collector:
    def __init__(self) -> None:
        self.spans: list = []
        self.exports = 0
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                ok = self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf"
                if ok:
                    req = ExportTraceServiceRequest.FromString(body)
                    with collector._lock:
                        collector.exports += 1
                        for rs in req.resource_spans:
                            for ss in rs.scope_spans:
                                collector.spans.extend(ss.spans)
                self.send_response(200 if ok else 400)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @classmethod
    def start(cls) -> "Collector":
        c = cls()
        c._thread.start()
        return c

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def received(self) -> list:
        with self._lock:
            return list(self.spans)

    def wait_for(self, pred, timeout: float = 30.0) -> list:
        deadline = time.monotonic() + timeout
        while True:
            spans = self.received()
            if pred(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

"""Whole (non-streaming) response bodies derived from recorded SSE streams.

Contract: the recorded fixtures are streams; a host's non-streaming path
needs a `chat.completion` / `message` / `response` body. `chat_body(sse)` and
`messages_body(sse)` fold a stream into the body the same upstream would
have returned for `"stream": false`, the way the official SDKs accumulate
streams: content, reasoning, refusal and tool-call fragments concatenated
per choice / block, the last `finish_reason`, `usage`, `id`, `model`. Fields
the fold does not know are kept from the first chunk that carries them
(top level) or dropped (inside deltas). `responses_body(sse)` is the
`response` object of the stream's last `response.completed`,
`response.incomplete` or `response.failed` event (the Responses API repeats
the whole response there), serialized compactly; a stream without one has
no whole body (`ValueError`). The result is derived, not recorded:
the tests use it only as "some valid whole body", and compare the host's
output with `citestream rewrite` of the very same bytes. Pure functions, no
I/O, stdlib only.
"""

from __future__ import annotations

import json
import re

_CHUNK_ONLY = {"object", "choices", "obfuscation"}


def sse_data(sse: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) of each dispatched event (LF, CRLF and CR ends)."""
    text = sse.decode("utf-8", "replace").lstrip("\ufeff")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    out = []
    for block in re.split(r"\n\n", text):
        event, data = None, []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            elif field == "event":
                event = value
        if data:
            out.append((event, "\n".join(data)))
    return out


def _json_events(sse: bytes):
    for event, data in sse_data(sse):
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield event, obj


def _append(d: dict, key: str, piece) -> None:
    if isinstance(piece, str):
        d[key] = (d.get(key) or "") + piece


def _fold_tool_calls(calls: list, deltas: list) -> None:
    for pos, tc in enumerate(deltas):
        if not isinstance(tc, dict):
            continue
        idx = tc.get("index", pos)
        while len(calls) <= idx:
            calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call = calls[idx]
        if tc.get("id"):
            call["id"] = tc["id"]
        if tc.get("type"):
            call["type"] = tc["type"]
        fn = tc.get("function") or {}
        _append(call["function"], "name", fn.get("name"))
        _append(call["function"], "arguments", fn.get("arguments"))


def chat_body(sse: bytes) -> bytes:
    """A `chat.completion` body folded from a `chat.completion.chunk` stream."""
    top: dict = {}
    choices: dict[int, dict] = {}
    for _, chunk in _json_events(sse):
        for k, v in chunk.items():
            if k not in _CHUNK_ONLY and (k not in top or k == "usage" and v):
                top[k] = v
        for ch in chunk.get("choices") or []:
            if not isinstance(ch, dict):
                continue
            idx = ch.get("index", 0)
            acc = choices.setdefault(idx, {"message": {"role": "assistant", "content": None}})
            delta = ch.get("delta") or {}
            msg = acc["message"]
            if delta.get("role"):
                msg["role"] = delta["role"]
            for key in ("content", "reasoning_content", "refusal"):
                _append(msg, key, delta.get(key))
            if delta.get("tool_calls"):
                _fold_tool_calls(msg.setdefault("tool_calls", []), delta["tool_calls"])
            if ch.get("finish_reason"):
                acc["finish_reason"] = ch["finish_reason"]
    body = {"id": top.pop("id", "chatcmpl-replay"), "object": "chat.completion"}
    body["created"] = top.pop("created", 0)
    body["model"] = top.pop("model", "replay")
    body["choices"] = [
        {"index": i, "message": c["message"], "logprobs": None, "finish_reason": c.get("finish_reason")}
        for i, c in sorted(choices.items())
    ]
    body.update(top)
    return json.dumps(body, ensure_ascii=False).encode()


def messages_body(sse: bytes) -> bytes:
    """A `message` body folded from an Anthropic `/v1/messages` stream."""
    message: dict = {"type": "message", "role": "assistant", "content": []}
    blocks: dict[int, dict] = {}
    partial: dict[int, str] = {}
    for _, ev in _json_events(sse):
        kind = ev.get("type")
        if kind == "message_start" and isinstance(ev.get("message"), dict):
            message.update(ev["message"])
        elif kind == "content_block_start" and isinstance(ev.get("content_block"), dict):
            blocks[ev.get("index", len(blocks))] = dict(ev["content_block"])
        elif kind == "content_block_delta":
            block = blocks.setdefault(ev.get("index", 0), {"type": "text", "text": ""})
            delta = ev.get("delta") or {}
            dk = delta.get("type")
            if dk == "text_delta":
                _append(block, "text", delta.get("text"))
            elif dk == "thinking_delta":
                _append(block, "thinking", delta.get("thinking"))
            elif dk == "signature_delta":
                block["signature"] = delta.get("signature")
            elif dk == "input_json_delta":
                partial[ev.get("index", 0)] = partial.get(ev.get("index", 0), "") + (delta.get("partial_json") or "")
            elif dk == "citations_delta":
                block.setdefault("citations", []).append(delta.get("citation"))
        elif kind == "message_delta":
            for k, v in (ev.get("delta") or {}).items():
                message[k] = v
            if isinstance(ev.get("usage"), dict):
                message["usage"] = {**(message.get("usage") or {}), **ev["usage"]}
    for idx, text in partial.items():
        try:
            blocks[idx]["input"] = json.loads(text) if text else {}
        except (ValueError, KeyError):
            pass
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return json.dumps(message, ensure_ascii=False).encode()


def responses_body(sse: bytes) -> bytes:
    """The whole `/v1/responses` body of a Responses stream."""
    final = None
    for _, ev in _json_events(sse):
        if ev.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            final = ev["response"]
    if final is None:
        raise ValueError("the stream has no final response event")
    return json.dumps(final, ensure_ascii=False, separators=(",", ":")).encode()

"""What the official `anthropic` SDK sees on an upstream `/v1/messages`
response and on the same response after `citestream rewrite --endpoint
messages` (docs/reference/responses.md, "Messages")."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import anthropic

from chat_checks import added_members, expected_member
from sdkharness import ReplayServer, extras

MODEL = "claude-citestream-test"
MESSAGES = [{"role": "user", "content": "What is the weather in Lisbon this weekend?"}]


def client_for(server: ReplayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.origin, api_key="x", max_retries=0, timeout=30)


def _kwargs() -> dict:
    return {"model": MODEL, "max_tokens": 1024, "messages": MESSAGES, "extra_body": {"web_search": True}}


@dataclass
class Outcome:
    events: list = field(default_factory=list)
    exc: BaseException | None = None
    final: object | None = None


def _check_request(server: ReplayServer, stream: bool) -> None:
    path, body = server.last_request()
    assert path.endswith("/v1/messages"), path
    assert isinstance(body, dict) and body.get("web_search") is True and bool(body.get("stream")) == stream, body


def sdk_create_stream(server: ReplayServer, payload: bytes) -> Outcome:
    """`client.messages.create(stream=True)`, iterating every event."""
    server.serve(payload)
    out = Outcome()
    try:
        with client_for(server) as client:
            for event in client.messages.create(stream=True, **_kwargs()):
                out.events.append(event)
    except anthropic.AnthropicError as e:
        out.exc = e
    _check_request(server, True)
    return out


def sdk_helper_stream(server: ReplayServer, payload: bytes) -> Outcome:
    """The `client.messages.stream(...)` helper to `get_final_message()`."""
    server.serve(payload)
    out = Outcome()
    try:
        with client_for(server) as client, client.messages.stream(**_kwargs()) as s:
            for event in s:
                out.events.append(event)
            out.final = s.get_final_message()
    except anthropic.AnthropicError as e:
        out.exc = e
    _check_request(server, True)
    return out


def sdk_create(server: ReplayServer, payload: bytes, status: int = 200) -> Outcome:
    server.serve(payload, status)
    out = Outcome()
    try:
        with client_for(server) as client:
            out.final = client.messages.create(**_kwargs())
    except anthropic.AnthropicError as e:
        out.exc = e
    _check_request(server, False)
    return out


def same_exc(a: BaseException | None, b: BaseException | None, what: str) -> None:
    assert type(a) is type(b), f"{what}: upstream raised {type(a).__name__}: {a!r}, rewritten raised {type(b).__name__}: {b!r}"
    if a is not None:
        assert str(a) == str(b), f"{what}: exception messages differ: {a} != {b}"


def _dump(model: object) -> dict:
    return model.to_dict(mode="json")  # type: ignore[attr-defined]


def _without(d: dict, keys: tuple[str, ...]) -> dict:
    d = copy.deepcopy(d)
    for k in keys:
        d.pop(k, None)
    return d


def check_events(name: str, up: list, rw: list, sources: list[dict], dialect: str, *, helper: bool = False) -> int:
    """Event for event what upstream sent, except that `message_delta`
    carries our members. Returns how many events carry them."""
    keys = added_members(dialect)
    assert len(up) == len(rw), f"{name}: {len(up)} events upstream, {len(rw)} rewritten"
    carriers = 0
    for i, (u, r) in enumerate(zip(up, rw)):
        assert u.type == r.type, f"{name}: event {i} is {r.type}, upstream {u.type}"
        ours = {k: v for k, v in extras(r).items() if k in keys}
        if r.type == "message_delta":
            for key in keys:
                assert ours.get(key) == expected_member(key, sources), f"{name}: message_delta `{key}` wrong or missing: {ours.get(key)}"
                assert getattr(r, key) == expected_member(key, sources), f"{name}: attribute access to message_delta.{key}"
            carriers += 1
        else:
            assert not ours, f"{name}: event {i} ({r.type}) carries {sorted(ours)}"
        if "sources" not in keys:
            assert "sources" not in extras(r), f"{name}: `sources` with dialect {dialect}"
        if helper and hasattr(r, "snapshot"):
            # Helper events with a running snapshot: it never holds our members.
            assert not any(k in extras(r.snapshot) for k in keys if isinstance(r.snapshot, anthropic.BaseModel)), name
        assert _without(_dump(r), keys) == _without(_dump(u), keys), (
            f"{name}: event {i} ({r.type}) differs beyond our members:\n upstream:  {_dump(u)}\n rewritten: {_dump(r)}"
        )
    has_delta = any(u.type == "message_delta" for u in up)
    assert carriers == (1 if has_delta else 0), f"{name}: {carriers} events carry our members"
    return carriers

"""Assertions on what the official `openai` SDK sees when it reads an
upstream `/v1/chat/completions` response and the same response after
`citestream rewrite` (docs/reference/responses.md, "Markers", "Chat completions", "The citations array")."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

import openai
from openai.types.chat.chat_completion_message import Annotation

from sdkharness import ReplayServer, expected_citations_member, expected_sources_member, extras

MODEL = "citestream-test-model"
MESSAGES = [{"role": "user", "content": "What is the weather in Lisbon this weekend?"}]
MARKER = re.compile(r"\[([1-9][0-9]{0,3})\]")


def added_members(dialect: str) -> tuple[str, ...]:
    return {"sources": ("sources",), "citations": ("citations",), "both": ("sources", "citations")}[dialect]


def expected_member(key: str, sources: list[dict]) -> list[dict]:
    return expected_sources_member(sources) if key == "sources" else expected_citations_member(sources)


def to_unit(content: str, index: int, unit: str) -> int:
    """Convert a Python str index (Unicode scalar values) to `unit`."""
    head = content[:index]
    if unit == "chars":
        return index
    if unit == "utf16":
        return len(head.encode("utf-16-le", errors="surrogatepass")) // 2
    if unit == "bytes":
        return len(head.encode("utf-8", errors="surrogatepass"))
    raise ValueError(unit)


def slice_unit(content: str, start: int, end: int, unit: str) -> str:
    """`content[start:end]` with offsets in `unit`."""
    if unit == "chars":
        return content[start:end]
    if unit == "utf16":
        return content.encode("utf-16-le", errors="surrogatepass")[2 * start : 2 * end].decode(
            "utf-16-le", errors="surrogatepass"
        )
    return content.encode("utf-8", errors="surrogatepass")[start:end].decode("utf-8", errors="surrogatepass")


def reference_markers(content: str, nsources: int) -> list[tuple[int, int, int]] | None:
    """(start, end, number) of every marker, in chars, by a naive reading of
    the marker rules (docs/reference/responses.md, "Markers"). None when the content has code (backticks or tildes), where the
    naive reading is not the spec's."""
    if "`" in content or "~~~" in content:
        return None
    out = []
    for m in MARKER.finditer(content):
        if m.start() > 0 and content[m.start() - 1] == "\\":
            continue
        k = int(m.group(1))
        if 1 <= k <= nsources:
            out.append((m.start(), m.end(), k))
    return out


@dataclass
class StreamOutcome:
    chunks: list = field(default_factory=list)
    exc: BaseException | None = None


@dataclass
class HelperOutcome:
    final: object | None = None
    exc: BaseException | None = None
    events: int = 0


def client_for(server: ReplayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.origin + "/v1", api_key="x", max_retries=0, timeout=30)


def _request_kwargs(n: int) -> dict:
    kw: dict = {"model": MODEL, "messages": MESSAGES, "extra_body": {"web_search": True}}
    if n > 1:
        kw["n"] = n
    return kw


def sdk_create_stream(server: ReplayServer, payload: bytes, n: int = 1) -> StreamOutcome:
    """`client.chat.completions.create(stream=True)`, iterating every chunk."""
    server.serve(payload)
    out = StreamOutcome()
    try:
        with client_for(server) as client:
            for chunk in client.chat.completions.create(stream=True, **_request_kwargs(n)):
                out.chunks.append(chunk)
    except openai.OpenAIError as e:
        out.exc = e
    path, body = server.last_request()
    assert path.endswith("/v1/chat/completions"), path
    assert isinstance(body, dict) and body.get("stream") is True and body.get("web_search") is True, body
    return out


def sdk_helper_stream(server: ReplayServer, payload: bytes, n: int = 1) -> HelperOutcome:
    """The `client.chat.completions.stream(...)` helper to its final completion."""
    server.serve(payload)
    out = HelperOutcome()
    try:
        with client_for(server) as client:
            stream_fn = getattr(client.chat.completions, "stream", None) or client.beta.chat.completions.stream
            with stream_fn(**_request_kwargs(n)) as s:
                for _event in s:
                    out.events += 1
                out.final = s.get_final_completion()
    except (openai.OpenAIError, RuntimeError, TypeError, KeyError, ValueError) as e:
        out.exc = e
    return out


def dump(model: object) -> dict:
    return model.to_dict(mode="json")  # type: ignore[attr-defined]


def is_ours_annotations(chunk: object) -> bool:
    """A chunk of the synthesized shape: one choice whose delta has only
    `annotations` and whose finish_reason is null."""
    choices = chunk.choices  # type: ignore[attr-defined]
    if len(choices) != 1 or choices[0].finish_reason is not None:
        return False
    return set(choices[0].delta.model_dump(exclude_none=True)) == {"annotations"}


def _same_exc(a: BaseException | None, b: BaseException | None, what: str) -> None:
    assert type(a) is type(b), f"{what}: upstream raised {type(a).__name__}: {a!r}, rewritten raised {type(b).__name__}: {b!r}"
    if a is not None:
        assert str(a) == str(b), f"{what}: exception messages differ: {a} != {b}"


def _finish_positions(chunks: list) -> list[tuple[int, int]]:
    """(chunk position, choice index) of each choice's first finish_reason."""
    seen: set[int] = set()
    out = []
    for pos, chunk in enumerate(chunks):
        for ch in chunk.choices:
            if ch.finish_reason is not None and ch.index not in seen:
                seen.add(ch.index)
                out.append((pos, ch.index))
    return out


def contents(chunks: list) -> dict[int, str]:
    out: dict[int, str] = {}
    for chunk in chunks:
        for ch in chunk.choices:
            out.setdefault(ch.index, "")
            if ch.delta is not None and ch.delta.content:
                out[ch.index] += ch.delta.content
    return out


def _merge_split(a: dict, b: dict) -> dict | None:
    """If `a`, `b` are the two halves of a split finish chunk (docs/reference/responses.md, "Chat completions"), the
    chunk they came from: `b` with `a`'s delta."""
    if len(a.get("choices") or []) != 1 or len(b.get("choices") or []) != 1:
        return None
    ca, cb = a["choices"][0], b["choices"][0]
    if ca.get("index") != cb.get("index") or ca.get("finish_reason") is not None or not cb.get("finish_reason"):
        return None
    if cb.get("delta") not in ({}, None):
        return None
    merged = copy.deepcopy(b)
    merged["choices"][0]["delta"] = copy.deepcopy(ca.get("delta"))
    return merged


def check_chat_stream(
    name: str,
    up: StreamOutcome,
    rw: StreamOutcome,
    sources: list[dict],
    *,
    dialect: str = "sources",
    unit: str = "chars",
    n: int = 1,
    must_annotate: bool = False,
) -> list[list[dict]]:
    """Everything the SDK saw on the rewritten stream is what it saw upstream
    plus our additions, placed as the rules say (docs/reference/responses.md, "Chat completions"). Returns, per choice index, the
    annotations we added (as dicts)."""
    _same_exc(up.exc, rw.exc, f"{name}: create(stream=True)")
    keys = added_members(dialect)
    chunks = rw.chunks

    # 1. Top-level members: exactly one carrier, where the rules put it (docs/reference/responses.md, "Chat completions").
    finishes = _finish_positions(chunks)
    carriers = {
        key: [i for i, c in enumerate(chunks) if extras(c).get(key) == expected_member(key, sources)] for key in keys
    }
    if len({ch.index for c in up.chunks for ch in c.choices if ch.finish_reason is not None}) >= n:
        want = finishes[n - 1][0]
    elif finishes:
        want = None  # a synthesized `choices: []` chunk after the last finish
    else:
        want = -1
    for key, where in carriers.items():
        if want == -1:
            assert where == [], f"{name}: no finish_reason, yet `{key}` on chunks {where}"
            continue
        assert len(where) == 1, f"{name}: expected exactly one chunk with our `{key}`, found {len(where)} ({where})"
        carrier = chunks[where[0]]
        assert getattr(carrier, key) == expected_member(key, sources), f"{name}: attribute access to `{key}`"
        if want is None:
            assert carrier.choices == [] and where[0] > finishes[-1][0], f"{name}: `{key}` should be on a choices:[] chunk"
        else:
            assert where[0] == want, f"{name}: `{key}` on chunk {where[0]}, expected the finish chunk {want}"
    if "sources" not in keys:
        assert not any("sources" in extras(c) for c in chunks), f"{name}: `sources` present with dialect {dialect}"

    # 2. Annotation chunks: one per choice with markers, right before its finish.
    ours = [i for i, c in enumerate(chunks) if is_ours_annotations(c)]
    texts = contents(chunks)
    added: dict[int, list[dict]] = {}
    for pos in ours:
        chunk = chunks[pos]
        idx = chunk.choices[0].index
        assert idx not in added, f"{name}: two annotation chunks for choice {idx}"
        delta = chunk.choices[0].delta
        anns = extras(delta)["annotations"]
        assert delta.annotations == anns, f"{name}: attribute access to delta.annotations"
        added[idx] = anns
        assert pos + 1 < len(chunks), f"{name}: annotation chunk is the last chunk"
        nxt = chunks[pos + 1]
        assert any(ch.index == idx and ch.finish_reason is not None for ch in nxt.choices), (
            f"{name}: annotation chunk for choice {idx} is not immediately before its finish chunk"
        )
        for attr in ("id", "object", "created", "model", "system_fingerprint"):
            assert getattr(chunk, attr) == getattr(nxt, attr), f"{name}: annotation chunk `{attr}` differs"
        content = texts.get(idx, "")
        prev_end = -1
        for a in anns:
            assert set(a) == {"type", "url_citation"} and a["type"] == "url_citation", f"{name}: bad annotation {a}"
            uc = a["url_citation"]
            assert set(uc) == {"start_index", "end_index", "url", "title"}, f"{name}: bad url_citation {uc}"
            s, e = uc["start_index"], uc["end_index"]
            text = slice_unit(content, s, e, unit)
            m = re.fullmatch(r"\[([1-9][0-9]{0,3})\]", text)
            assert m, f"{name}: annotation {s}-{e} ({unit}) covers {text!r}, not a marker"
            k = int(m.group(1))
            assert 1 <= k <= len(sources), f"{name}: annotation for out-of-range marker {text}"
            assert uc["url"] == sources[k - 1].get("url") and uc["title"] == sources[k - 1].get("title"), (
                f"{name}: annotation {text} points to {uc['url']}"
            )
            assert s >= prev_end, f"{name}: annotations out of content order"
            prev_end = e
    for idx, content in texts.items():
        if not any(ch.index == idx and ch.finish_reason is not None for c in chunks for ch in c.choices):
            assert idx not in added, f"{name}: annotations for choice {idx}, which never finished"
            continue
        ref = reference_markers(content, len(sources))
        if "sources" not in keys:
            assert idx not in added, f"{name}: annotations with dialect {dialect}"
            continue
        if ref is not None:
            want_anns = [
                {
                    "type": "url_citation",
                    "url_citation": {
                        "start_index": to_unit(content, s, unit),
                        "end_index": to_unit(content, e, unit),
                        "url": sources[k - 1].get("url"),
                        "title": sources[k - 1].get("title"),
                    },
                }
                for s, e, k in ref
            ]
            assert added.get(idx, []) == want_anns, (
                f"{name}: choice {idx} annotations {added.get(idx)} != expected {want_anns}"
            )
    if must_annotate:
        assert added, f"{name}: the content has markers but the SDK saw no delta.annotations"

    # 3. Everything else is exactly what upstream sent.
    rest = []
    carrier_pos = {where[0] for where in carriers.values() if where}
    for i, c in enumerate(chunks):
        if i in ours:
            continue
        d = dump(c)
        if i in carrier_pos:
            for key in keys:
                d.pop(key, None)
            d["__carrier__"] = True
        rest.append(d)
    ups = [dump(c) for c in up.chunks]
    i = j = 0
    while i < len(ups) or j < len(rest):
        if j < len(rest) and rest[j].get("__carrier__") and rest[j].get("choices") == [] and (
            i >= len(ups) or ups[i].get("choices") != [] or {k: v for k, v in rest[j].items() if k != "__carrier__"} != ups[i]
        ):
            j += 1  # synthesized choices:[] carrier
            continue
        assert i < len(ups) and j < len(rest), (
            f"{name}: chunk counts differ: upstream {len(ups)} vs rewritten {len(rest)} (minus ours) at {i}/{j}"
        )
        u = ups[i]
        r = dict(rest[j])
        if r.pop("__carrier__", False):
            u = {k: v for k, v in u.items() if k not in keys}
        if r == u:
            i, j = i + 1, j + 1
            continue
        if j + 1 < len(rest):
            nxt = dict(rest[j + 1])
            if nxt.pop("__carrier__", False):
                u = {k: v for k, v in u.items() if k not in keys}
            merged = _merge_split(r, nxt)
            if merged is not None and merged == u:
                i, j = i + 1, j + 2
                continue
        raise AssertionError(f"{name}: chunk {i} differs:\n upstream:  {ups[i]}\n rewritten: {rest[j]}")
    return [added.get(i, []) for i in sorted(texts)] if texts else []


def _strip_final(d: dict, keys: tuple[str, ...]) -> dict:
    d = copy.deepcopy(d)
    for key in keys:
        d.pop(key, None)
    for ch in d.get("choices") or []:
        (ch.get("message") or {}).pop("annotations", None)
    return d


def check_chat_helper(
    name: str,
    up: HelperOutcome,
    rw: HelperOutcome,
    rw_stream: StreamOutcome,
    added: list[list[dict]],
    *,
    dialect: str = "sources",
) -> None:
    """The stream helper behaves as on the upstream stream; its final content
    is the concatenated deltas and its message.annotations are upstream's
    plus ours, parsed into typed objects."""
    _same_exc(up.exc, rw.exc, f"{name}: chat.completions.stream()")
    final_up = up.final if up.exc is None else getattr(up.exc, "completion", None)
    final_rw = rw.final if rw.exc is None else getattr(rw.exc, "completion", None)
    if final_rw is None:
        assert final_up is None, f"{name}: helper gave no final completion on the rewritten stream"
        return
    texts = contents(rw_stream.chunks)
    keys = added_members(dialect)
    # The helper drops every chunk whose `object` is not
    # "chat.completion.chunk" (its Azure async-filter workaround). Our
    # annotation chunk copies the finish chunk's envelope (docs/reference/responses.md, "Chat completions"), so where
    # upstream's finish chunk has another `object` (Perplexity's
    # "chat.completion.done") the helper never sees our annotations.
    hidden = {
        c.choices[0].index for c in rw_stream.chunks if is_ours_annotations(c) and c.object != "chat.completion.chunk"
    }
    if hidden:
        print(f"NOTE {name}: annotation chunk has object != chat.completion.chunk; the stream helper ignores it", flush=True)
    for ch in final_rw.choices:
        want = texts.get(ch.index, "")
        assert (ch.message.content or "") == want, (
            f"{name}: helper final content of choice {ch.index} != concatenated deltas"
        )
        ours = added[ch.index] if ch.index < len(added) and ch.index not in hidden else []
        up_msg = next(c.message for c in final_up.choices if c.index == ch.index)
        up_anns = [a.to_dict(mode="json") for a in (up_msg.annotations or [])]
        rw_anns = ch.message.annotations or []
        for a in rw_anns:
            assert isinstance(a, Annotation), f"{name}: helper annotation not typed: {type(a)}"
        got = [a.to_dict(mode="json") for a in rw_anns]
        assert got == up_anns + ours, f"{name}: helper message.annotations {got} != upstream {up_anns} + ours {ours}"
        for a, raw in zip(rw_anns[len(up_anns) :], ours):
            assert a.type == "url_citation"
            assert a.url_citation.start_index == raw["url_citation"]["start_index"]
            assert a.url_citation.end_index == raw["url_citation"]["end_index"]
    assert _strip_final(dump(final_rw), keys) == _strip_final(dump(final_up), keys), (
        f"{name}: helper final completion differs beyond our members"
    )

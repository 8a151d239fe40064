"""The official `openai` SDK reads rewritten non-streamed `chat.completion`
bodies: `message.annotations` parses into typed url_citation objects with the
right offsets, top-level `sources` / `citations` land in `model_extra`, and
everything else is what the SDK reads from the upstream body."""

from __future__ import annotations

import copy
import json
import sys
import unittest

from openai.types.chat.chat_completion_message import Annotation

import chat_checks as cc
from sdkharness import FIXTURES, LISBON, THREE_SOURCES, ReplayServer, extras, load_sources, print_versions, rewrite, sources_file


def sdk_create(server: ReplayServer, payload: bytes):
    server.serve(payload)
    with cc.client_for(server) as client:
        completion = client.chat.completions.create(model=cc.MODEL, messages=cc.MESSAGES, extra_body={"web_search": True})
    path, body = server.last_request()
    assert path.endswith("/v1/chat/completions") and body.get("web_search") is True and not body.get("stream"), body
    return completion


def body_from_chunks(chunks: list) -> bytes:
    """A `chat.completion` body holding what a stream said."""
    first = next((c for c in chunks if c.id), chunks[0])
    texts = cc.contents(chunks)
    finish: dict[int, str | None] = {}
    for c in chunks:
        for ch in c.choices:
            if ch.finish_reason and ch.index not in finish:
                finish[ch.index] = ch.finish_reason
    usage = next((c.usage for c in reversed(chunks) if c.usage is not None), None)
    body = {
        "id": first.id,
        "object": "chat.completion",
        "created": first.created,
        "model": first.model,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": texts[i], "refusal": None},
                "logprobs": None,
                "finish_reason": finish.get(i, "stop"),
            }
            for i in sorted(texts)
        ],
        "usage": usage.to_dict(mode="json") if usage is not None else None,
        "x_upstream_extra": {"kept": [1, 2, 3]},
    }
    return json.dumps(body, ensure_ascii=False, indent=1).encode()


def strip_ours(d: dict, keys: tuple[str, ...]) -> dict:
    d = copy.deepcopy(d)
    for k in keys:
        d.pop(k, None)
    for ch in d.get("choices") or []:
        ch["message"].pop("annotations", None)
    return d


def check_body(name: str, upstream: bytes, rewritten: bytes, sources: list[dict], server: ReplayServer, *, dialect="sources", unit="chars"):
    keys = cc.added_members(dialect)
    up = sdk_create(server, upstream)
    rw = sdk_create(server, rewritten)
    for key in keys:
        assert extras(rw).get(key) == cc.expected_member(key, sources), f"{name}: top-level `{key}` wrong or missing"
        assert getattr(rw, key) == cc.expected_member(key, sources), f"{name}: attribute access to `{key}`"
    if "sources" not in keys:
        assert "sources" not in extras(rw), f"{name}: `sources` with dialect {dialect}"
    added: list[list] = []
    for ch, up_ch in zip(rw.choices, up.choices, strict=True):
        anns = ch.message.annotations
        up_anns = up_ch.message.annotations or []
        if "sources" not in keys:
            assert anns == up_ch.message.annotations, f"{name}: annotations changed with dialect {dialect}"
            added.append([])
            continue
        assert isinstance(anns, list), f"{name}: message.annotations missing (docs/reference/responses.md, 'Chat completions': an empty array when none)"
        ours = anns[len(up_anns):]
        content = ch.message.content or ""
        for a in anns:
            assert isinstance(a, Annotation), f"{name}: annotation not parsed into the SDK type: {type(a)}"
        for a in ours:
            assert a.type == "url_citation"
            text = cc.slice_unit(content, a.url_citation.start_index, a.url_citation.end_index, unit)
            assert text.startswith("[") and text.endswith("]"), f"{name}: annotation covers {text!r}"
            k = int(text[1:-1])
            assert a.url_citation.url == sources[k - 1]["url"] and a.url_citation.title == sources[k - 1]["title"], f"{name}: {a}"
        ref = cc.reference_markers(content, len(sources))
        if ref is not None:
            got = [(a.url_citation.start_index, a.url_citation.end_index) for a in ours]
            want = [(cc.to_unit(content, s, unit), cc.to_unit(content, e, unit)) for s, e, _ in ref]
            assert got == want, f"{name}: choice {ch.index} annotations {got} != {want}"
        added.append(ours)
    assert strip_ours(rw.to_dict(mode="json"), keys) == strip_ours(up.to_dict(mode="json"), keys), (
        f"{name}: the body differs beyond our members"
    )
    return rw, added


class OpenAIBodies(unittest.TestCase):
    server: ReplayServer

    @classmethod
    def setUpClass(cls) -> None:
        print_versions()
        cls.server = ReplayServer()
        cls.three = sources_file(THREE_SOURCES)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.close()

    def lisbon(self, dialect: str, unit: str):
        upstream = (LISBON / "upstream.json").read_bytes()
        args = {"dialect": None if dialect == "sources" else dialect, "offsets": None if unit == "chars" else unit}
        rewritten = rewrite(upstream, LISBON / "sources.json", **args)
        return check_body(f"lisbon body {dialect} {unit}", upstream, rewritten, load_sources(LISBON / "sources.json"), self.server, dialect=dialect, unit=unit)

    def test_lisbon_body(self) -> None:
        rw, _ = self.lisbon("sources", "chars")
        msg = rw.choices[0].message
        self.assertEqual([(a.type, a.url_citation.start_index, a.url_citation.end_index) for a in msg.annotations],
                         [("url_citation", 66, 69), ("url_citation", 137, 140)])
        self.assertEqual(msg.content[66:69], "[1]")
        self.assertEqual(msg.content[137:140], "[2]")
        self.assertEqual(msg.annotations[1].url_citation.url, "https://forecast.example/pt/lisbon/sunday")
        self.assertEqual([s["index"] for s in rw.model_extra["sources"]], [1, 2, 3])
        self.assertEqual(msg.model_extra, {"reasoning_content": None}, "unknown message members are kept")

    def test_lisbon_body_dialects_and_units(self) -> None:
        for dialect in ("both", "citations"):
            for unit in ("chars", "utf16", "bytes"):
                with self.subTest(dialect=dialect, unit=unit):
                    rw, added = self.lisbon(dialect, unit)
                    if dialect == "both":
                        shift = 1 if unit == "bytes" else 0  # "°" is 2 bytes
                        self.assertEqual([(a.url_citation.start_index, a.url_citation.end_index) for a in added[0]],
                                         [(66 + shift, 69 + shift), (137 + shift, 140 + shift)])
                        self.assertEqual(rw.citations[0]["source_url"], "https://weather.example/lisbon/weekend")
                    else:
                        self.assertIsNone(rw.choices[0].message.annotations)
        for unit in ("utf16", "bytes"):
            with self.subTest(dialect="sources", unit=unit):
                self.lisbon("sources", unit)

    def test_bodies_from_every_chat_fixture(self) -> None:
        """Each chat fixture's content as a whole body (the stream's text,
        markers included), rewritten with the 3-entry sources file."""
        sources = load_sources(self.three)
        count = 0
        for path in sorted(FIXTURES.glob("*.sse")):
            if path.name.startswith("anthropic_"):
                continue
            with self.subTest(fixture=path.name):
                chunks = cc.sdk_create_stream(self.server, path.read_bytes()).chunks
                if not any(ch.delta and ch.delta.content for c in chunks for ch in c.choices):
                    continue
                upstream = body_from_chunks(chunks)
                rw, added = check_body(f"{path.name} as body", upstream, rewrite(upstream, self.three), sources, self.server)
                count += 1
                if path.name == "perplexity_sonar_citations.sse":
                    self.assertEqual([len(a) for a in added], [2])
        self.assertGreater(count, 10)

    def test_checks_catch_broken_bodies(self) -> None:
        upstream = (LISBON / "upstream.json").read_bytes()
        good = rewrite(upstream, LISBON / "sources.json")
        sources = load_sources(LISBON / "sources.json")
        mutants = {
            "sources removed": good[: good.rindex(b',"sources":')] + b"}",
            "offset shifted": good.replace(b'"start_index":137', b'"start_index":136'),
            "annotations removed": good.replace(b'"annotations":[', b'"x_annotations":['),
        }
        for what, bad in mutants.items():
            with self.subTest(mutant=what):
                self.assertNotEqual(bad, good)
                with self.assertRaises(AssertionError, msg=f"checks accepted a body with {what}"):
                    check_body(f"lisbon ({what})", upstream, bad, sources, self.server)


if __name__ == "__main__":
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)

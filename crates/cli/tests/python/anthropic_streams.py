"""The official `anthropic` SDK reads rewritten `/v1/messages` streams.

For every `anthropic_*` fixture rewritten with `--endpoint messages` and a
3-entry sources file: `messages.create(stream=True)` iterates every event and
sees `sources` on `message_delta` only; the `messages.stream()` helper's
`get_final_message()` equals the one from the upstream stream; error events
raise the same exception as upstream.
"""

from __future__ import annotations

import json
import sys
import unittest

import anthropic

import anthropic_checks as ac
from sdkharness import FIXTURES, THREE_SOURCES, ReplayServer, extras, load_sources, print_versions, rewrite, sources_file


def anthropic_fixtures() -> list:
    return sorted(FIXTURES.glob("anthropic_*.sse"))


class AnthropicStreams(unittest.TestCase):
    server: ReplayServer

    @classmethod
    def setUpClass(cls) -> None:
        print_versions()
        cls.server = ReplayServer()
        cls.three = sources_file(THREE_SOURCES)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.close()

    def run_case(self, name: str, upstream: bytes, rewritten: bytes, dialect: str = "sources"):
        sources = load_sources(self.three)
        up = ac.sdk_create_stream(self.server, upstream)
        rw = ac.sdk_create_stream(self.server, rewritten)
        ac.same_exc(up.exc, rw.exc, f"{name}: messages.create(stream=True)")
        carriers = ac.check_events(name, up.events, rw.events, sources, dialect)

        hup = ac.sdk_helper_stream(self.server, upstream)
        hrw = ac.sdk_helper_stream(self.server, rewritten)
        ac.same_exc(hup.exc, hrw.exc, f"{name}: messages.stream()")
        ac.check_events(f"{name} (helper)", hup.events, hrw.events, sources, dialect, helper=True)
        if hup.final is not None or hrw.final is not None:
            self.assertIsNotNone(hrw.final, f"{name}: helper gave no final message")
            fu, fr = hup.final.to_dict(mode="json"), hrw.final.to_dict(mode="json")
            # Our members live on message_delta only, which the final
            # message does not accumulate: compared whole, nothing removed.
            self.assertEqual(fr, fu, f"{name}: get_final_message() differs from upstream's")
            self.assertNotIn("sources", extras(hrw.final))
        return up, rw, hrw, carriers

    def test_every_anthropic_fixture(self) -> None:
        fixtures = anthropic_fixtures()
        self.assertGreaterEqual(len(fixtures), 8, "anthropic fixtures missing")
        for path in fixtures:
            with self.subTest(fixture=path.name):
                upstream = path.read_bytes()
                rewritten = rewrite(upstream, self.three, endpoint="messages")
                up, rw, hrw, carriers = self.run_case(path.name, upstream, rewritten)
                print(f"ok {path.name}: {len(rw.events)} events, message_delta with sources: {carriers}, "
                      f"exception {type(rw.exc).__name__ if rw.exc else None}, "
                      f"final {'same' if hrw.final is not None else type(hrw.exc).__name__}", flush=True)

    def test_every_anthropic_fixture_dialect_both_chunk_size_1(self) -> None:
        for path in anthropic_fixtures():
            with self.subTest(fixture=path.name):
                upstream = path.read_bytes()
                rewritten = rewrite(upstream, self.three, endpoint="messages", dialect="both", chunk_size=1)
                self.assertEqual(rewritten, rewrite(upstream, self.three, endpoint="messages", dialect="both"),
                                 f"{path.name}: --chunk-size 1 changes the output")
                self.run_case(f"{path.name} --dialect both", upstream, rewritten, "both")

    def test_error_event_raises_same_exception(self) -> None:
        path = FIXTURES / "anthropic_event_error_overloaded.sse"
        upstream = path.read_bytes()
        rewritten = rewrite(upstream, self.three, endpoint="messages")
        self.assertEqual(rewritten, upstream, "a stream without message_delta gets no additions")
        up, rw, hrw, carriers = self.run_case(path.name, upstream, rewritten)
        self.assertIsInstance(rw.exc, anthropic.APIStatusError)
        self.assertIn("Overloaded", str(rw.exc))
        self.assertEqual(carriers, 0)
        self.assertIsInstance(hrw.exc, type(rw.exc))

    def test_dialects(self) -> None:
        for fixture in ("anthropic_basic_ping.sse", "anthropic_web_search_citations_delta.sse"):
            for dialect in ("both", "citations"):
                with self.subTest(fixture=fixture, dialect=dialect):
                    upstream = (FIXTURES / fixture).read_bytes()
                    rewritten = rewrite(upstream, self.three, endpoint="messages", dialect=dialect)
                    _, rw, _, carriers = self.run_case(f"{fixture} --dialect {dialect}", upstream, rewritten, dialect)
                    self.assertEqual(carriers, 1)
                    delta = next(e for e in rw.events if e.type == "message_delta")
                    self.assertEqual(delta.citations[0]["document_author"], "Ann Author")
                    self.assertEqual(delta.citations[2]["cited_text"], "")

    def test_async_client(self) -> None:
        """`anthropic.AsyncAnthropic` sees the same events and final message."""
        import asyncio

        upstream = (FIXTURES / "anthropic_web_search_citations_delta.sse").read_bytes()
        rewritten = rewrite(upstream, self.three, endpoint="messages")

        async def main(payload: bytes):
            self.server.serve(payload)
            async with anthropic.AsyncAnthropic(base_url=self.server.origin, api_key="x", max_retries=0) as client:
                kw = {"model": ac.MODEL, "max_tokens": 1024, "messages": ac.MESSAGES}
                events = [e async for e in await client.messages.create(stream=True, **kw)]
                async with client.messages.stream(**kw) as s:
                    final = await s.get_final_message()
            return events, final

        up_events, up_final = asyncio.run(main(upstream))
        rw_events, rw_final = asyncio.run(main(rewritten))
        ac.check_events("async", up_events, rw_events, load_sources(self.three), "sources")
        self.assertEqual(rw_final.to_dict(), up_final.to_dict())
        delta = next(e for e in rw_events if e.type == "message_delta")
        self.assertEqual([s["url"] for s in delta.sources], [s["url"] for s in THREE_SOURCES])

    def test_checks_catch_broken_rewrites(self) -> None:
        upstream = (FIXTURES / "anthropic_basic_ping.sse").read_bytes()
        good = rewrite(upstream, self.three, endpoint="messages")
        self.run_case("basic (intact)", upstream, good)
        member = b',"sources":' + json.dumps(ac.expected_member("sources", load_sources(self.three)), separators=(",", ":")).encode()
        self.assertIn(member, good)
        mutants = {
            "sources removed": good.replace(member, b""),
            # (not message_stop: this fixture's last event has no blank line
            # after it, so no SSE client dispatches it)
            "sources on content_block_stop too": good.replace(b'{"type":"content_block_stop","index":0', b'{"type":"content_block_stop","index":0' + member),
            "event line dropped": good.replace(b"event: message_delta\n", b""),
            "text altered": good.replace(b'"text":" there"', b'"text":" where"'),
        }
        for what, bad in mutants.items():
            with self.subTest(mutant=what):
                self.assertNotEqual(bad, good, what)
                with self.assertRaises(AssertionError, msg=f"checks accepted a stream with {what}"):
                    self.run_case(f"basic ({what})", upstream, bad)


if __name__ == "__main__":
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)

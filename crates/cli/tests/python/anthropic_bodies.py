"""The official `anthropic` SDK reads rewritten non-streamed `/v1/messages`
bodies: top-level `sources` / `citations` in `model_extra`, the answer still a
`text` content block, everything else as upstream; error bodies untouched."""

from __future__ import annotations

import json
import sys
import unittest

import anthropic

import anthropic_checks as ac
from chat_checks import added_members, expected_member
from sdkharness import FIXTURES, THREE_SOURCES, ReplayServer, extras, load_sources, print_versions, rewrite, sources_file

LISBON_MESSAGE = {
    "id": "msg_01LisbonWeekendForecast",
    "type": "message",
    "role": "assistant",
    "model": "claude-citestream-test",
    "content": [
        {
            "type": "text",
            "text": "Saturday in Lisbon is forecast to be sunny with a high near 24 \u00b0C [1]. "
            "Sunday turns cloudy, with a chance of light rain in the afternoon [2].",
        }
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 2874, "output_tokens": 41},
    "x_unknown_member": {"kept": True},
}


class AnthropicBodies(unittest.TestCase):
    server: ReplayServer

    @classmethod
    def setUpClass(cls) -> None:
        print_versions()
        cls.server = ReplayServer()
        cls.three = sources_file(THREE_SOURCES)
        cls.sources = load_sources(cls.three)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.close()

    def check_body(self, name: str, upstream: bytes, dialect: str = "sources"):
        keys = added_members(dialect)
        rewritten = rewrite(upstream, self.three, endpoint="messages", dialect=None if dialect == "sources" else dialect)
        # Every upstream member keeps its value and its position; ours follow.
        up_json, rw_json = json.loads(upstream), json.loads(rewritten)
        self.assertEqual([k for k in rw_json if k not in keys], list(up_json), f"{name}: member order changed")
        self.assertEqual({k: v for k, v in rw_json.items() if k not in keys}, up_json, f"{name}: values changed")
        up = ac.sdk_create(self.server, upstream)
        rw = ac.sdk_create(self.server, rewritten)
        ac.same_exc(up.exc, rw.exc, f"{name}: messages.create()")
        self.assertIsNone(rw.exc, f"{name}: {rw.exc!r}")
        self.assertIsInstance(rw.final, anthropic.types.Message)
        for key in keys:
            self.assertEqual(extras(rw.final).get(key), expected_member(key, self.sources), f"{name}: `{key}`")
            self.assertEqual(getattr(rw.final, key), expected_member(key, self.sources))
        if "sources" not in keys:
            self.assertNotIn("sources", extras(rw.final))
        fr = {k: v for k, v in rw.final.to_dict(mode="json").items() if k not in keys}
        self.assertEqual(fr, up.final.to_dict(mode="json"), f"{name}: message differs beyond our members")
        self.assertEqual([b.type for b in rw.final.content], [b.type for b in up.final.content])
        self.assertNotIn("annotations", json.dumps(rw_json), "no annotations on /v1/messages")
        return rw.final

    def test_lisbon_message_body(self) -> None:
        upstream = json.dumps(LISBON_MESSAGE, indent=2, ensure_ascii=False).encode()
        for dialect in ("sources", "citations", "both"):
            with self.subTest(dialect=dialect):
                msg = self.check_body(f"lisbon message --dialect {dialect}", upstream, dialect)
                self.assertEqual(msg.content[0].type, "text")
                self.assertEqual(msg.content[0].text, LISBON_MESSAGE["content"][0]["text"])
                self.assertEqual(msg.model_extra.get("x_unknown_member"), {"kept": True})

    def test_final_messages_of_every_fixture_as_bodies(self) -> None:
        """Each anthropic fixture's final message (from the SDK's stream
        helper on the upstream stream), served as a whole body."""
        count = 0
        for path in sorted(FIXTURES.glob("anthropic_*.sse")):
            with self.subTest(fixture=path.name):
                helper = ac.sdk_helper_stream(self.server, path.read_bytes())
                if helper.final is None:
                    continue
                body = json.dumps(helper.final.to_dict(mode="json"), ensure_ascii=False).encode()
                self.check_body(f"{path.name} final message", body)
                count += 1
        self.assertGreaterEqual(count, 7)

    def test_error_body_untouched(self) -> None:
        upstream = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}'
        rewritten = rewrite(upstream, self.three, endpoint="messages")
        self.assertEqual(rewritten.strip(), upstream, "an error body must pass through unchanged")
        for status in (529, 500, 400):
            with self.subTest(status=status):
                up = ac.sdk_create(self.server, upstream, status)
                rw = ac.sdk_create(self.server, rewritten, status)
                self.assertIsInstance(up.exc, anthropic.APIStatusError)
                ac.same_exc(up.exc, rw.exc, f"error body {status}")
                self.assertEqual(rw.exc.status_code, status)

    def test_checks_catch_broken_bodies(self) -> None:
        upstream = json.dumps(LISBON_MESSAGE).encode()
        good = rewrite(upstream, self.three, endpoint="messages")
        self.check_body("lisbon (intact)", upstream)
        real_rewrite = globals()["rewrite"]
        mutants = {
            "sources removed": lambda b: b[: b.rindex(b',"sources":')] + b"}",
            "sources renamed": lambda b: b.replace(b'"sources":', b'"source":'),
            "member reordered": lambda b: b.replace(b'{"id": "msg_01LisbonWeekendForecast", "type": "message",', b'{"type": "message", "id": "msg_01LisbonWeekendForecast",'),
        }
        for what, mutate in mutants.items():
            with self.subTest(mutant=what):
                bad = mutate(good)
                self.assertNotEqual(bad, good, what)
                globals()["rewrite"] = lambda *a, bad=bad, **k: bad
                try:
                    with self.assertRaises(AssertionError, msg=f"checks accepted a body with {what}"):
                        self.check_body(f"lisbon ({what})", upstream)
                finally:
                    globals()["rewrite"] = real_rewrite


if __name__ == "__main__":
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)

"""Benchmark: the citestream callback's per-event cost on LiteLLM's
`/v1/responses` route, against LiteLLM's own per-event serialization for
the wire, in the same run (ratios only; no absolute time is asserted).

Over the event objects LiteLLM's Responses iterator builds for a recorded
stream given `[n]` markers (`test_litellm_responses.with_markers`; the
objects from `OpenAIResponsesAPIConfig.transform_streaming_response`, as
`responses/streaming_iterator.py` makes them):

* baseline: `model_dump_json(exclude_none=True, exclude_unset=True)` of
  each event (what the proxy does to every event, `proxy_server.py`
  `_serialize_streaming_chunk`);
* with the callback: `citestream.litellm.rewrite_event` on each (its own
  serialization, the Rust rewriter, objects back) and the same
  serialization of every object it yields.

Median of R runs, per event. Run (after the e2e venv and the package are
built, e.g. by a pytest session of a test_litellm file):

    cd tests/e2e && ../../target/e2e-venv/bin/python bench_litellm_responses.py [--runs 15] [NAME ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from harness import pyext  # noqa: E402
from harness.checks import SOURCES  # noqa: E402
from harness.replay import RESPONSES_FIXTURES  # noqa: E402

DEFAULT = ["openai_gpt4omini_text_obfuscation", "azure_gpt41mini_web_search_preview_annotation",
           "openai_gpt5mini_web_search_12_annotations"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("names", nargs="*", default=DEFAULT)
    args = ap.parse_args()
    pyext.build()
    from litellm.llms.openai.responses.transformation import OpenAIResponsesAPIConfig
    from test_litellm_responses import _blocks, with_markers

    import citestream
    from citestream.litellm import rewrite_event

    config = OpenAIResponsesAPIConfig()
    sources = citestream.Sources(SOURCES)
    for name in args.names:
        marked = with_markers((RESPONSES_FIXTURES / f"{name}.sse").read_bytes())
        events = [config.transform_streaming_response(model="m", parsed_chunk=ev, logging_obj=None)
                  for _, ev in _blocks(marked.decode()) if ev is not None]

        def baseline(events=events):
            for e in events:
                e.model_dump_json(exclude_none=True, exclude_unset=True)

        def callback(events=events):
            rw = citestream.ResponsesRewriter(sources)
            for e in events:
                for x in rewrite_event(rw, e):
                    x.model_dump_json(exclude_none=True, exclude_unset=True)
            rw.finish_chunks()

        times = {"baseline": [], "callback": []}
        for _ in range(args.runs):  # interleaved
            for label, f in (("baseline", baseline), ("callback", callback)):
                t0 = time.perf_counter()
                f()
                times[label].append((time.perf_counter() - t0) / len(events) * 1e6)
        b, c = statistics.median(times["baseline"]), statistics.median(times["callback"])
        print(f"{name}: {len(events)} events; LiteLLM's serialization {b:.1f} us/event; "
              f"with rewrite_event {c:.1f} us/event (x{c / b:.1f})")


if __name__ == "__main__":
    main()

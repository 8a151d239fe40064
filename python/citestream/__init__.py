"""citestream: citations for LLM gateways, from Python.

The native module (`citestream._native`, Rust via PyO3) does all the work;
this package re-exports it. See python/README.md.

* `Sources`: the numbered sources of one request.
* `ChatRewriter` / `MessagesRewriter`: streaming rewriters, `feed(bytes) ->
  bytes`, `finish() -> bytes`.
* `rewrite_body`: a whole (non-streamed) response.
* `inspect` / `strip` / `inject` / `render_sources`: the request side.
* `Grounding`: the whole request side of a `citestream serve` config file
  (quota, search, injection), used by `citestream.litellm`.
"""

from ._native import (
    ChatRewriter,
    CitestreamError,
    ConfigError,
    Grounding,
    Inspection,
    InjectError,
    MessagesRewriter,
    ResponsesRewriter,
    Grounded,
    RequestError,
    Sources,
    SourcesError,
    __version__,
    inject,
    inspect,
    render_sources,
    rewrite_body,
    strip,
)

__all__ = [
    "ChatRewriter",
    "CitestreamError",
    "ConfigError",
    "Grounding",
    "Inspection",
    "InjectError",
    "MessagesRewriter",
    "ResponsesRewriter",
    "Grounded",
    "RequestError",
    "Sources",
    "SourcesError",
    "__version__",
    "inject",
    "inspect",
    "render_sources",
    "rewrite_body",
    "strip",
]

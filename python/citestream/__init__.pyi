"""Type stubs of `citestream` (the native module re-exported)."""

from ._native import (
    ChatRewriter as ChatRewriter,
    CitestreamError as CitestreamError,
    ConfigError as ConfigError,
    Grounding as Grounding,
    Inspection as Inspection,
    InjectError as InjectError,
    MessagesRewriter as MessagesRewriter,
    ResponsesRewriter as ResponsesRewriter,
    Grounded as Grounded,
    RequestError as RequestError,
    Sources as Sources,
    SourcesError as SourcesError,
    __version__ as __version__,
    inject as inject,
    inspect as inspect,
    render_sources as render_sources,
    rewrite_body as rewrite_body,
    strip as strip,
)

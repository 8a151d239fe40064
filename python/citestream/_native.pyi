"""Type stubs of the native module `citestream._native` (Rust, PyO3)."""

from typing import Dict, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple, Union

__version__: str

BytesLike = Union[bytes, bytearray, memoryview]
SourceDict = Mapping[str, Union[str, int, float, None]]
SourcesLike = Union["Sources", Sequence[SourceDict], str, bytes, bytearray]
Endpoint = Literal["chat", "messages", "responses"]
DialectName = Literal["sources", "citations", "both"]
OffsetsName = Literal["chars", "utf16", "bytes"]

class CitestreamError(ValueError):
    """Base class of every citestream error."""

class SourcesError(CitestreamError):
    """The sources are not a list (JSON array) of source objects."""

class RequestError(CitestreamError):
    """A request to answer with an error instead of going upstream."""

    status: int
    """HTTP status: 400 (bad body, `web_search` not a boolean) or 401."""
    body: bytes
    """The error JSON in the endpoint's shape."""
    param: Optional[str]
    """The offending parameter (`web_search`), when there is one."""
    message: str

class InjectError(CitestreamError):
    """The body is not a request the sources can be put into."""

class ConfigError(CitestreamError):
    """The config file cannot be used (names the key at fault)."""

class Sources:
    """The numbered sources of one request (from 1, in the given order).

    `data`: a list of dicts with the optional keys `title`, `url`, `text`,
    `heading`, `author`, `year`, `reference`, or the same as JSON text.
    Raises `SourcesError` (invalid) or `TypeError` (another kind of value).
    """

    def __init__(self, data: Union[Sequence[SourceDict], str, bytes, bytearray]) -> None: ...
    def __len__(self) -> int: ...
    def sources_json(self) -> str:
        """The top-level `sources` array as JSON text."""
    def citations_json(self) -> str:
        """The top-level `citations` array as JSON text."""
    def to_list(self) -> list[dict[str, str]]:
        """The sources as dicts (missing fields left out)."""

class ChatRewriter:
    """Rewrites a `/v1/chat/completions` SSE stream: feed pieces split
    anywhere, get the rewritten bytes they completed."""

    def __init__(
        self,
        sources: SourcesLike,
        *,
        dialect: DialectName = "sources",
        offsets: OffsetsName = "chars",
        n: int = 1,
        only_cited: bool = False,
    ) -> None: ...
    def feed(self, data: BytesLike) -> bytes:
        """Rewritten output completed by this piece (maybe `b""`). Raises
        `TypeError` for non-bytes, `CitestreamError` after `finish()`."""
    def finish(self) -> bytes:
        """The rest of the output; a second call returns `b""`."""
    def feed_chunk(self, chunk: BytesLike) -> List[bytes]:
        """One chunk's JSON in; the JSON of each chunk to emit in its place
        (the input itself when unchanged)."""
    def finish_chunks(self) -> List[bytes]:
        """The JSON of the chunks still to emit; a second call returns `[]`."""
    @property
    def sources_emitted(self) -> bool: ...

class MessagesRewriter:
    """Rewrites a `/v1/messages` SSE stream (`n` is accepted and ignored:
    one answer)."""

    def __init__(
        self,
        sources: SourcesLike,
        *,
        dialect: DialectName = "sources",
        offsets: OffsetsName = "chars",
        n: int = 1,
        only_cited: bool = False,
    ) -> None: ...
    def feed(self, data: BytesLike) -> bytes: ...
    def finish(self) -> bytes: ...
    def feed_chunk(self, chunk: BytesLike) -> List[bytes]: ...
    def finish_chunks(self) -> List[bytes]: ...
    @property
    def sources_emitted(self) -> bool: ...

class ResponsesRewriter:
    """Rewrites a `/v1/responses` SSE stream (`n` is accepted and ignored:
    one answer)."""

    def __init__(
        self,
        sources: SourcesLike,
        *,
        dialect: DialectName = "sources",
        offsets: OffsetsName = "chars",
        n: int = 1,
        only_cited: bool = False,
    ) -> None: ...
    def feed(self, data: BytesLike) -> bytes: ...
    def finish(self) -> bytes: ...
    def feed_chunk(self, chunk: BytesLike) -> List[bytes]: ...
    def finish_chunks(self) -> List[bytes]: ...
    @property
    def sources_emitted(self) -> bool: ...

def rewrite_body(
    body: BytesLike,
    sources: SourcesLike,
    *,
    endpoint: Endpoint = "chat",
    dialect: DialectName = "sources",
    offsets: OffsetsName = "chars",
    n: int = 1,
    only_cited: bool = False,
) -> bytes:
    """Rewrites a whole response body; bodies it does not own come back
    unchanged."""

class Inspection:
    """What `inspect` read from a request body."""

    endpoint: Endpoint
    web_search: bool
    body: bytes
    """The body to forward: every `web_search` member cut out."""
    query: Optional[str]
    """The last user message's text, when `web_search` is true."""
    context: list[Tuple[str, str]]
    """Earlier turns as (role, text), oldest first."""
    stream: bool
    n: int
    include_usage: bool

def inspect(body: BytesLike, *, endpoint: Endpoint = "chat") -> Inspection:
    """Validates a request body and reads/removes `web_search`. Raises
    `RequestError` (400) for a non-object body or a non-boolean
    `web_search`."""

def strip(body: BytesLike, *, endpoint: Endpoint = "chat") -> bytes:
    """`inspect(body).body`."""

def inject(
    body: BytesLike,
    sources: SourcesLike,
    *,
    endpoint: Endpoint = "chat",
    placement: Literal["user", "system"] = "user",
    header: Optional[str] = None,
    source: Optional[str] = None,
    separator: Optional[str] = None,
    footer: Optional[str] = None,
) -> bytes:
    """The body with the numbered sources put in front of the model."""

def render_sources(
    sources: SourcesLike,
    *,
    header: Optional[str] = None,
    source: Optional[str] = None,
    separator: Optional[str] = None,
    footer: Optional[str] = None,
) -> str:
    """The sources block as the model sees it."""

class Grounded:
    """A request ready to go upstream (from `Grounding.prepare`)."""

    @property
    def body(self) -> bytes: ...
    @property
    def search(self) -> Literal[
        "not-requested", "no-query", "injected", "nothing-found", "failed", "quota-exhausted", "quota-unavailable"
    ]: ...
    @property
    def remaining(self) -> Optional[int]: ...
    @property
    def account(self) -> str: ...
    @property
    def stream(self) -> bool: ...
    @property
    def sources(self) -> Optional[Sources]: ...
    @property
    def endpoint(self) -> Optional[Endpoint]: ...
    def rewriter(self) -> Optional[Union[ChatRewriter, MessagesRewriter, ResponsesRewriter]]:
        """A new streaming rewriter for the response, or None without sources."""
    def rewrite_body(self, body: BytesLike) -> bytes: ...
    def on_response(
        self, status: int, headers: Optional[Union[Mapping[str, str], Iterable[Tuple[str, str]]]] = None
    ) -> Dict[str, str]:
        """The upstream answered `status`: the search is committed on a 2xx
        status, released otherwise. Returns the response header edits."""
    def on_error(
        self, kind: Literal["refused", "tls", "timeout", "broken"] = "refused", detail: str = ""
    ) -> Optional[Tuple[int, bytes]]:
        """No response headers: the search is released. Returns the 502/504."""
    def release(self) -> None:
        """The client left: the search is released."""

class Grounding:
    """The request side of a `citestream serve` config file (TOML): auth,
    quota (memory or Redis), search provider, injection, rewrite options."""

    def __init__(self, config_path: Optional[str] = None) -> None: ...
    def prepare(
        self,
        body: BytesLike,
        *,
        endpoint: Endpoint = "chat",
        headers: Optional[Union[Mapping[str, str], Iterable[Tuple[str, str]]]] = None,
    ) -> Grounded:
        """Blocks (GIL released) until quota and search answered. Raises
        `RequestError` (400/401)."""
    @property
    def dialect(self) -> DialectName: ...

"""citestream for the LiteLLM proxy: web search with cited sources as a
`CustomLogger` callback.

```yaml
# config.yaml
litellm_settings:
  callbacks: citestream.litellm.proxy_handler   # config: env CITESTREAM_CONFIG
```

or, with the config path in code (a module next to config.yaml):

```python
from citestream.litellm import CitestreamCallback
proxy_handler = CitestreamCallback(config_path="citestream.toml")
```

What runs where (every decision is made by the Rust crates, through
`citestream.Grounding`; this module only converts LiteLLM's objects):

* `async_pre_call_hook` (chat completions, `/v1/messages` and
  `/v1/responses`): a request with a `web_search` member goes through
  `Grounding.prepare` on a worker thread: `web_search` validated (anything
  but a boolean: a 400 in the proxy's OpenAI error shape, `param` =
  `web_search`) and removed, the daily quota reserved, the configured
  provider searched, the numbered sources injected into `messages` (into
  the question's text in `input` on `/v1/responses`). The request then
  goes upstream without `web_search`. The search stays reserved until the
  upstream answers.
* Quota: the exchange in Rust (`Grounded.on_response`) commits the search
  when the upstream accepted the request (the success hook, or the
  streaming hook, which LiteLLM calls once the upstream's stream began)
  and releases it on `async_post_call_failure_hook` (an upstream error
  status: the exception's `status_code`; no answer at all: `on_error`). A
  `Grounded` never answered (evicted from the pending table, collected)
  releases its search.
* `async_post_call_streaming_iterator_hook`: each chunk object LiteLLM
  yields is serialized (`model_dump_json`, as the proxy does) and handed to
  the core's streaming rewriter as JSON (`feed_chunk`), which returns the
  JSON of the chunks to emit: one equal to the input is passed on as the
  same object, a modified or synthesized one (the annotations chunk, the
  finish chunk with `sources` / `citations`) becomes a new
  `ModelResponseStream`. No SSE is framed or split in Python. Only objects are
  yielded for chat: the proxy treats a yielded `str` as an error message.
  On `/v1/messages` the proxy streams the provider's native SSE bytes:
  they go through the messages rewriter as bytes (`sources` on
  `message_delta`).
  On `/v1/responses` LiteLLM hands typed event objects (its
  `ResponsesAPIStreamingResponse` union: `OutputTextDeltaEvent`,
  `ResponseCompletedEvent`, ...): each is serialized as the proxy writes
  it (`model_dump_json(exclude_none=True, exclude_unset=True)`) and fed to
  the Responses rewriter as one event (`feed_chunk`); an output equal to
  the input is the same object, any other (an inserted
  `response.output_text.annotation.added`, a snapshot with our
  annotations, the final response with `sources` / `citations`, an event
  whose `sequence_number` moved up) becomes the event class LiteLLM itself
  builds for that `type` (`OpenAIResponsesAPIConfig.get_event_model_class`).
  The `model` member the proxy stamps on every event is added after the
  hook, as for events it did not change.
* `async_post_call_success_hook`: a whole response is serialized, rewritten
  by the core and returned as a new `ModelResponse` (a dict on
  `/v1/messages`, a `ResponsesAPIResponse` on `/v1/responses`: serialized
  whole, nulls included, as the proxy answers it).

Config: the TOML file of `citestream serve` (docs/reference/config.md): `[search]`
(static, searxng, perplexity, http, brave, tavily, exa, local), `[quota]`
(memory, or redis with `redis_url`: the core's Redis store and scripts,
shared with `citestream serve` replicas), `[plans.default]`, `[rewrite]`.
`[server]` and `[upstream]` are not used (LiteLLM is the server). LiteLLM
authenticates clients and does not hand the callback their keys, so use
`auth.mode = "open"` (the default): every request counts against the
account `anonymous` on plan `default`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import OrderedDict
from typing import Any, AsyncGenerator, Optional

from litellm.integrations.custom_logger import CustomLogger
from litellm.types.llms.openai import ResponsesAPIResponse
from litellm.types.utils import ModelResponse, ModelResponseStream
from pydantic import BaseModel, Field, ValidationError

from . import Grounding, Grounded, RequestError

__all__ = ["CitedChunk", "CitestreamCallback", "proxy_handler", "rewrite_chunk", "rewrite_event"]

# Request members the grounding reads (the rest of LiteLLM's `data` holds
# proxy internals that are neither JSON nor the model's business).
_CHAT_MEMBERS = ("model", "messages", "web_search", "stream", "n", "stream_options", "system")
_MEMBERS = {
    "chat": _CHAT_MEMBERS,
    "messages": _CHAT_MEMBERS,
    # `instructions` is never conversation nor injected into: left out.
    "responses": ("model", "input", "web_search", "stream"),
}
_ENDPOINTS = {
    "completion": "chat",
    "acompletion": "chat",
    "anthropic_messages": "messages",
    "responses": "responses",
    "aresponses": "responses",
}
# Plans of requests between the pre-call hook and their response; bounded
# so requests whose response never comes (upstream error) cannot pile up.
_MAX_PENDING = 10_000


class CitestreamCallback(CustomLogger):
    """The LiteLLM callback. `config_path`: the TOML config file of
    `citestream serve` (default: env `CITESTREAM_CONFIG`, else the embedded
    defaults: bundled local corpus, quota in memory)."""

    def __init__(self, config_path: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        path = config_path or os.environ.get("CITESTREAM_CONFIG") or None
        self.grounding = Grounding(path)
        self._pending: OrderedDict[str, Grounded] = OrderedDict()

    # ---- request side ---------------------------------------------------
    async def async_pre_call_hook(self, user_api_key_dict, cache, data: dict, call_type):
        endpoint = _ENDPOINTS.get(call_type)
        if endpoint is None or "web_search" not in data:
            return data  # not a grounded route, or nothing to search and strip
        body = json.dumps({k: data[k] for k in _MEMBERS[endpoint] if k in data}).encode()
        try:
            prepared = await asyncio.to_thread(self.grounding.prepare, body, endpoint=endpoint)
        except RequestError as e:
            raise _proxy_error(e) from None
        forwarded = json.loads(prepared.body)
        data.pop("web_search", None)
        for k, v in forwarded.items():
            data[k] = v
        if prepared.sources is not None:
            self._remember(data, prepared)
        return data

    def _remember(self, data: dict, prepared: Grounded) -> None:
        key = data.get("litellm_call_id")
        if not key:
            return
        self._pending[key] = prepared
        while len(self._pending) > _MAX_PENDING:
            self._pending.popitem(last=False)

    def _take(self, data: Optional[dict]) -> Optional[Grounded]:
        key = (data or {}).get("litellm_call_id")
        return self._pending.pop(key, None) if key else None

    async def async_post_call_failure_hook(self, request_data, original_exception, user_api_key_dict, traceback_str=None):
        # The upstream refused (its status, when LiteLLM kept it) or never
        # answered: the exchange releases the reserved search.
        prepared = self._take(request_data)
        if prepared is None:
            return
        status = getattr(original_exception, "status_code", None)
        if isinstance(status, int) and 100 <= status <= 999:
            await asyncio.to_thread(prepared.on_response, status)
        else:
            await asyncio.to_thread(prepared.on_error, "broken", type(original_exception).__name__)

    # ---- response side --------------------------------------------------
    async def async_post_call_streaming_iterator_hook(self, user_api_key_dict, response, request_data: dict) -> AsyncGenerator[Any, None]:
        prepared = self._take(request_data)
        if prepared is not None:
            # LiteLLM hands over the stream once the upstream accepted it.
            await asyncio.to_thread(prepared.on_response, 200)
        rewriter = prepared.rewriter() if prepared is not None else None
        if rewriter is None:
            async for item in response:
                yield item
            return
        if prepared.endpoint == "responses":
            async for item in response:
                for out in rewrite_event(rewriter, item):
                    yield out
            for out in rewriter.finish_chunks():
                yield _event_object(out, None)
            return
        raw = False
        async for item in response:
            if isinstance(item, (bytes, bytearray)):
                # Native SSE bytes (the /v1/messages route): bytes in, bytes out.
                raw = True
                out = rewriter.feed(item)
                if out:
                    yield out
                continue
            for out in rewrite_chunk(rewriter, item):
                yield out
        if raw:
            rest = rewriter.finish()
            if rest:
                yield rest
            return
        for out in rewriter.finish_chunks():
            yield _chunk_object(out)

    async def async_post_call_success_hook(self, data: dict, user_api_key_dict, response):
        prepared = self._take(data)
        if prepared is None:
            return response
        await asyncio.to_thread(prepared.on_response, 200)
        if isinstance(response, dict):  # /v1/messages answers as a dict
            raw = json.dumps(response).encode()
            out = prepared.rewrite_body(raw)
            return response if out == raw else json.loads(out)
        if isinstance(response, ResponsesAPIResponse):
            # The proxy answers it whole, nulls included (FastAPI's encoder).
            raw = response.model_dump_json().encode()
        elif isinstance(response, ModelResponse):
            raw = response.model_dump_json(exclude_none=True).encode()
        else:
            return response
        out = prepared.rewrite_body(raw)
        if out == raw:
            return response
        rewritten = type(response)(**json.loads(out))
        rewritten._hidden_params = getattr(response, "_hidden_params", {})
        return rewritten


class CitedChunk(ModelResponseStream):
    """A `ModelResponseStream` whose top-level additions survive the proxy.

    LiteLLM's proxy writes "simple" chunks (one choice, no usage, no
    `system_fingerprint`, no `provider_specific_fields`) with a fast
    serializer that drops every other top-level member, `sources` and
    `citations` included (litellm 1.108, `_fast_serialize_simple_model_
    response_stream`). This subclass sets `provider_specific_fields` to
    `{}` (so the fast path is not taken) and leaves it out of the JSON, so
    the chunk is written by `model_dump_json` with our members and nothing
    else added. Used only for chunks without provider fields of their own.
    """

    provider_specific_fields: Optional[dict] = Field(default=None, exclude=True)


def _chunk(obj: dict) -> ModelResponseStream:
    if obj.get("provider_specific_fields") is None and ("sources" in obj or "citations" in obj):
        obj.pop("provider_specific_fields", None)
        return CitedChunk(**obj, provider_specific_fields={})
    return ModelResponseStream(**obj)


def rewrite_chunk(rewriter, item: Any) -> list:
    """Feeds one LiteLLM stream item to `rewriter` (its JSON, through
    `feed_chunk`) and returns the objects to yield in its place (usually
    `[item]` itself: a chunk the rewriter left unchanged)."""
    return _feed(rewriter, item, ModelResponseStream, lambda out, _: _chunk_object(out))


def rewrite_event(rewriter, item: Any) -> list:
    """Feeds one `/v1/responses` stream event object to `rewriter` (its
    JSON as the proxy writes it, through `feed_chunk`) and returns the event
    objects to yield in its place: usually `[item]` itself; the inserted
    `annotation.added` events before a text part's `output_text.done`; a new
    object of LiteLLM's class for that event `type` when the rewriter
    changed it."""
    return _feed(rewriter, item, BaseModel, _event_object)


def _feed(rewriter, item: Any, kind: type, build) -> list:
    """One stream object (a `kind` model, or a dict) in as the JSON the
    proxy writes for it; each output the rewriter gives back: `item` when
    equal to that JSON, else `build(json, item)`."""
    if isinstance(item, kind):
        data = item.model_dump_json(exclude_none=True, exclude_unset=True).encode()
    elif isinstance(item, dict):
        data = json.dumps(item).encode()
    else:
        return [item]  # not an object we can read: passed on untouched
    return [item if out == data else build(out, item) for out in rewriter.feed_chunk(data)]


def _event_object(data: bytes, like: Any):
    """The event LiteLLM would have built from this JSON: the class its
    OpenAI Responses config picks for the `type` (validated, or, as LiteLLM
    does when validation fails, constructed). A replacement for `like`
    keeps its hidden params (and its response's)."""
    from litellm.llms.openai.responses.transformation import OpenAIResponsesAPIConfig

    obj = json.loads(data)
    if not isinstance(obj, dict):
        return obj
    cls = OpenAIResponsesAPIConfig.get_event_model_class(event_type=str(obj.get("type")))
    try:
        event = cls(**obj)
    except ValidationError:
        event = cls.model_construct(**obj)
    if isinstance(like, BaseModel) and getattr(like, "type", None) == obj.get("type"):
        _keep_hidden(like, event)
        _keep_hidden(getattr(like, "response", None), getattr(event, "response", None))
    return event


def _keep_hidden(src: Any, dst: Any) -> None:
    hidden = getattr(src, "_hidden_params", None)
    if hidden and isinstance(dst, BaseModel) and hasattr(dst, "_hidden_params"):
        dst._hidden_params = hidden


def _chunk_object(data: bytes):
    obj = json.loads(data)
    return _chunk(obj) if isinstance(obj, dict) else obj


def _proxy_error(e: RequestError) -> Exception:
    """The proxy's OpenAI-shaped error for a request the grounding refused."""
    from litellm.proxy._types import ProxyException

    return ProxyException(message=e.message, type="invalid_request_error", param=e.param, code=e.status)


def __getattr__(name: str):
    # `callbacks: citestream.litellm.proxy_handler` builds the instance when
    # LiteLLM loads its config, so a bad config fails the proxy's start.
    if name == "proxy_handler":
        handler = CitestreamCallback()
        globals()["proxy_handler"] = handler
        return handler
    raise AttributeError(name)

//! citestream does the protocol work of an LLM API gateway that offers
//! web-search grounding.
//!
//! A request with `web_search: true` gets searched, the results go in front
//! of the model as numbered sources, and the model answers with `[1]`, `[2]`
//! markers. citestream rewrites the model's OpenAI- or Anthropic-compatible
//! response, streamed (SSE) or whole, so it carries `sources`, `annotations`
//! (character offsets of each marker) and/or `citations` exactly where
//! clients expect them, without delaying or altering anything else.
//!
//! The core does no I/O: it opens no socket, file or thread, runs no async
//! runtime and spawns nothing; bytes and search results go in and come out
//! through its methods, and the quota's futures are those of the store the
//! caller passes. It reads the time only through the [`quota::Clock`] it is
//! given ([`quota::SystemClock`] by default); servers, connections, the
//! Redis store and the search providers are the hosts' (`citestream-host`,
//! `citestream-search`).
//!
//! # Overview
//!
//! The modules follow the data path. A response: bytes → [`sse`] (events)
//! → `json` (the few members read, in place) → [`cite`] (markers and
//! offsets) → [`rewrite`] ([`chat`], [`messages`]: the members added) →
//! adapters (`stream`, the hosts). A request: [`request`] (inspection,
//! injection) → [`flow`] (quota, search, response plan). Imports only point
//! down this list.
//!
//! | module | role |
//! |---|---|
//! | [`sse`] | incremental, zero-copy WHATWG event-stream parser; writer for events we synthesize |
//! | `json` (internal) | all JSON byte work: the validating skipper, walkers, cursor, string decoding and writing, splicing |
//! | [`cite`] | the marker tracker: `[n]` markers and their offsets, code-aware, split-invariant |
//! | [`sources`] | numbered sources and their two output dialects |
//! | [`rewrite`] | the response rewriters: the streaming driver ([`SseRewriter`]), options, shared additions, [`chat`] and [`messages`] |
//! | [`request`] | `web_search` detection and stripping, query extraction, source injection |
//! | [`flow`] | one request through a gateway: inspect, reserve quota, search, commit or release, inject, response plan |
//! | [`quota`] | the daily per-account search quota: the store protocol, the in-memory store, clocks |
//! | `stream` | `futures_core::Stream` adapters (feature `stream`) |
//!
//! # Example: rewriting a streamed chat completion
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use citestream::{ChatStream, RewriteOptions, Sources};
//!
//! let sources = Arc::new(Sources::from_json(br#"[
//!     {"title": "Lisbon weather: weekend outlook", "url": "https://weather.example/lisbon/weekend"}
//! ]"#).unwrap());
//! let mut rewriter = ChatStream::new(sources, RewriteOptions::new());
//!
//! let upstream = [
//!     &br#"data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Sunny [1]."},"finish_reason":null}]}"#[..],
//!     b"\n\n",
//!     br#"data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
//!     b"\n\ndata: [DONE]\n\n",
//! ];
//! let mut out = Vec::new();
//! for piece in upstream {
//!     rewriter.feed(Bytes::copy_from_slice(piece)); // as read from the network
//!     while let Some(bytes) = rewriter.next_output() {
//!         out.extend_from_slice(&bytes); // write to the client
//!     }
//! }
//! rewriter.finish();
//! while let Some(bytes) = rewriter.next_output() {
//!     out.extend_from_slice(&bytes);
//! }
//! let out = String::from_utf8(out).unwrap();
//! // One synthesized chunk with the annotations, right before the finish chunk…
//! assert!(out.contains(r#""delta":{"annotations":[{"type":"url_citation","url_citation":{"start_index":6,"end_index":9,"#));
//! // …and `sources` on the finish chunk.
//! assert!(out.contains(r#""finish_reason":"stop"}],"sources":[{"index":1,"#));
//! ```
//!
//! # Example: a whole body
//!
//! ```
//! use citestream::{RewriteOptions, Sources, chat};
//! let sources = Sources::from_json(br#"[{"title":"T","url":"https://t/"}]"#).unwrap();
//! let body = br#"{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Yes [1]."},"finish_reason":"stop"}]}"#;
//! let out = chat::rewrite_body(body, &sources, &RewriteOptions::new());
//! let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
//! assert_eq!(v["choices"][0]["message"]["annotations"][0]["url_citation"]["start_index"], 4);
//! assert_eq!(v["sources"][0]["url"], "https://t/");
//! ```
//!
//! # Design: sans-IO, zero copy, one truth for offsets
//!
//! * **Sans-IO.** Parsers and rewriters are state machines: bytes in, bytes
//!   out, no async, sockets or clocks. The call order is always the same
//!   ([`StreamRewriter`]): `feed` a piece, drain `next_output` until `None`,
//!   repeat; `finish` at the end and drain again. The CLI, the
//!   [`stream`](crate#crate-features) adapter and any proxy are thin shells
//!   around that.
//! * **Zero copy.** Input arrives as [`bytes::Bytes`]. An event that lies
//!   within one input piece is handed out as a slice of it; an event the
//!   rewriter does not change goes out as that same slice. Pass-through
//!   allocates nothing in steady state. Modified events are splices
//!   (original bytes + our members), never re-serializations.
//! * **Read only what is needed.** Per chunk the chat rewriter reads
//!   `choices[].index`, `delta.content` and `finish_reason`; a chunk shaped
//!   like the previous one is recognised with a few comparisons (see
//!   [`chat`]).
//! * **One truth for offsets.** Streamed and whole bodies feed the same
//!   [`MarkerTracker`], which never keeps the content.
//! * **Lossless.** Anything not understood (invalid JSON, unknown events,
//!   comments, errors, events over the size limit) is forwarded byte for
//!   byte.
//!
//! # Limits
//!
//! Memory per stream is bounded by [`sse::Config::max_event_size`] (default
//! 1 MiB: an event larger than that is forwarded unchanged without being
//! interpreted), a learned chunk template (at most 4 KiB), per-choice
//! tracker state (at most [`MAX_CHOICES`] choices) and the markers found.
//!
//! # Crate features
//!
//! * `stream`: `citestream::stream`, `futures_core::Stream` adapters.
#![deny(missing_docs)]
#![warn(missing_debug_implementations, rust_2018_idioms, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc(test(attr(deny(warnings))))]

pub mod cite;
mod endpoint;
pub mod flow;
#[cfg(fuzzing)]
pub mod fuzzing;
// Internal; its `pub` items are what `fuzzing` re-exports.
#[cfg_attr(not(fuzzing), allow(unreachable_pub))]
mod json;
pub mod quota;
pub mod request;
pub mod rewrite;
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "sse2",
    not(citestream_disable_simd)
))]
mod simd;
pub mod sources;
pub mod sse;
#[cfg(feature = "stream")]
pub mod stream;

pub use cite::{Marker, MarkerTracker, OffsetUnit};
pub use endpoint::{Endpoint, ParseEndpointError};
pub use rewrite::{
    ChatStream, MAX_CHOICES, MessagesStream, ResponsesStream, RewriteOptions, Rewriter,
    SseRewriter, StreamRewriter, chat, messages, responses,
};
pub use sources::{Dialect, ParseDialectError, Source, Sources, SourcesError};

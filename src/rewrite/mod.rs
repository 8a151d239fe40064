//! The response side: rewriting a model's answer so it carries `sources`,
//! `annotations` and/or `citations` where clients expect them, streamed
//! (SSE) or whole.
//!
//! | module | role |
//! |---|---|
//! | `driver` | the streaming loop: SSE parser → endpoint handler → output queue, behind one wrapper ([`SseRewriter`]) and one trait ([`StreamRewriter`]) |
//! | `options` | [`RewriteOptions`] |
//! | `additions` | what every endpoint adds: the top-level `sources` / `citations` splice, the `annotations` array, re-writing an event |
//! | [`chat`] | `/v1/chat/completions`: the chunk scanner, the template learner, the handler, the whole-body rewriter |
//! | [`messages`] | `/v1/messages`: the handler and the whole-body rewriter |
//! | [`responses`] | `/v1/responses`: the handler, the snapshot splices, the whole-body rewriter |
//!
//! Data flows down the list: a handler reads chunks with
//! [`json`](crate#overview) and counts markers with [`cite`](crate::cite);
//! nothing here knows about requests, quotas or hosts.
//!
//! # Contract
//!
//! Lossless: every byte the rewriters do not own passes through unchanged,
//! anything not understood (invalid JSON, unknown events, comments, errors,
//! events over the size limit) is forwarded byte for byte, and an unchanged
//! event goes out as a slice of the input. Streamed and whole bodies feed
//! the same [`MarkerTracker`](crate::MarkerTracker), so their offsets
//! agree. Never panics, on any input.
//!
//! # Example: choosing the rewriter by endpoint
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use citestream::{Endpoint, RewriteOptions, Rewriter, Sources, StreamRewriter};
//!
//! let sources = Arc::new(Sources::from_json(br#"[{"title":"T","url":"u"}]"#).unwrap());
//! let mut rw = Rewriter::new(Endpoint::Messages, sources.clone(), RewriteOptions::new());
//! rw.feed(Bytes::from_static(b"event: ping\ndata: {\"type\":\"ping\"}\n\n"));
//! assert_eq!(&rw.next_output().unwrap()[..], b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
//!
//! let body = br#"{"type":"message","content":[{"type":"text","text":"A [1]."}]}"#;
//! let out = citestream::rewrite::rewrite_body(Endpoint::Messages, body, &sources, &RewriteOptions::new());
//! assert!(out.ends_with(br#","sources":[{"index":1,"title":"T","url":"u"}]}"#));
//! ```

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;

use crate::endpoint::Endpoint;
use crate::sources::Sources;

pub(crate) mod additions;
pub mod chat;
mod driver;
pub mod messages;
mod options;
pub mod responses;

pub use chat::{ChatHandler, ChatStream};
pub use driver::{SseRewriter, StreamRewriter};
pub use messages::{MessagesHandler, MessagesStream};
pub use options::{MAX_CHOICES, RewriteOptions};
pub use responses::{ResponsesHandler, ResponsesStream};

/// One of the streaming rewriters, chosen at run time by [`Endpoint`] (see
/// also [`ResponsePlan::stream_rewriter`](crate::flow::ResponsePlan::stream_rewriter)).
#[derive(Debug)]
pub enum Rewriter {
    /// `/v1/chat/completions`.
    Chat(Box<ChatStream>),
    /// `/v1/messages`.
    Messages(Box<MessagesStream>),
    /// `/v1/responses`.
    Responses(Box<ResponsesStream>),
}

impl Rewriter {
    /// The streaming rewriter for `endpoint`.
    #[must_use]
    pub fn new(endpoint: Endpoint, sources: Arc<Sources>, opts: RewriteOptions) -> Self {
        match endpoint {
            Endpoint::ChatCompletions => Rewriter::Chat(Box::new(ChatStream::new(sources, opts))),
            Endpoint::Messages => Rewriter::Messages(Box::new(MessagesStream::new(sources, opts))),
            Endpoint::Responses => {
                Rewriter::Responses(Box::new(ResponsesStream::new(sources, opts)))
            }
        }
    }
}

impl StreamRewriter for Rewriter {
    fn feed(&mut self, chunk: Bytes) {
        match self {
            Rewriter::Chat(r) => r.feed(chunk),
            Rewriter::Messages(r) => r.feed(chunk),
            Rewriter::Responses(r) => r.feed(chunk),
        }
    }
    fn feed_slice(&mut self, piece: &[u8]) {
        match self {
            Rewriter::Chat(r) => r.feed_slice(piece),
            Rewriter::Messages(r) => r.feed_slice(piece),
            Rewriter::Responses(r) => r.feed_slice(piece),
        }
    }
    fn next_output(&mut self) -> Option<Bytes> {
        match self {
            Rewriter::Chat(r) => r.next_output(),
            Rewriter::Messages(r) => r.next_output(),
            Rewriter::Responses(r) => r.next_output(),
        }
    }
    fn finish(&mut self) {
        match self {
            Rewriter::Chat(r) => r.finish(),
            Rewriter::Messages(r) => r.finish(),
            Rewriter::Responses(r) => r.finish(),
        }
    }
}

/// Rewrites a whole (non-streamed) response body of `endpoint`
/// ([`chat::rewrite_body`], [`messages::rewrite_body`] or
/// [`responses::rewrite_body`]).
///
/// # Panics
///
/// Never panics, on any input.
#[must_use]
pub fn rewrite_body<'a>(
    endpoint: Endpoint,
    body: &'a [u8],
    sources: &Sources,
    opts: &RewriteOptions,
) -> Cow<'a, [u8]> {
    match endpoint {
        Endpoint::ChatCompletions => chat::rewrite_body(body, sources, opts),
        Endpoint::Messages => messages::rewrite_body(body, sources, opts),
        Endpoint::Responses => responses::rewrite_body(body, sources, opts),
    }
}

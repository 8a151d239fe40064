//! The built-in demo upstream model of `citestream serve` (see
//! docs/gateway.md, "Demo upstream").
//!
//! With `upstream.base_url = ""` the gateway sends grounded requests here
//! instead of to a model server, and puts the responses through the same
//! rewriters as a real upstream's. The model answers from the numbered
//! sources the gateway injected into the request, citing each sentence with
//! its `[n]` marker, in the real providers' shapes, streamed or whole. It
//! exists so `citestream serve` can be tried with no model server; it is
//! not a test double.
//!
//! # Contract
//!
//! [`respond`] takes the endpoint and the request body exactly as the
//! gateway would send it upstream (after `web_search` was stripped and the
//! sources injected) and returns a [`DemoResponse`]: status, content type
//! and a body, either whole or as SSE events (one [`Bytes`] per event, in
//! order, each a complete event ending with its blank line). It is sans-IO
//! and synchronous (no clock, no randomness, no I/O); pacing streamed
//! events (a small delay between them, to look like a model) is the
//! caller's choice. It never panics.
//!
//! * **Reading the prompt**: the sources block of the core's default
//!   template ([`citestream::request::Template::default`], either
//!   [`Placement`](citestream::request::Placement)) is parsed back into
//!   numbered sources; the question is the last `user` message's other
//!   text. Details in the `prompt` submodule's docs: the `[n] {title}` /
//!   `URL: {url}` lines are what is recognised.
//! * **Answering**: the sentences of the sources that share the most terms
//!   with the question (and whose source title does), a few at most, each
//!   followed by its source's `[n]` marker; without sources, a plain
//!   statement that it got none, with no marker. Details in the `answer`
//!   submodule's docs.
//! * **Shapes**: `/v1/chat/completions` answers a `chat.completion` body,
//!   or with `"stream": true` `chat.completion.chunk` events (a role chunk
//!   per choice, token-sized content chunks, a finish chunk per choice with
//!   `finish_reason` `"stop"`, a usage chunk with `choices: []` when
//!   `stream_options.include_usage` is true, then `data: [DONE]`); `n`
//!   choices (capped at [`citestream::MAX_CHOICES`]) all carry the same
//!   answer. `/v1/messages` answers a `message` body or the Anthropic event
//!   sequence (`message_start`, `content_block_start`, `ping`,
//!   `content_block_delta`s, `content_block_stop`, `message_delta`,
//!   `message_stop`, with `event:` lines). `/v1/responses` answers a
//!   `response` object (one `message` item, one `output_text` part) or the
//!   Responses event sequence (`response.created`, `response.in_progress`,
//!   `response.output_item.added`, `response.content_part.added`,
//!   `response.output_text.delta`s, `response.output_text.done`,
//!   `response.content_part.done`, `response.output_item.done`,
//!   `response.completed`, with `event:` lines and consecutive
//!   `sequence_number`s from 0). `model` is [`MODEL`].
//! * **Limits**: `max_completion_tokens` / `max_tokens` (chat) and
//!   `max_tokens` (messages), `max_output_tokens` (responses) cut the
//!   answer after that many tokens, with `finish_reason: "length"` /
//!   `stop_reason: "max_tokens"` / `status: "incomplete"`.
//! * **Usage** counts are approximate: the number of token-sized pieces
//!   (about one per word and one per punctuation mark) of the answer, and
//!   of every text in the conversation for the prompt side.
//! * **Determinism**: the same request body gives the same bytes. The id is
//!   `chatcmpl-demo-<hex>` / `msg_demo_<hex>` / `resp_demo_<hex>` from an FNV-1a hash of the
//!   body; `created` is the fixed [`CREATED`].
//! * **Errors**: a body that is not a JSON object (or has a non-boolean
//!   `web_search`, which the gateway never forwards) gets status 400 and the
//!   endpoint's `invalid_request_error` body
//!   ([`citestream::request::RequestError::body`]). Everything else is
//!   read leniently: a missing or odd `messages` is an empty conversation.
//!
//! # Example
//!
//! ```
//! use citestream::Endpoint;
//! use citestream_demo::{respond, DemoBody};
//!
//! let body = br#"{"model":"any","messages":[{"role":"user","content":[
//!   {"type":"text","text":"Sources:\n\n[1] Lisbon weather\nURL: https://w.example/\nSaturday: sunny in Lisbon."},
//!   {"type":"text","text":"Weather in Lisbon?"}]}]}"#;
//! let r = respond(Endpoint::ChatCompletions, body);
//! assert_eq!((r.status, r.content_type), (200, "application/json"));
//! let DemoBody::Whole(bytes) = &r.body else { unreachable!() };
//! let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
//! assert_eq!(v["model"], "citestream-demo");
//! assert_eq!(v["choices"][0]["message"]["content"], "Saturday: sunny in Lisbon [1].");
//! ```

mod answer;
mod prompt;
mod wire;

use bytes::Bytes;
use citestream::Endpoint;

pub use wire::MODEL;

/// The `created` of every chat response (2026-01-01T00:00:00Z): fixed, so a
/// request always gets the same bytes.
pub const CREATED: u64 = 1_767_225_600;

/// `content-type` of whole JSON bodies (answers and errors).
pub const CONTENT_TYPE_JSON: &str = "application/json";

/// `content-type` of streamed answers.
pub const CONTENT_TYPE_SSE: &str = "text/event-stream";

/// What the demo model answers to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoResponse {
    /// The HTTP status: 200, or 400 for a body that is not a JSON object.
    pub status: u16,
    /// [`CONTENT_TYPE_JSON`] or [`CONTENT_TYPE_SSE`].
    pub content_type: &'static str,
    /// The body.
    pub body: DemoBody,
}

/// The body of a [`DemoResponse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DemoBody {
    /// A whole JSON body (an answer or an error).
    Whole(Bytes),
    /// SSE events in order, one complete event (ending with its blank line)
    /// per item, to be written as separate reads.
    Events(Vec<Bytes>),
}

impl DemoBody {
    /// The whole body as one buffer (the events concatenated).
    #[must_use]
    pub fn to_bytes(&self) -> Bytes {
        match self {
            DemoBody::Whole(b) => b.clone(),
            DemoBody::Events(events) => Bytes::from(events.concat()),
        }
    }
}

/// Answers one request to `endpoint` (module docs: the contract).
///
/// # Panics
/// Never panics.
#[must_use]
pub fn respond(endpoint: Endpoint, body: &[u8]) -> DemoResponse {
    let inspection = match citestream::request::inspect(endpoint, body.to_vec()) {
        Ok(i) => i,
        Err(e) => {
            return DemoResponse {
                status: e.status(),
                content_type: CONTENT_TYPE_JSON,
                body: DemoBody::Whole(Bytes::from(e.body())),
            };
        }
    };
    // `inspect` checked that the body is a JSON object.
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let prompt = prompt::read(endpoint, &value);
    let text = answer::compose(&prompt.passages, &prompt.question);
    let mut pieces = answer::pieces(&text);
    let limit = prompt
        .max_tokens
        .map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX));
    let truncated = pieces.len() > limit;
    pieces.truncate(limit);

    let hash = fnv1a(body);
    let reply = wire::Reply {
        id: match endpoint {
            Endpoint::ChatCompletions => format!("chatcmpl-demo-{hash:016x}"),
            Endpoint::Messages => format!("msg_demo_{hash:016x}"),
            Endpoint::Responses => format!("resp_demo_{hash:016x}"),
        },
        pieces,
        truncated,
        prompt_tokens: prompt
            .all_text
            .iter()
            .map(|t| answer::count_tokens(t))
            .sum(),
        n: inspection.n().min(citestream::MAX_CHOICES),
    };
    let body = match (endpoint, inspection.stream()) {
        (Endpoint::ChatCompletions, false) => DemoBody::Whole(wire::chat_body(&reply, CREATED)),
        (Endpoint::ChatCompletions, true) => DemoBody::Events(wire::chat_events(
            &reply,
            CREATED,
            inspection.include_usage(),
        )),
        (Endpoint::Messages, false) => DemoBody::Whole(wire::message_body(&reply)),
        (Endpoint::Messages, true) => DemoBody::Events(wire::message_events(&reply)),
        (Endpoint::Responses, false) => DemoBody::Whole(wire::response_body(&reply, CREATED)),
        (Endpoint::Responses, true) => DemoBody::Events(wire::response_events(&reply, CREATED)),
    };
    DemoResponse {
        status: 200,
        content_type: match body {
            DemoBody::Whole(_) => CONTENT_TYPE_JSON,
            DemoBody::Events(_) => CONTENT_TYPE_SSE,
        },
        body,
    }
}

/// 64-bit FNV-1a: a stable hash (unlike `DefaultHasher`, whose algorithm
/// may change between Rust releases) for the response ids.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn events_concatenate() {
        let b = DemoBody::Events(vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")]);
        assert_eq!(&b.to_bytes()[..], b"abc");
    }

    #[test]
    fn n_is_capped() {
        let r = respond(
            Endpoint::ChatCompletions,
            br#"{"n":100000,"messages":[{"role":"user","content":"q"}]}"#,
        );
        let v: serde_json::Value = serde_json::from_slice(&r.body.to_bytes()).unwrap();
        assert_eq!(
            v["choices"].as_array().map(Vec::len),
            Some(citestream::MAX_CHOICES as usize)
        );
    }
}

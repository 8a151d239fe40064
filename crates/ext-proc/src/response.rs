//! The answers to response body messages, as Envoy takes them in
//! `STREAMED` (or `BUFFERED`) and in `FULL_DUPLEX_STREAMED` body mode. What
//! the bytes are is the exchange's decision
//! (`citestream_host::exchange`); this module only packs them.
//!
//! Contract (sans-IO: the exchange's output for one body message in,
//! `ProcessingResponse`s out):
//! * `STREAMED`: every message is answered once. Output equal to the
//!   message is sent as "unchanged"; other output replaces the message's
//!   bytes (no output yet: an empty replacement).
//! * `FULL_DUPLEX_STREAMED`: the output goes back as one
//!   `streamed_response` with the message's `end_of_stream`; a message
//!   with no output yet gets no answer until there is some or the body
//!   ends.
//! * Trailers in `FULL_DUPLEX_STREAMED` mode end the body when no message
//!   had `end_of_stream` set: what is left goes out before the trailers
//!   answer ([`rest_before_trailers`]).
//!
//! The bytes Envoy forwards are, concatenated, exactly the exchange's
//! output (for a rewritten stream, what `citestream rewrite` writes for the
//! same input and sources).

use bytes::Bytes;

use crate::pb::ProcessingResponse;
use crate::proto::{self, Chunk};

/// How Envoy sends the response body (the filter's `response_body_mode`,
/// announced in the first message of each exchange).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyMode {
    /// `STREAMED` (also `BUFFERED` and `NONE`): one answer per body
    /// message, which may replace that message's bytes.
    Streamed,
    /// `FULL_DUPLEX_STREAMED`: body pieces go back as `streamed_response`s,
    /// any number per message, the last with `end_of_stream`.
    FullDuplex,
}

/// The answer to one body message whose bytes were `original` and whose
/// output is `out` (`None`: `original` itself, which full duplex sends
/// back as it is). Nothing is copied: the answer holds `out` (or
/// `original`).
#[inline]
pub(crate) fn answer(
    mode: BodyMode,
    original: Bytes,
    out: Option<Bytes>,
    end: bool,
) -> Option<ProcessingResponse> {
    match mode {
        BodyMode::Streamed => Some(proto::response_body(match out {
            Some(b) if b != original => Chunk::Replace(b),
            _ => Chunk::Keep,
        })),
        BodyMode::FullDuplex => {
            let out = out.unwrap_or(original);
            (!out.is_empty() || end).then(|| proto::response_body_streamed(out, end))
        }
    }
}

/// Trailers arrived: the last body piece to send before the trailers
/// answer, if any is left. (In `STREAMED` mode a trailers answer cannot
/// carry body bytes; the body's last message, which Envoy sends with
/// `end_of_stream` when trailers follow, has taken them already.)
pub(crate) fn rest_before_trailers(mode: BodyMode, rest: Bytes) -> Option<ProcessingResponse> {
    (mode == BodyMode::FullDuplex && !rest.is_empty())
        .then(|| proto::response_body_streamed(rest, false))
}

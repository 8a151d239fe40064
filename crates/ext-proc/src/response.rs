//! The response body of one HTTP exchange, as Envoy hands it over in
//! `STREAMED` (or `BUFFERED`) and in `FULL_DUPLEX_STREAMED` body mode.
//!
//! Contract (sans-IO: body messages in, `ProcessingResponse`s out):
//! * [`ResponseBody::Pass`]: the body is not ours (no sources injected, an
//!   error status, a compressed body, another endpoint). In `STREAMED` mode
//!   each message is answered "unchanged"; in `FULL_DUPLEX_STREAMED` mode
//!   each piece is sent back as it came, with its `end_of_stream`.
//! * [`ResponseBody::Stream`]: an SSE stream. Each piece goes through the
//!   core's streaming rewriter at once and whatever it emits goes back in
//!   the answer to that very piece: nothing is held back beyond what the
//!   rewriter itself needs (an event not complete yet). `STREAMED`: the
//!   answer replaces that piece (an answer equal to the piece is sent as
//!   "unchanged"); `FULL_DUPLEX_STREAMED`: a `streamed_response` carries the
//!   output, and a piece with no output yet gets no message until the end.
//!   The bytes Envoy forwards are, concatenated, exactly what
//!   `citestream rewrite` writes for the same input and sources.
//! * [`ResponseBody::Whole`]: a JSON body. Pieces are held (in `STREAMED`
//!   mode each is answered with an empty replacement) until
//!   `end_of_stream`, then the whole rewritten body goes out at once. A
//!   body larger than the limit stops being held: what was held goes out
//!   unchanged with the current piece and the rest passes through.
//! * Trailers in `FULL_DUPLEX_STREAMED` mode end the body when no message
//!   had `end_of_stream` set: [`ResponseBody::end_before_trailers`] sends
//!   what is left.
//!
//! Memory: `Stream` holds what the core rewriter holds (bounded by its
//! limits); `Whole` at most the limit.

use bytes::Bytes;
use citestream::flow::ResponsePlan;
use citestream::{RewriteOptions, Rewriter, StreamRewriter};
use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingResponse;

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

/// The state of one response body (see the module docs).
#[derive(Debug)]
pub(crate) enum ResponseBody {
    /// Not rewritten.
    Pass,
    /// An SSE stream through the rewriter.
    Stream(Box<Rewriter>),
    /// A whole JSON body being held for rewriting.
    Whole {
        /// How to rewrite it.
        plan: ResponsePlan,
        /// The `[rewrite]` options.
        opts: RewriteOptions,
        /// What arrived so far.
        held: Vec<u8>,
        /// Past this size the body passes through.
        limit: usize,
    },
}

/// The answer to one piece: its new bytes (`None`: unchanged) and whether
/// it ends the body.
struct Piece {
    bytes: Option<Vec<u8>>,
    end: bool,
}

impl ResponseBody {
    /// Handles one response body message and returns the answer to send,
    /// if any.
    pub(crate) fn on_body(
        &mut self,
        mode: BodyMode,
        body: Vec<u8>,
        end: bool,
    ) -> Option<ProcessingResponse> {
        let piece = match self {
            ResponseBody::Pass => Piece { bytes: None, end },
            ResponseBody::Stream(rw) => {
                let out = rewrite_piece(rw, &body, end);
                let bytes = (out != body).then_some(out);
                Piece { bytes, end }
            }
            ResponseBody::Whole {
                plan,
                opts,
                held,
                limit,
            } => {
                held.extend_from_slice(&body);
                if end {
                    let out = plan.rewrite_body(held, opts).into_owned();
                    *self = ResponseBody::Pass;
                    Piece {
                        bytes: Some(out),
                        end,
                    }
                } else if held.len() > *limit {
                    let out = std::mem::take(held);
                    *self = ResponseBody::Pass;
                    Piece {
                        bytes: Some(out),
                        end,
                    }
                } else {
                    Piece {
                        bytes: Some(Vec::new()),
                        end,
                    }
                }
            }
        };
        answer(mode, body, piece)
    }

    /// Trailers arrived (`FULL_DUPLEX_STREAMED`): the body is complete.
    /// Returns the last body piece to send before the trailers answer, if
    /// any is left.
    pub(crate) fn end_before_trailers(&mut self, mode: BodyMode) -> Option<ProcessingResponse> {
        let rest = match std::mem::replace(self, ResponseBody::Pass) {
            ResponseBody::Pass => return None,
            ResponseBody::Stream(mut rw) => rewrite_piece(&mut rw, &[], true),
            ResponseBody::Whole {
                plan, opts, held, ..
            } => plan.rewrite_body(&held, &opts).into_owned(),
        };
        // In `STREAMED` mode a trailers answer cannot carry body bytes; the
        // body's last message (Envoy sends one with `end_of_stream` when
        // trailers follow) has taken them already.
        (mode == BodyMode::FullDuplex && !rest.is_empty())
            .then(|| proto::response_body_streamed(rest, false))
    }
}

/// Feeds `body` to the rewriter and collects everything it emits.
fn rewrite_piece(rw: &mut Rewriter, body: &[u8], end: bool) -> Vec<u8> {
    if !body.is_empty() {
        rw.feed(Bytes::copy_from_slice(body));
    }
    if end {
        rw.finish();
    }
    let mut out = Vec::with_capacity(body.len() + 64);
    while let Some(b) = rw.next_output() {
        out.extend_from_slice(&b);
    }
    out
}

fn answer(mode: BodyMode, original: Vec<u8>, piece: Piece) -> Option<ProcessingResponse> {
    match mode {
        BodyMode::Streamed => Some(proto::response_body(match piece.bytes {
            None => Chunk::Keep,
            Some(b) => Chunk::Replace(b),
        })),
        BodyMode::FullDuplex => {
            let bytes = piece.bytes.unwrap_or(original);
            (!bytes.is_empty() || piece.end)
                .then(|| proto::response_body_streamed(bytes, piece.end))
        }
    }
}

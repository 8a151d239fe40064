//! [`Endpoint`]: which API a body belongs to. Both sides of the data path
//! dispatch on it (the request side for the request and error shapes, the
//! response side for the rewriter), so it sits below both.

/// The API endpoint a body was sent to or came from. It decides the
/// request shape (messages, content parts or blocks, `system`), the error
/// shape and the response rewriter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// OpenAI-compatible `/v1/chat/completions`.
    ChatCompletions,
    /// Anthropic-compatible `/v1/messages`.
    Messages,
    /// OpenAI-compatible `/v1/responses` (the Responses API; the OpenAI
    /// error shape).
    Responses,
}

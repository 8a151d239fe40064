//! The demo model's responses in the real providers' shapes: OpenAI
//! `chat.completion` / `chat.completion.chunk` and Anthropic `message` /
//! its event sequence. JSON is written by hand (strings escaped by
//! serde_json) so members come in the providers' order.

use bytes::Bytes;

use super::MODEL;

/// Everything a response needs, whatever its shape.
#[derive(Debug)]
pub(crate) struct Reply<'a> {
    /// `chatcmpl-…` or `msg_…`.
    pub(crate) id: String,
    /// The content as token-sized pieces (already cut at `max_tokens`).
    pub(crate) pieces: Vec<&'a str>,
    /// True when `max_tokens` cut the answer short.
    pub(crate) truncated: bool,
    /// Approximate prompt tokens.
    pub(crate) prompt_tokens: u64,
    /// Number of choices (chat `n`; 1 on messages).
    pub(crate) n: u32,
}

impl Reply<'_> {
    fn content(&self) -> String {
        self.pieces.concat()
    }

    fn completion_tokens(&self) -> u64 {
        u64::try_from(self.pieces.len()).unwrap_or(u64::MAX)
    }
}

fn js(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn event(name: Option<&str>, data: &str) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + 32);
    citestream::sse::write_event(
        &mut out,
        name.map(str::as_bytes),
        None,
        None,
        data.as_bytes(),
    );
    Bytes::from(out)
}

fn chat_usage(r: &Reply<'_>) -> String {
    let completion = r.completion_tokens().saturating_mul(u64::from(r.n));
    format!(
        r#"{{"prompt_tokens":{},"completion_tokens":{completion},"total_tokens":{}}}"#,
        r.prompt_tokens,
        r.prompt_tokens.saturating_add(completion)
    )
}

fn chat_finish(r: &Reply<'_>) -> &'static str {
    if r.truncated { "length" } else { "stop" }
}

/// A whole `chat.completion` body.
pub(crate) fn chat_body(r: &Reply<'_>, created: u64) -> Bytes {
    let content = js(&r.content());
    let choices: Vec<String> = (0..r.n)
        .map(|i| {
            format!(
                r#"{{"index":{i},"message":{{"role":"assistant","content":{content},"refusal":null,"annotations":[]}},"logprobs":null,"finish_reason":"{}"}}"#,
                chat_finish(r)
            )
        })
        .collect();
    Bytes::from(format!(
        r#"{{"id":{},"object":"chat.completion","created":{created},"model":"{MODEL}","choices":[{}],"usage":{}}}"#,
        js(&r.id),
        choices.join(","),
        chat_usage(r)
    ))
}

/// The `chat.completion.chunk` events: per choice a role chunk, then the
/// pieces (choices interleaved), a finish chunk per choice, the usage
/// chunk when `include_usage`, and `[DONE]`.
pub(crate) fn chat_events(r: &Reply<'_>, created: u64, include_usage: bool) -> Vec<Bytes> {
    let head = format!(
        r#"{{"id":{},"object":"chat.completion.chunk","created":{created},"model":"{MODEL}","choices":["#,
        js(&r.id)
    );
    let tail = if include_usage {
        r#"],"usage":null}"#
    } else {
        "]}"
    };
    let chunk = |i: u32, delta: &str, finish: &str| {
        event(
            None,
            &format!(
                r#"{head}{{"index":{i},"delta":{delta},"logprobs":null,"finish_reason":{finish}}}{tail}"#
            ),
        )
    };
    let mut out = Vec::with_capacity((r.pieces.len() + 2) * r.n as usize + 2);
    for i in 0..r.n {
        out.push(chunk(
            i,
            r#"{"role":"assistant","content":"","refusal":null}"#,
            "null",
        ));
    }
    for piece in &r.pieces {
        let delta = format!(r#"{{"content":{}}}"#, js(piece));
        for i in 0..r.n {
            out.push(chunk(i, &delta, "null"));
        }
    }
    let finish = format!("\"{}\"", chat_finish(r));
    for i in 0..r.n {
        out.push(chunk(i, "{}", &finish));
    }
    if include_usage {
        out.push(event(
            None,
            &format!(r#"{head}],"usage":{}}}"#, chat_usage(r)),
        ));
    }
    out.push(event(None, "[DONE]"));
    out
}

fn stop_reason(r: &Reply<'_>) -> &'static str {
    if r.truncated {
        "max_tokens"
    } else {
        "end_turn"
    }
}

/// A whole Anthropic `message` body.
pub(crate) fn message_body(r: &Reply<'_>) -> Bytes {
    Bytes::from(format!(
        r#"{{"id":{},"type":"message","role":"assistant","model":"{MODEL}","content":[{{"type":"text","text":{}}}],"stop_reason":"{}","stop_sequence":null,"usage":{{"input_tokens":{},"output_tokens":{}}}}}"#,
        js(&r.id),
        js(&r.content()),
        stop_reason(r),
        r.prompt_tokens,
        r.completion_tokens()
    ))
}

/// The Anthropic event sequence: `message_start`, `content_block_start`,
/// `ping`, one `content_block_delta` per piece, `content_block_stop`,
/// `message_delta` (stop reason, output tokens), `message_stop`.
pub(crate) fn message_events(r: &Reply<'_>) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(r.pieces.len() + 6);
    out.push(event(
        Some("message_start"),
        &format!(
            r#"{{"type":"message_start","message":{{"id":{},"type":"message","role":"assistant","model":"{MODEL}","content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"output_tokens":1}}}}}}"#,
            js(&r.id),
            r.prompt_tokens
        ),
    ));
    out.push(event(
        Some("content_block_start"),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    ));
    out.push(event(Some("ping"), r#"{"type": "ping"}"#));
    for piece in &r.pieces {
        out.push(event(
            Some("content_block_delta"),
            &format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{}}}}}"#,
                js(piece)
            ),
        ));
    }
    out.push(event(
        Some("content_block_stop"),
        r#"{"type":"content_block_stop","index":0}"#,
    ));
    out.push(event(
        Some("message_delta"),
        &format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"{}","stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
            stop_reason(r),
            r.completion_tokens()
        ),
    ));
    out.push(event(Some("message_stop"), r#"{"type":"message_stop"}"#));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(pieces: Vec<&str>, n: u32) -> Reply<'_> {
        Reply {
            id: "x\"y".into(),
            pieces,
            truncated: false,
            prompt_tokens: 10,
            n,
        }
    }

    #[test]
    fn chat_events_shape_and_usage() {
        let r = reply(vec!["Hi", " [", "1", "]."], 2);
        let evs = chat_events(&r, 7, true);
        // 2 role chunks, 4 pieces × 2 choices, 2 finish chunks, usage, [DONE].
        assert_eq!(evs.len(), 2 + 8 + 2 + 1 + 1);
        assert!(
            evs.iter()
                .all(|e| e.starts_with(b"data: ") && e.ends_with(b"\n\n"))
        );
        assert_eq!(&evs[13][..], b"data: [DONE]\n\n");
        let usage: serde_json::Value = serde_json::from_slice(&evs[12][6..]).unwrap();
        assert_eq!(usage["id"], "x\"y");
        assert_eq!(usage["choices"], serde_json::json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 8);
        assert_eq!(usage["usage"]["total_tokens"], 18);
        let second: serde_json::Value = serde_json::from_slice(&evs[3][6..]).unwrap();
        assert_eq!(second["choices"][0]["index"], 1);
        assert_eq!(second["choices"][0]["delta"]["content"], "Hi");
        assert!(second["usage"].is_null());
    }

    #[test]
    fn empty_answer_still_has_every_frame() {
        let mut r = reply(Vec::new(), 1);
        r.truncated = true;
        assert_eq!(chat_events(&r, 7, false).len(), 3);
        let evs = message_events(&r);
        assert_eq!(evs.len(), 6);
        assert!(evs[4].starts_with(b"event: message_delta\ndata: "));
        assert!(
            std::str::from_utf8(&evs[4])
                .unwrap()
                .contains("\"max_tokens\"")
        );
        let body: serde_json::Value = serde_json::from_slice(&chat_body(&r, 7)).unwrap();
        assert_eq!(body["choices"][0]["finish_reason"], "length");
        assert_eq!(body["choices"][0]["message"]["content"], "");
    }
}

//! The demo model's responses in the real providers' shapes: OpenAI
//! `chat.completion` / `chat.completion.chunk`, Anthropic `message` / its
//! event sequence, and the OpenAI Responses `response` object / its event
//! sequence. JSON is written by hand (strings escaped by
//! serde_json) so members come in the providers' order.

use bytes::Bytes;

/// The `model` of every demo response.
pub const MODEL: &str = "citestream-demo";

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

/// The `response` object of `/v1/responses`: `status` and `output` as
/// given (`output` is a JSON array; `[]` while in progress).
fn response_object(r: &Reply<'_>, created: u64, status: &str, output: &str, done: bool) -> String {
    let incomplete = if r.truncated && done {
        r#"{"reason":"max_output_tokens"}"#
    } else {
        "null"
    };
    // (`cache_write_tokens` as api.openai.com sends it and the openai SDK's
    // `InputTokensDetails` requires it.)
    let usage = if done {
        let out = r.completion_tokens();
        format!(
            r#"{{"input_tokens":{},"input_tokens_details":{{"cache_write_tokens":0,"cached_tokens":0}},"output_tokens":{out},"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{}}}"#,
            r.prompt_tokens,
            r.prompt_tokens.saturating_add(out)
        )
    } else {
        "null".to_owned()
    };
    let completed_at = if done {
        created.to_string()
    } else {
        "null".to_owned()
    };
    format!(
        r#"{{"id":{},"object":"response","created_at":{created},"status":"{status}","background":false,"completed_at":{completed_at},"error":null,"incomplete_details":{incomplete},"instructions":null,"max_output_tokens":null,"model":"{MODEL}","output":{output},"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{{"effort":null,"summary":null}},"store":false,"temperature":1.0,"text":{{"format":{{"type":"text"}}}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{usage},"user":null,"metadata":{{}}}}"#,
        js(&r.id)
    )
}

/// The `message` output item's id.
fn message_id(r: &Reply<'_>) -> String {
    format!("msg_{}", r.id.trim_start_matches("resp_"))
}

/// `completed`, or `incomplete` when `max_output_tokens` cut the answer.
fn response_status(r: &Reply<'_>) -> &'static str {
    if r.truncated {
        "incomplete"
    } else {
        "completed"
    }
}

/// The `output_text` part with the whole text.
fn output_text(text: &str) -> String {
    format!(
        r#"{{"type":"output_text","annotations":[],"logprobs":[],"text":{}}}"#,
        js(text)
    )
}

/// The `message` item with `content` and `status`.
fn message_item(r: &Reply<'_>, status: &str, content: &str) -> String {
    format!(
        r#"{{"id":{},"type":"message","status":"{status}","content":[{content}],"role":"assistant"}}"#,
        js(&message_id(r))
    )
}

/// A whole `/v1/responses` body (`"object": "response"`).
pub(crate) fn response_body(r: &Reply<'_>, created: u64) -> Bytes {
    let item = message_item(r, response_status(r), &output_text(&r.content()));
    let output = format!("[{item}]");
    Bytes::from(response_object(
        r,
        created,
        response_status(r),
        &output,
        true,
    ))
}

/// The Responses event sequence, with `event:` lines and consecutive
/// `sequence_number`s from 0: `response.created`, `response.in_progress`,
/// `response.output_item.added`, `response.content_part.added`, one
/// `response.output_text.delta` per piece, `response.output_text.done`,
/// `response.content_part.done`, `response.output_item.done`, then
/// `response.completed` (or `response.incomplete`).
pub(crate) fn response_events(r: &Reply<'_>, created: u64) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(r.pieces.len() + 9);
    let mut seq = 0u64;
    let mut push = |ty: &str, body: String| {
        out.push(event(
            Some(ty),
            &format!(r#"{{"type":"{ty}",{body},"sequence_number":{seq}}}"#),
        ));
        seq += 1;
    };
    let pending = response_object(r, created, "in_progress", "[]", false);
    push("response.created", format!(r#""response":{pending}"#));
    push("response.in_progress", format!(r#""response":{pending}"#));
    let id = js(&message_id(r));
    let added = message_item(r, "in_progress", "");
    push(
        "response.output_item.added",
        format!(r#""item":{added},"output_index":0"#),
    );
    let part = |text: &str| {
        format!(
            r#""content_index":0,"item_id":{id},"output_index":0,"part":{}"#,
            output_text(text)
        )
    };
    push("response.content_part.added", part(""));
    for piece in &r.pieces {
        push(
            "response.output_text.delta",
            format!(
                r#""content_index":0,"delta":{},"item_id":{id},"logprobs":[],"output_index":0"#,
                js(piece)
            ),
        );
    }
    let text = r.content();
    push(
        "response.output_text.done",
        format!(
            r#""content_index":0,"item_id":{id},"logprobs":[],"output_index":0,"text":{}"#,
            js(&text)
        ),
    );
    push("response.content_part.done", part(&text));
    let status = response_status(r);
    let item = message_item(r, status, &output_text(&text));
    push(
        "response.output_item.done",
        format!(r#""item":{item},"output_index":0"#),
    );
    let done = response_object(r, created, status, &format!("[{item}]"), true);
    push(
        &format!("response.{status}"),
        format!(r#""response":{done}"#),
    );
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

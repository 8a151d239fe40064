//! Reading a request body the way the demo model "reads its prompt": the
//! numbered sources the gateway injected, the question, and the few
//! settings it honours.
//!
//! The sources block is recognised by the structure of the core's default
//! template ([`citestream::request::Template::default`]): any header, then
//! blocks that start on a line of their own with `[n] {title}`, numbered
//! 1, 2, 3… in order, whose next line starts with `URL:`, followed by the
//! source text up to the next such block (the separator and surrounding
//! blank lines are trimmed). The header's wording is not needed, so a
//! custom header or footer still parses; a custom `source` template
//! without the `[n] …` / `URL:` lines does not (the demo then answers as
//! if it got no sources).
//!
//! Where the block is looked for, in order: each text part (or the string
//! content) of the last `user` message ([`Placement::UserMessage`]), then
//! the system prompt ([`Placement::System`]: chat `system`/`developer`
//! messages, the messages endpoint's top-level `system`). The first text
//! that parses supplies the sources; the question is the last `user`
//! message's other text, its parts joined with `\n`. A string content is
//! `<block><question>`: the block ends at the first blank line after the
//! last source's `URL:` line (the gateway's sources have one-line texts:
//! the search adapter squeezes whitespace), the question is what follows.
//!
//! [`Placement::UserMessage`]: citestream::request::Placement::UserMessage
//! [`Placement::System`]: citestream::request::Placement::System

use citestream::Endpoint;
use serde_json::Value;

/// One numbered source as the demo read it back from the prompt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Passage {
    /// The footnote number, from 1.
    pub(crate) number: u32,
    /// The title line (may be empty).
    pub(crate) title: String,
    /// The `URL:` line's value (may be empty).
    pub(crate) url: String,
    /// The source text (may be empty; may span lines).
    pub(crate) text: String,
}

/// What the demo model takes from a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Prompt {
    /// The numbered sources, in footnote order (empty when none were found).
    pub(crate) passages: Vec<Passage>,
    /// The last `user` message's text without the sources block.
    pub(crate) question: String,
    /// Every text of the conversation (system prompt and all messages), for
    /// the approximate `prompt_tokens` / `input_tokens`.
    pub(crate) all_text: Vec<String>,
    /// `max_completion_tokens` or `max_tokens` (chat), `max_tokens`
    /// (messages), when a non-negative integer.
    pub(crate) max_tokens: Option<u64>,
}

/// Reads `body` (already known to be a JSON object) for `endpoint`.
/// Lenient: anything missing or oddly typed is taken as absent.
pub(crate) fn read(endpoint: Endpoint, body: &Value) -> Prompt {
    if endpoint == Endpoint::Responses {
        return read_responses(body);
    }
    let empty = Vec::new();
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .unwrap_or(&empty);

    let mut system_texts = Vec::new();
    if let (Endpoint::Messages, Some(system)) = (endpoint, body.get("system")) {
        system_texts.extend(texts(system));
    }
    let mut all_text = system_texts.clone();
    let mut last_user: Option<&Value> = None;
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let content = m.get("content").map(texts).unwrap_or_default();
        if endpoint == Endpoint::ChatCompletions && (role == "system" || role == "developer") {
            system_texts.extend(content.iter().cloned());
        }
        if role == "user" {
            last_user = Some(m);
        }
        all_text.extend(content);
    }

    let user_content = last_user.and_then(|m| m.get("content"));
    let mut passages = Vec::new();
    let mut question = Vec::new();
    if let Some(Value::String(s)) = user_content {
        match parse(s, true) {
            Some((p, q)) => {
                passages = p;
                question.push(q);
            }
            None => question.push(s.as_str()),
        }
    }
    let user_texts = match user_content {
        Some(Value::Array(_)) => user_content.map(texts).unwrap_or_default(),
        _ => Vec::new(),
    };
    for t in &user_texts {
        match parse_block(t) {
            Some(p) if passages.is_empty() => passages = p,
            _ => question.push(t.as_str()),
        }
    }
    if passages.is_empty() {
        passages = system_texts
            .iter()
            .find_map(|t| parse_block(t))
            .unwrap_or_default();
    }

    let max_tokens = match endpoint {
        Endpoint::ChatCompletions => body
            .get("max_completion_tokens")
            .and_then(Value::as_u64)
            .or_else(|| body.get("max_tokens").and_then(Value::as_u64)),
        Endpoint::Messages | Endpoint::Responses => body.get("max_tokens").and_then(Value::as_u64),
    };
    Prompt {
        passages,
        question: question.join("\n"),
        all_text,
        max_tokens,
    }
}

/// [`read`] on `/v1/responses`: the question is `input` when it is a
/// string, else the last `role: "user"` item's `content` (a string or its
/// `input_text` parts); `instructions` and `system` / `developer` items
/// are the system prompt. A string that starts with the sources block (the
/// gateway keeps a string a string) ends with the question after the
/// block's last blank line.
fn read_responses(body: &Value) -> Prompt {
    let mut system_texts: Vec<String> = body
        .get("instructions")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .into_iter()
        .collect();
    let mut all_text = system_texts.clone();
    let mut user_texts = Vec::new();
    match body.get("input") {
        Some(Value::String(s)) => {
            user_texts = vec![s.clone()];
            all_text.push(s.clone());
        }
        Some(Value::Array(items)) => {
            for item in items {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                let content = item.get("content").map(input_texts).unwrap_or_default();
                if role == "system" || role == "developer" {
                    system_texts.extend(content.iter().cloned());
                }
                if role == "user" {
                    user_texts.clone_from(&content);
                }
                all_text.extend(content);
            }
        }
        _ => {}
    }
    let mut passages = Vec::new();
    let mut question = Vec::new();
    for t in &user_texts {
        match parse_block(t) {
            Some(p) if passages.is_empty() => match t.rsplit_once("\n\n") {
                // One string: the block, a blank line, the question.
                Some((block, q)) if user_texts.len() == 1 && parse_block(block).is_some() => {
                    passages = parse_block(block).unwrap_or_default();
                    question.push(q);
                }
                _ => passages = p,
            },
            _ => question.push(t.as_str()),
        }
    }
    if passages.is_empty() {
        passages = system_texts
            .iter()
            .find_map(|t| parse_block(t))
            .unwrap_or_default();
    }
    Prompt {
        passages,
        question: question.join("\n"),
        all_text,
        max_tokens: body.get("max_output_tokens").and_then(Value::as_u64),
    }
}

/// The texts of a Responses `content` value: the string itself, or the
/// `text` of each `input_text` / `output_text` part.
fn input_texts(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(parts) => parts
            .iter()
            .filter(|p| {
                matches!(
                    p.get("type").and_then(Value::as_str),
                    Some("input_text" | "output_text")
                )
            })
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// The texts of a `content` or `system` value: the string itself, or the
/// `text` of each `{"type":"text"}` part / block (other parts ignored).
fn texts(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Parses a sources block (see the module docs). `None` when `text` has no
/// `[1] …` line followed by a `URL:` line.
pub(crate) fn parse_block(text: &str) -> Option<Vec<Passage>> {
    parse(text, false).map(|(p, _)| p)
}

/// [`parse_block`], and with `then_question` the text is a string content
/// `<block><question>`: the last source's text ends at the first blank
/// line, and what follows (trimmed) is returned as the question (`""`
/// without one).
fn parse(text: &str, then_question: bool) -> Option<(Vec<Passage>, &str)> {
    let lines: Vec<&str> = text.split('\n').collect();
    // (line index of the `[n]` line, title, url) of each block.
    let mut heads: Vec<(usize, String, String)> = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        let expected = heads.len() + 1;
        let title = lines[i]
            .strip_prefix(&format!("[{expected}]"))
            .and_then(|rest| {
                if rest.is_empty() {
                    Some("")
                } else {
                    rest.strip_prefix(' ')
                }
            });
        let url = lines[i + 1].strip_prefix("URL:");
        if let (Some(title), Some(url)) = (title, url) {
            heads.push((i, title.trim().to_owned(), url.trim().to_owned()));
            i += 2;
        } else {
            i += 1;
        }
    }
    if heads.is_empty() {
        return None;
    }
    let mut last_text = None;
    let mut question = "";
    if then_question {
        let (at, _, _) = &heads[heads.len() - 1];
        // Byte offset of the line after the last `URL:` line.
        let off: usize = lines[..(at + 2).min(lines.len())]
            .iter()
            .map(|l| l.len() + 1)
            .sum();
        let tail = text.get(off.min(text.len())..).unwrap_or("");
        if let Some(i) = tail.find("\n\n") {
            last_text = Some(tail[..i].trim().to_owned());
            question = tail[i + 2..].trim();
        }
    }
    let mut passages: Vec<Passage> = heads
        .iter()
        .enumerate()
        .map(|(k, (at, title, url))| {
            let end = heads.get(k + 1).map_or(lines.len(), |h| h.0);
            let text = lines[at + 2..end].join("\n");
            Passage {
                number: u32::try_from(k + 1).unwrap_or(u32::MAX),
                title: title.clone(),
                url: url.clone(),
                text: text.trim().to_owned(),
            }
        })
        .collect();
    if let (Some(t), Some(p)) = (last_text, passages.last_mut()) {
        p.text = t;
    }
    Some((passages, question))
}

#[cfg(test)]
mod tests {
    use super::*;
    use citestream::request::{InjectOptions, Placement, inject};
    use citestream::sources::{Source, Sources};

    fn source(title: &str, url: &str, text: &str) -> Source {
        Source {
            title: Some(title.into()),
            url: Some(url.into()),
            text: Some(text.into()),
            ..Default::default()
        }
    }

    fn two() -> Sources {
        Sources::new(vec![
            source("Alpha", "https://a/", "First line.\n\nSecond paragraph."),
            source("", "", ""),
        ])
    }

    fn injected(endpoint: Endpoint, body: &str, placement: Placement) -> Value {
        let opts = InjectOptions {
            placement,
            ..InjectOptions::default()
        };
        let out = inject(endpoint, body.as_bytes(), &two(), &opts).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    fn expected() -> Vec<Passage> {
        vec![
            Passage {
                number: 1,
                title: "Alpha".into(),
                url: "https://a/".into(),
                text: "First line.\n\nSecond paragraph.".into(),
            },
            Passage {
                number: 2,
                ..Passage::default()
            },
        ]
    }

    #[test]
    fn chat_user_message_string_content() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"old"},{"role":"assistant","content":"a"},{"role":"user","content":"Why?"}]}"#;
        let p = read(
            Endpoint::ChatCompletions,
            &injected(Endpoint::ChatCompletions, body, Placement::UserMessage),
        );
        assert_eq!(p.passages, expected());
        assert_eq!(p.question, "Why?");
        assert_eq!(p.max_tokens, None);
    }

    #[test]
    fn string_content_block_then_a_question_of_paragraphs() {
        let body = r#"{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"Why?\n\nAnd how?"}]}"#;
        for ep in [Endpoint::ChatCompletions, Endpoint::Messages] {
            let v = injected(ep, body, Placement::UserMessage);
            assert!(v["messages"][0]["content"].is_string());
            let p = read(ep, &v);
            assert_eq!(p.passages, expected(), "{ep:?}");
            assert_eq!(p.question, "Why?\n\nAnd how?");
        }
        // One-line source texts (as the search adapter makes them), the
        // last one not empty.
        let s = Sources::new(vec![source("A", "u", "x y."), source("B", "w", "z.")]);
        let out = inject(
            Endpoint::ChatCompletions,
            br#"{"messages":[{"role":"user","content":"q"}]}"#,
            &s,
            &InjectOptions::default(),
        )
        .unwrap();
        let p = read(
            Endpoint::ChatCompletions,
            &serde_json::from_slice(&out).unwrap(),
        );
        assert_eq!(p.question, "q");
        let texts: Vec<&str> = p.passages.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(texts, ["x y.", "z."]);
    }

    #[test]
    fn chat_system_placement() {
        let body = r#"{"messages":[{"role":"user","content":[{"type":"text","text":"Q1"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"Q2"}]}],"max_tokens":7}"#;
        let p = read(
            Endpoint::ChatCompletions,
            &injected(Endpoint::ChatCompletions, body, Placement::System),
        );
        assert_eq!(p.passages, expected());
        assert_eq!(p.question, "Q1\nQ2");
        assert_eq!(p.max_tokens, Some(7));
    }

    #[test]
    fn messages_both_placements() {
        let body = r#"{"model":"m","max_tokens":64,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Why?"}]}]}"#;
        for placement in [Placement::UserMessage, Placement::System] {
            let p = read(
                Endpoint::Messages,
                &injected(Endpoint::Messages, body, placement),
            );
            assert_eq!(p.passages, expected(), "{placement:?}");
            assert_eq!(p.question, "Why?");
            assert_eq!(p.max_tokens, Some(64));
            assert!(p.all_text.iter().any(|t| t.starts_with("Be brief.")));
        }
    }

    #[test]
    fn no_block() {
        assert_eq!(parse_block("Cite like [1] please.\n[1] x\nno url"), None);
        let p = read(
            Endpoint::ChatCompletions,
            &serde_json::json!({"messages":[{"role":"user","content":"hi"}]}),
        );
        assert!(p.passages.is_empty());
        assert_eq!(p.question, "hi");
        let p = read(Endpoint::Messages, &serde_json::json!({"messages": 3}));
        assert_eq!(p, Prompt::default());
    }

    #[test]
    fn numbers_must_follow_in_order() {
        let text = "[1] A\nURL: u\nx\n\n[3] C\nURL: w\nz";
        let p = parse_block(text).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].text, "x\n\n[3] C\nURL: w\nz");
    }
}

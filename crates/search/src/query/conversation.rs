//! A conversation file into a [`SearchQuery`], for `citestream search
//! --conversation FILE`: what the gateway would search for that request.
//!
//! The file is a request body (`/v1/chat/completions`, `/v1/messages` or
//! `/v1/responses`: one with a top-level `system` is read as
//! `/v1/messages`, one with `input` and no `messages` as `/v1/responses`),
//! or its `messages` array alone. It is read by the core's request inspection
//! ([`citestream::request::inspect`]), as every host reads a request, with
//! `web_search` set to true (appended last, so it wins over one the body
//! has).

use std::fmt;

use citestream::request::{Endpoint, inspect};

use crate::SearchQuery;

/// Why a conversation file gives no query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversationError {
    message: String,
}

impl fmt::Display for ConversationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConversationError {}

fn error(message: impl Into<String>) -> ConversationError {
    ConversationError {
        message: message.into(),
    }
}

/// The search query of a conversation file's bytes (see the module docs).
///
/// # Errors
///
/// A [`ConversationError`] when the file is not a JSON object or array, is
/// refused by the request inspection (its
/// message), or has no last user message with text.
pub fn conversation_query(file: &[u8]) -> Result<SearchQuery, ConversationError> {
    let text = std::str::from_utf8(file).map_err(|e| error(format!("not UTF-8: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| error(format!("not JSON: {e}")))?;
    let trimmed = text.trim();
    let (endpoint, body) = match &value {
        serde_json::Value::Array(_) => (
            Endpoint::ChatCompletions,
            format!("{{\"messages\":{trimmed},\"web_search\":true}}"),
        ),
        serde_json::Value::Object(o) => {
            let endpoint = if o.contains_key("input") && !o.contains_key("messages") {
                Endpoint::Responses
            } else if o.contains_key("system") {
                Endpoint::Messages
            } else {
                Endpoint::ChatCompletions
            };
            let open = &trimmed[..trimmed.len() - 1]; // without the closing `}`
            let sep = if o.is_empty() { "" } else { "," };
            (endpoint, format!("{open}{sep}\"web_search\":true}}"))
        }
        _ => {
            return Err(error(
                "not a request body (a JSON object) or a messages array",
            ));
        }
    };
    let inspection = inspect(endpoint, body.into_bytes()).map_err(|e| error(e.message()))?;
    inspection
        .query()
        .cloned()
        .ok_or_else(|| error("no user message with text: nothing to search"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_and_arrays() {
        let chat = br#"{"model":"m","web_search":false,"messages":[
            {"role":"system","content":"Be brief."},
            {"role":"user","content":"What is the capital of Peru?"},
            {"role":"assistant","content":[{"type":"text","text":"Lima [1]."}]},
            {"role":"user","content":[{"type":"text","text":"And its population?"}]}]}"#;
        let q = conversation_query(chat).unwrap();
        assert_eq!(q.text, "And its population?");
        let roles: Vec<_> = q
            .context
            .iter()
            .map(|t| (t.role.as_str(), t.text.as_str()))
            .collect();
        assert_eq!(
            roles,
            [
                ("system", "Be brief."),
                ("user", "What is the capital of Peru?"),
                ("assistant", "Lima [1].")
            ]
        );

        let messages = br#"{"model":"m","max_tokens":5,"system":[{"type":"text","text":"S"}],
            "messages":[{"role":"user","content":"Kenya?"},{"role":"assistant","content":"Nairobi."},
            {"role":"user","content":"climate?"}]}"#;
        let q = conversation_query(messages).unwrap();
        assert_eq!(q.text, "climate?");
        assert_eq!(q.context[0].role, "system");
        assert_eq!(q.context.len(), 3);

        let responses = br#"{"model":"m","input":[{"role":"user","content":"Kenya?"},
            {"role":"assistant","content":"Nairobi."},{"role":"user","content":"climate?"}]}"#;
        let q = conversation_query(responses).unwrap();
        assert_eq!(q.text, "climate?");
        let q = conversation_query(br#"{"model":"m","input":"Lisbon weather?"}"#).unwrap();
        assert_eq!(q.text, "Lisbon weather?");

        let array = br#" [{"role":"user","content":"Kenya?"},{"role":"assistant","content":"Nairobi."},{"role":"user","content":"climate?"}] "#;
        let q = conversation_query(array).unwrap();
        assert_eq!(q.text, "climate?");
        assert_eq!(q.context.len(), 2);
    }

    #[test]
    fn refusals_say_why() {
        for (file, why) in [
            (&b"nope"[..], "not JSON"),
            (b"42", "not a request body"),
            (b"{}", "no user message"),
            (b"[]", "no user message"),
            (
                br#"[{"role":"assistant","content":"x"}]"#,
                "no user message",
            ),
            (b"\xff", "not UTF-8"),
        ] {
            let e = conversation_query(file).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}

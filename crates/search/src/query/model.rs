//! `search.query = "model"`: a chat model writes the query.
//!
//! One non-streamed `POST {base_url}/v1/chat/completions` (OpenAI-shaped;
//! a `base_url` ending in `/v1` is not doubled) to `[search.query_model]`,
//! never to the grounded request's upstream: a system message asking for
//! one search query, and a user message with the conversation (the last
//! 12 `user`/`assistant` turns, each cut to its last 1000 characters;
//! system and developer turns are not sent) and the question. `temperature`
//! 0, `max_tokens` 64, `Authorization: Bearer <api_key>` when a key is set.
//!
//! The answer is `choices[0].message.content`: its first non-empty line,
//! without surrounding quotes or a `query:` label, cut like the question
//! (`search.max_query_chars`). Anything else is a [`ModelError`]: a
//! transport error, a non-2xx status, an answer that is not JSON, has no
//! content, is larger than 1 MiB, or has no letter or digit — and then the
//! caller ([`crate::Search::form`]) falls back to `context`. The timeout
//! (`search.query_timeout`) is applied by the caller.

use std::fmt;

use serde_json::{Value, json};

use super::question_end;
use crate::config::QueryModelConfig;
use crate::{SearchQuery, SetupError};

/// The instruction sent as the system message.
const INSTRUCTION: &str = "You write web search queries. Given a conversation, answer with one \
search query that finds sources for the last user message: name its subject (resolve words \
such as \"it\", \"they\", \"there\" from the conversation), a few keywords, no quotes, no \
explanation, nothing else.";

/// The largest answer read: 1 MiB.
const MAX_ANSWER: usize = 1 << 20;

/// The configured query model.
#[derive(Debug)]
pub(crate) struct QueryModel {
    url: String,
    api_key: String,
    model: String,
    client: crate::http::HttpClient,
}

/// Why the model gave no query; the label is logged.
#[derive(Debug)]
pub(crate) struct ModelError {
    label: &'static str,
    detail: String,
}

impl ModelError {
    fn new(label: &'static str, detail: impl Into<String>) -> ModelError {
        ModelError {
            label,
            detail: detail.into(),
        }
    }

    /// `transport`, `status`, `body`, `empty` (or `timeout`, made by the
    /// caller).
    pub(crate) fn label(&self) -> &'static str {
        self.label
    }

    pub(crate) fn timeout() -> ModelError {
        ModelError::new("timeout", "no answer within search.query_timeout")
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.label, self.detail)
    }
}

impl QueryModel {
    /// Checks `[search.query_model]` (`base_url` and `model` are required).
    /// Its HTTP client trusts what `tls` trusts (the host's `[tls]`), goes
    /// through the environment's proxy and resends once on a fresh
    /// connection, as the remote providers' do ([`crate::http`]).
    pub(crate) fn new(
        config: &QueryModelConfig,
        tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
        resends: &crate::http::Resends,
    ) -> Result<QueryModel, SetupError> {
        for (key, value) in [("base_url", &config.base_url), ("model", &config.model)] {
            if value.is_empty() {
                return Err(SetupError::new(format!(
                    "search.query_model.{key} is required for search.query = \"model\""
                )));
            }
        }
        crate::setup::check_url(&config.base_url).map_err(|e| {
            SetupError::new(format!(
                "search.query_model.base_url = {:?}: {e}",
                config.base_url
            ))
        })?;
        let base = config.base_url.trim_end_matches('/');
        let url = if base.ends_with("/v1") {
            format!("{base}/chat/completions")
        } else {
            format!("{base}/v1/chat/completions")
        };
        let client =
            crate::http::client(tls, resends, crate::http::Caller::QueryModel).map_err(|e| {
                SetupError::new(format!(
                    "search.query_model: cannot build the HTTP client: {e}"
                ))
            })?;
        Ok(QueryModel {
            url,
            api_key: config.api_key.clone(),
            model: config.model.clone(),
            client,
        })
    }

    /// Asks the model for the query of `query`.
    pub(crate) async fn ask(
        &self,
        query: &SearchQuery,
        max_chars: usize,
    ) -> Result<String, ModelError> {
        let body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": INSTRUCTION},
                {"role": "user", "content": prompt(query, max_chars)},
            ],
            "stream": false,
            "temperature": 0,
            "max_tokens": 64,
        });
        let mut req = self.client.pooled.post(&self.url).json(&body);
        if !self.api_key.is_empty() {
            req = req.bearer_auth(&self.api_key);
        }
        let mut resp = crate::http::send(&self.client, req)
            .await
            .map_err(|e| ModelError::new("transport", e.to_string()))?;
        let status = resp.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| ModelError::new("transport", e.to_string()))?
        {
            if bytes.len() + chunk.len() > MAX_ANSWER {
                return Err(ModelError::new("body", "the answer is larger than 1 MiB"));
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(ModelError::new(
                "status",
                format!("HTTP {}", status.as_u16()),
            ));
        }
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ModelError::new("body", format!("the answer is not JSON: {e}")))?;
        let content = value
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| ModelError::new("body", "no choices[0].message.content"))?;
        clean(content, max_chars).ok_or_else(|| ModelError::new("empty", "no query in the answer"))
    }
}

/// The user message: the conversation, then the question.
fn prompt(query: &SearchQuery, max_chars: usize) -> String {
    let turns: Vec<_> = query
        .context
        .iter()
        .filter(|t| t.role == "user" || t.role == "assistant")
        .collect();
    let mut out = String::from("Conversation:\n");
    for t in &turns[turns.len().saturating_sub(12)..] {
        out.push_str(&t.role);
        out.push_str(": ");
        out.push_str(question_end(&t.text, 1000));
        out.push('\n');
    }
    out.push_str("\nLast user message: ");
    out.push_str(question_end(&query.text, max_chars));
    out
}

/// The query in a model's answer, if there is one.
fn clean(content: &str, max_chars: usize) -> Option<String> {
    let line = content.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = ["search query:", "query:"]
        .iter()
        .find_map(|p| {
            line.get(..p.len())
                .filter(|h| h.eq_ignore_ascii_case(p))
                .map(|_| line[p.len()..].trim())
        })
        .unwrap_or(line);
    let line =
        line.trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '“' | '”') || c.is_whitespace());
    let q = question_end(line, max_chars);
    q.chars().any(char::is_alphanumeric).then(|| q.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_cleaned() {
        assert_eq!(
            clean("Peru population", 100).as_deref(),
            Some("Peru population")
        );
        assert_eq!(
            clean("\n  \"Peru population\"\nbecause…", 100).as_deref(),
            Some("Peru population")
        );
        assert_eq!(
            clean("Query: Peru population", 100).as_deref(),
            Some("Peru population")
        );
        assert_eq!(clean("Search query: “Lima”", 100).as_deref(), Some("Lima"));
        assert_eq!(clean("", 100), None);
        assert_eq!(clean(" \n \"\" \n", 100), None);
        assert_eq!(clean("?!...", 100), None);
        assert_eq!(clean("a b c d", 3).as_deref(), Some("c d"));
    }

    #[test]
    fn setup_needs_url_and_model() {
        let mut c = QueryModelConfig::default();
        assert!(
            QueryModel::new(&c, None, &Default::default())
                .unwrap_err()
                .to_string()
                .contains("base_url")
        );
        c.base_url = "http://127.0.0.1:1".into();
        assert!(
            QueryModel::new(&c, None, &Default::default())
                .unwrap_err()
                .to_string()
                .contains("model")
        );
        c.model = "m".into();
        assert_eq!(
            QueryModel::new(&c, None, &Default::default()).unwrap().url,
            "http://127.0.0.1:1/v1/chat/completions"
        );
        c.base_url = "http://127.0.0.1:1/v1/".into();
        assert_eq!(
            QueryModel::new(&c, None, &Default::default()).unwrap().url,
            "http://127.0.0.1:1/v1/chat/completions"
        );
        c.base_url = "ftp://x".into();
        assert!(QueryModel::new(&c, None, &Default::default()).is_err());
    }
}

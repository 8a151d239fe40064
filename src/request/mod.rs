//! The request side: the `web_search` switch, the search query, and putting
//! the sources in front of the model (docs/reference/request.md).
//!
//! Everything here is sans-IO: bytes of a request body in, bytes of the body
//! to forward upstream out. Bodies are read with serde_json (a cold path) and
//! written by splicing bytes into the original, never by re-serializing, so
//! every byte the gateway does not own reaches the upstream unchanged (key
//! order, number spelling, whitespace, unknown fields).
//!
//! * [`inspect`] validates a `/v1/chat/completions`, `/v1/messages` or
//!   `/v1/responses` body,
//!   reads `web_search` and removes it, extracts the search query and the
//!   settings the response rewriter needs ([`Inspection`]).
//! * [`inject`](fn@inject) puts numbered sources into a body ([`InjectOptions`],
//!   [`Template`], [`Placement`]).
//! * [`crate::flow`] (one level up) ties inspection, the daily quota ([`crate::quota`]) and
//!   injection together for an embedding gateway.
//!
//! # Example
//! ```
//! use citestream::request::{inspect, Endpoint};
//!
//! let body = br#"{"model":"m","web_search":true,"messages":[{"role":"user","content":"Lisbon weather?"}]}"#;
//! let req = inspect(Endpoint::ChatCompletions, body.to_vec()).unwrap();
//! assert!(req.web_search());
//! assert_eq!(req.query().unwrap().text, "Lisbon weather?");
//! assert_eq!(&req.body()[..], br#"{"model":"m","messages":[{"role":"user","content":"Lisbon weather?"}]}"#);
//! ```

use std::fmt;
use std::ops::Range;

use bytes::Bytes;

mod inject;
mod responses;

pub use inject::{
    InjectError, InjectOptions, PLACEHOLDERS, Placement, Template, inject, render_sources,
};

use crate::json::{self, Field, push_json_str};

pub use crate::endpoint::Endpoint;

/// What was wrong with a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestErrorKind {
    /// The body is not valid JSON.
    NotJson,
    /// The body is JSON but not an object.
    NotObject,
    /// `web_search` is present with a value that is not a boolean.
    WebSearchNotBoolean,
}

/// A request the gateway answers itself with a 400 `invalid_request_error`
/// in the endpoint's normal error shape (see [`RequestError::body`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestError {
    endpoint: Endpoint,
    kind: RequestErrorKind,
    message: String,
}

impl RequestError {
    fn new(endpoint: Endpoint, kind: RequestErrorKind, message: String) -> Self {
        RequestError {
            endpoint,
            kind,
            message,
        }
    }

    /// What was wrong.
    #[must_use]
    pub fn kind(&self) -> RequestErrorKind {
        self.kind
    }

    /// The endpoint whose error shape [`RequestError::body`] uses.
    #[must_use]
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    /// The human-readable message put in the error body.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status to answer with: always 400.
    #[must_use]
    pub fn status(&self) -> u16 {
        400
    }

    /// The offending request parameter, when there is one (`web_search`).
    #[must_use]
    pub fn param(&self) -> Option<&'static str> {
        match self.kind {
            RequestErrorKind::WebSearchNotBoolean => Some("web_search"),
            RequestErrorKind::NotJson | RequestErrorKind::NotObject => None,
        }
    }

    /// The JSON error body, ready to send with [`RequestError::status`] and
    /// `content-type: application/json`.
    ///
    /// * chat and responses: `{"error":{"message":…,"type":"invalid_request_error","param":…,"code":null}}`
    /// * messages: `{"type":"error","error":{"type":"invalid_request_error","message":…}}`
    #[must_use]
    pub fn body(&self) -> Vec<u8> {
        let mut out = String::new();
        match self.endpoint {
            Endpoint::ChatCompletions | Endpoint::Responses => {
                out.push_str("{\"error\":{\"message\":");
                push_json_str(&mut out, &self.message);
                out.push_str(",\"type\":\"invalid_request_error\",\"param\":");
                match self.param() {
                    Some(p) => push_json_str(&mut out, p),
                    None => out.push_str("null"),
                }
                out.push_str(",\"code\":null}}");
            }
            Endpoint::Messages => {
                out.push_str("{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":");
                push_json_str(&mut out, &self.message);
                out.push_str("}}");
            }
        }
        out.into_bytes()
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RequestError {}

/// One conversation turn handed to the search as context.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Turn {
    /// `user`, `assistant`, `system`, `developer`, `tool`, … as sent.
    pub role: String,
    /// The turn's text: string content, or its text parts joined with `\n`.
    pub text: String,
}

/// What to search for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchQuery {
    /// The text of the last `user` message (string content, or its text
    /// parts / blocks joined with `\n`; images and other parts ignored).
    pub text: String,
    /// The turns before that message, oldest first, as context (turns
    /// without text are left out). On `/v1/messages` a top-level `system`
    /// comes first with role `system`.
    pub context: Vec<Turn>,
}

/// The result of [`inspect`]: the body to forward, whether to search, and
/// what the response side needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    endpoint: Endpoint,
    web_search: bool,
    body: Bytes,
    query: Option<SearchQuery>,
    stream: bool,
    n: u32,
    include_usage: bool,
    model: Option<String>,
}

impl Inspection {
    /// The top-level `model` when it is a JSON string (decoded; for logs).
    #[must_use]
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The endpoint the body was inspected for.
    #[must_use]
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    /// True when the request asked for web search (`"web_search": true`).
    #[must_use]
    pub fn web_search(&self) -> bool {
        self.web_search
    }

    /// The body to forward upstream: the original bytes with every
    /// `web_search` member (and its separating comma) cut out. When the
    /// body had no `web_search`, this is the input itself (no copy).
    #[must_use]
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Takes the body to forward (see [`Inspection::body`]).
    #[must_use]
    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// The search query, when `web_search` is true and the last `user`
    /// message has text; `None` otherwise (then there is nothing to search).
    #[must_use]
    pub fn query(&self) -> Option<&SearchQuery> {
        self.query.as_ref()
    }

    /// `"stream": true` was sent (anything else counts as false).
    #[must_use]
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// The number of choices requested (`n` on chat; 1 when absent or not a
    /// positive integer, and always 1 on `/v1/messages` and `/v1/responses`). Values above
    /// `u32::MAX` are clamped.
    #[must_use]
    pub fn n(&self) -> u32 {
        self.n
    }

    /// `"stream_options": {"include_usage": true}` was sent (chat only).
    #[must_use]
    pub fn include_usage(&self) -> bool {
        self.include_usage
    }
}

/// Reads a request body for `endpoint`: validates it, reads and removes
/// `web_search`, extracts the query and the response settings.
///
/// * `web_search` must be a JSON boolean when present; `false` or absent
///   means no search. When the key occurs more than once, the last
///   occurrence decides (serde_json's and Python's rule for duplicate keys)
///   and every occurrence is removed.
/// * Removal is a byte splice: the member, the comma that separated it and
///   the whitespace between them go; every other byte stays. Nothing else
///   is touched: a function tool named `web_search`, `web_search_20250305`
///   or `{"type":"web_search"}` tools start no search and are forwarded as
///   they are.
/// * The query is computed only when `web_search` is true.
///
/// Other fields are read leniently (a non-boolean `stream` counts as false,
/// a bad `n` as 1): validating them is the upstream's job.
///
/// # Errors
/// A [`RequestError`] (status 400, endpoint error shape) when the body is
/// not JSON, not a JSON object, or has a non-boolean `web_search`.
///
/// # Panics
/// Never panics, whatever the input.
pub fn inspect(endpoint: Endpoint, body: impl Into<Bytes>) -> Result<Inspection, RequestError> {
    let body: Bytes = body.into();
    let (_, ms) = top_members(endpoint, &body)?;
    let b = &body[..];

    let ws: Vec<usize> = (0..ms.len())
        .filter(|&k| ms[k].key_is(b, "web_search"))
        .collect();
    let web_search = match ws.last() {
        None => false,
        Some(&k) => match ms[k].value_in(b) {
            b"true" => true,
            b"false" => false,
            other => {
                return Err(RequestError::new(
                    endpoint,
                    RequestErrorKind::WebSearchNotBoolean,
                    format!(
                        "Invalid type for 'web_search': expected a boolean, but got {} instead.",
                        json_type_name(other)
                    ),
                ));
            }
        },
    };

    let stream = json::find(b, &ms, "stream").is_some_and(|m| m.value_in(b) == b"true");
    let n = match endpoint {
        Endpoint::Messages | Endpoint::Responses => 1,
        Endpoint::ChatCompletions => json::find(b, &ms, "n")
            .and_then(|m| std::str::from_utf8(m.value_in(b)).ok()?.parse::<u64>().ok())
            .filter(|&n| n >= 1)
            .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX)),
    };
    let include_usage = endpoint == Endpoint::ChatCompletions
        && json::find(b, &ms, "stream_options")
            .and_then(|m| json::members(b, m.member.value_start))
            .is_some_and(|so| {
                json::find(b, &so, "include_usage").is_some_and(|iu| iu.value_in(b) == b"true")
            });

    let model = json::find(b, &ms, "model").and_then(|m| {
        let v = m.value_in(b);
        let inner = v.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
        Some(json::decode_str(inner).into_owned())
    });

    let query = if web_search {
        extract_query(endpoint, b, &ms)
    } else {
        None
    };

    let out = if ws.is_empty() {
        body.clone()
    } else {
        let cuts = removal_ranges(&ms, &ws);
        let mut v = Vec::with_capacity(body.len());
        let mut at = 0;
        for r in cuts {
            v.extend_from_slice(&b[at..r.start]);
            at = r.end;
        }
        v.extend_from_slice(&b[at..]);
        Bytes::from(v)
    };
    Ok(Inspection {
        endpoint,
        web_search,
        body: out,
        query,
        stream,
        n,
        include_usage,
        model,
    })
}

/// Validates `body` and returns the offset of its top-level `{` and its
/// members.
pub(crate) fn top_members(
    endpoint: Endpoint,
    body: &[u8],
) -> Result<(usize, Vec<Field>), RequestError> {
    // JSON text is UTF-8 (RFC 8259); serde_json does not check the bytes of
    // strings it skips, so check the whole body first.
    let text = std::str::from_utf8(body).map_err(|e| {
        RequestError::new(
            endpoint,
            RequestErrorKind::NotJson,
            format!(
                "We could not parse the JSON body of your request: invalid UTF-8 at byte {}",
                e.valid_up_to()
            ),
        )
    })?;
    let v: Result<serde::de::IgnoredAny, _> = serde_json::from_str(text);
    if let Err(e) = v {
        return Err(RequestError::new(
            endpoint,
            RequestErrorKind::NotJson,
            format!("We could not parse the JSON body of your request: {e}"),
        ));
    }
    let start = json::skip_ws(body, 0);
    if body.get(start) != Some(&b'{') {
        return Err(RequestError::new(
            endpoint,
            RequestErrorKind::NotObject,
            "The request body must be a JSON object.".to_owned(),
        ));
    }
    match json::members(body, start) {
        Some(ms) => Ok((start, ms)),
        None => Err(RequestError::new(
            endpoint,
            RequestErrorKind::NotJson,
            "We could not parse the JSON body of your request.".to_owned(),
        )),
    }
}

/// Byte ranges to cut so that the members at indices `removed` (ascending)
/// disappear with their separating commas. See the module tests for the
/// exact rule; the ranges are ascending and disjoint.
fn removal_ranges(ms: &[Field], removed: &[usize]) -> Vec<Range<usize>> {
    if removed.len() == ms.len() {
        // Every member goes: cut from the first key to the last value.
        return match (ms.first(), ms.last()) {
            (Some(f), Some(l)) => std::iter::once(f.member.start()..l.end).collect(),
            _ => Vec::new(),
        };
    }
    let first_kept = (0..ms.len())
        .find(|k| !removed.contains(k))
        .unwrap_or(ms.len());
    removed
        .iter()
        .map(|&k| {
            if k < first_kept {
                // Leading member: take it and the comma after it.
                ms[k].member.start()..ms[k + 1].member.start()
            } else {
                // Take the comma before it (and the whitespace around it).
                ms[k - 1].end..ms[k].end
            }
        })
        .collect()
}

fn json_type_name(v: &[u8]) -> &'static str {
    match v.first() {
        Some(b'"') => "a string",
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'n') => "null",
        Some(b't' | b'f') => "a boolean",
        _ => "a number",
    }
}

/// The decoded text of a `content` value: a string, or the `text` of its
/// `{"type":"text","text":…}` parts / blocks joined with `\n`.
fn content_text(b: &[u8], v: Range<usize>) -> Option<String> {
    parts_text(b, v, &["text"])
}

/// The decoded text of a `content` value: a string, or the `text` of its
/// parts whose `type` is one of `types`, joined with `\n`.
pub(crate) fn parts_text(b: &[u8], v: Range<usize>, types: &[&str]) -> Option<String> {
    match b.get(v.start)? {
        b'"' => json::decode_token(&b[v]),
        b'[' => {
            let mut parts = Vec::new();
            for el in json::elements(b, v.start)? {
                let Some(pm) = json::members(b, el.start) else {
                    continue;
                };
                let is_text = json::find(b, &pm, "type")
                    .and_then(|t| json::decode_token(t.value_in(b)))
                    .is_some_and(|t| types.contains(&t.as_str()));
                if !is_text {
                    continue;
                }
                if let Some(t) =
                    json::find(b, &pm, "text").and_then(|t| json::decode_token(t.value_in(b)))
                {
                    parts.push(t);
                }
            }
            if parts.is_empty() {
                None
            } else {
                Some(parts.join("\n"))
            }
        }
        _ => None,
    }
}

/// One element of `messages` that is an object: its byte range and members.
pub(crate) type Message = (Range<usize>, Vec<Field>);

/// The top-level `messages` array: its byte range and its object elements.
pub(crate) fn messages(b: &[u8], ms: &[Field]) -> Option<(Range<usize>, Vec<Message>)> {
    let m = json::find(b, ms, "messages")?;
    let els = json::elements(b, m.member.value_start)?;
    let msgs = els
        .into_iter()
        .filter_map(|e| json::members(b, e.start).map(|mm| (e, mm)))
        .collect();
    Some((m.value(), msgs))
}

pub(crate) fn role_of(b: &[u8], mm: &[Field]) -> Option<String> {
    json::find(b, mm, "role").and_then(|r| json::decode_token(r.value_in(b)))
}

/// Index (into the message list) of the last message with role `user`.
pub(crate) fn last_user(b: &[u8], msgs: &[Message]) -> Option<usize> {
    msgs.iter()
        .rposition(|(_, mm)| role_of(b, mm).as_deref() == Some("user"))
}

fn extract_query(endpoint: Endpoint, b: &[u8], ms: &[Field]) -> Option<SearchQuery> {
    if endpoint == Endpoint::Responses {
        return responses::query(b, ms);
    }
    let (_, msgs) = messages(b, ms)?;
    let last = last_user(b, &msgs)?;
    let (_, mm) = &msgs[last];
    let text = json::find(b, mm, "content").and_then(|c| content_text(b, c.value()))?;
    if text.trim().is_empty() {
        return None;
    }
    let mut context = Vec::new();
    if endpoint == Endpoint::Messages {
        if let Some(s) = json::find(b, ms, "system").and_then(|s| content_text(b, s.value())) {
            context.push(Turn {
                role: "system".to_owned(),
                text: s,
            });
        }
    }
    for (_, mm) in &msgs[..last] {
        let role = role_of(b, mm).unwrap_or_default();
        if let Some(t) = json::find(b, mm, "content").and_then(|c| content_text(b, c.value())) {
            if !t.is_empty() {
                context.push(Turn { role, text: t });
            }
        }
    }
    Some(SearchQuery { text, context })
}

/// The byte span of the value of the top-level member `name` of the JSON
/// object `body` (the last one when the key repeats, as everywhere in the
/// request side); `None` when `body` is not a valid JSON object or has no
/// such member. Hosts use it to read and splice a forwarded body's `model`
/// (routing, `upstream_model`) without re-serializing it.
///
/// ```
/// let body = br#"{"model":"gpt-4o","messages":[]}"#;
/// let span = citestream::request::member_span(body, "model").unwrap();
/// assert_eq!(&body[span], br#""gpt-4o""#);
/// assert!(citestream::request::member_span(b"[1]", "model").is_none());
/// ```
#[must_use]
pub fn member_span(body: &[u8], name: &str) -> Option<Range<usize>> {
    json::scan_value(body, json::skip_ws(body, 0), 0).ok()?;
    let ms = json::members(body, json::skip_ws(body, 0))?;
    json::find(body, &ms, name).map(Field::value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(s: &str) -> String {
        let r = inspect(Endpoint::ChatCompletions, s.as_bytes().to_vec()).unwrap();
        String::from_utf8(r.body().to_vec()).unwrap()
    }

    #[test]
    fn lone_surrogates_are_accepted() {
        let r = inspect(
            Endpoint::ChatCompletions,
            br#"{"web_search":true,"messages":[{"role":"user","content":"a\ud800b"}]}"#.to_vec(),
        )
        .unwrap();
        assert_eq!(r.query().unwrap().text, "a\u{FFFD}b");
    }

    #[test]
    fn removal_positions() {
        assert_eq!(strip(r#"{"web_search":true}"#), "{}");
        assert_eq!(strip(r#"{ "web_search" : true }"#), "{  }");
        assert_eq!(strip(r#"{"web_search":true,"a":1}"#), r#"{"a":1}"#);
        assert_eq!(strip(r#"{"a":1,"web_search":true}"#), r#"{"a":1}"#);
        assert_eq!(
            strip(r#"{"a":1 , "web_search":true , "b":2}"#),
            r#"{"a":1 , "b":2}"#
        );
        assert_eq!(
            strip(r#"{"web_search":true,"web_search":false,"a":1}"#),
            r#"{"a":1}"#
        );
        assert_eq!(
            strip(r#"{"a":1,"web_search":true,"web_search":false}"#),
            r#"{"a":1}"#
        );
        assert_eq!(
            strip(r#"{"web_search":true,"a":1,"web_search":true}"#),
            r#"{"a":1}"#
        );
        assert_eq!(strip(r#"{"web_search":true,"web_search":true}"#), r#"{}"#);
    }
}

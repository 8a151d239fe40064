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

use std::ops::Range;

use bytes::Bytes;

mod error;
mod inject;
mod query;
mod read;
mod responses;

pub use error::{RequestError, RequestErrorKind};
pub use query::{SearchQuery, Turn};
use read::content_text;
pub(crate) use read::{last_user, messages, role_of, top_members};

pub use inject::{
    InjectError, InjectOptions, PLACEHOLDERS, Placement, Template, inject, render_sources,
};

use crate::json::{self, Field};

pub use crate::endpoint::Endpoint;

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

//! Reading the parts of a request body every endpoint shares, without
//! re-serializing it: the top-level members (validating the body), the
//! `messages` array, a message's role, a content value's text. A leaf:
//! the inspection, the injection and the Responses reader use it.

use std::ops::Range;

use super::error::{RequestError, RequestErrorKind};
use crate::endpoint::Endpoint;
use crate::json::{self, Field};

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

/// The decoded text of a `content` value: a string, or the `text` of its
/// `{"type":"text","text":…}` parts / blocks joined with `\n`.
pub(super) fn content_text(b: &[u8], v: Range<usize>) -> Option<String> {
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

//! The request side of `/v1/responses` (the OpenAI Responses API): where the
//! question and the conversation are in `input`, and where the sources go.
//!
//! # Rules
//!
//! * **The question** is `input` when it is a string; else the last item of
//!   the `input` array with `"role": "user"`: its `content` string, or the
//!   `text` of its `input_text` parts joined with `\n` (images, files and
//!   other parts ignored). Any other `input` (absent, a number, an object,
//!   an array without a user item, a user item without text) gives no
//!   question, so nothing is searched.
//! * **The conversation** (the search's context) is the message items before
//!   that one with role `user` or `assistant`, oldest first: their `content`
//!   string or their `input_text` / `output_text` parts. `instructions` and
//!   `system` / `developer` items are not conversation; neither are tool
//!   calls, their outputs, reasoning or other non-message items. With
//!   `previous_response_id` or `conversation` the earlier turns live
//!   upstream: the context is what the request holds.
//! * **Injection** puts the sources block in front of the question's text:
//!   a string `input` stays a string (`"<block>\n\n<question>"`: the
//!   default template ends with the last source's text, so the blank line
//!   keeps the question its own paragraph), a string `content` stays a
//!   string (the same way), a `content` array gets an `input_text` part
//!   in front. Never into `instructions` (the upstream echoes them in every
//!   response object), whatever the placement option says: the block goes
//!   with the question on this endpoint.
//!
//! Every other byte of the body is kept (a splice, as for the other
//! endpoints).

use std::ops::Range;

use super::query::{SearchQuery, Turn};
use super::read::{parts_text, role_of};
use crate::json::{self, Field};

/// The `input` member's value range.
fn input(b: &[u8], ms: &[Field]) -> Option<Range<usize>> {
    json::find(b, ms, "input").map(Field::value)
}

/// The question text and the conversation before it.
pub(super) fn query(b: &[u8], ms: &[Field]) -> Option<SearchQuery> {
    let v = input(b, ms)?;
    match b.get(v.start)? {
        b'"' => {
            let text = json::decode_token(&b[v])?;
            (!text.trim().is_empty()).then(|| SearchQuery {
                text,
                context: Vec::new(),
            })
        }
        b'[' => {
            let items = items(b, v.start)?;
            let last = last_user(b, &items)?;
            let text = item_text(b, &items[last].1, &["input_text"])?;
            if text.trim().is_empty() {
                return None;
            }
            let context = items[..last]
                .iter()
                .filter_map(|(_, mm)| {
                    let role = role_of(b, mm)?;
                    if role != "user" && role != "assistant" {
                        return None;
                    }
                    let text = item_text(b, mm, &["input_text", "output_text"])?;
                    (!text.is_empty()).then_some(Turn { role, text })
                })
                .collect();
            Some(SearchQuery { text, context })
        }
        _ => None,
    }
}

/// The object elements of the `input` array at `b[at]`, with their members.
fn items(b: &[u8], at: usize) -> Option<Vec<(Range<usize>, Vec<Field>)>> {
    let els = json::elements(b, at)?;
    Some(
        els.into_iter()
            .filter_map(|e| json::members(b, e.start).map(|mm| (e, mm)))
            .collect(),
    )
}

/// Whether an item is a message (no `type`, or `"type": "message"`).
fn is_message(b: &[u8], mm: &[Field]) -> bool {
    json::find(b, mm, "type")
        .is_none_or(|t| json::decode_token(t.value_in(b)).as_deref() == Some("message"))
}

/// The index of the last message item with role `user`.
fn last_user(b: &[u8], items: &[(Range<usize>, Vec<Field>)]) -> Option<usize> {
    items
        .iter()
        .rposition(|(_, mm)| is_message(b, mm) && role_of(b, mm).as_deref() == Some("user"))
}

/// A message item's text: its `content` string, or its parts of `types`.
fn item_text(b: &[u8], mm: &[Field], types: &[&str]) -> Option<String> {
    if !is_message(b, mm) {
        return None;
    }
    let c = json::find(b, mm, "content")?;
    parts_text(b, c.value(), types)
}

/// The edit that puts the sources block (`lit`, a JSON string literal) in
/// front of the question's text.
///
/// `None` when the body has no question (no string `input` and no user
/// item in it).
pub(super) fn inject_edit(b: &[u8], ms: &[Field], lit: &str) -> Option<(Range<usize>, String)> {
    let v = input(b, ms)?;
    match b.get(v.start) {
        Some(b'"') => Some((v.clone(), prepend_str(lit, &b[v]))),
        Some(b'[') => {
            let items = items(b, v.start)?;
            let last = last_user(b, &items)?;
            let (r, mm) = &items[last];
            Some(item_edit(b, r, mm, lit))
        }
        _ => None,
    }
}

/// The edit of the question's item (at `r`, members `mm`).
fn item_edit(b: &[u8], r: &Range<usize>, mm: &[Field], lit: &str) -> (Range<usize>, String) {
    let part = format!("{{\"type\":\"input_text\",\"text\":{lit}}}");
    let Some(c) = json::find(b, mm, "content") else {
        let at = r.start + 1;
        let sep = if mm.is_empty() { "" } else { "," };
        return (at..at, format!("\"content\":[{part}]{sep}"));
    };
    let cv = c.value();
    match b.get(cv.start) {
        Some(b'"') => (cv.clone(), prepend_str(lit, &b[cv])),
        Some(b'[') => {
            let at = cv.start + 1;
            let empty = json::elements(b, cv.start).is_none_or(|e| e.is_empty());
            if empty {
                (at..at, part)
            } else {
                (at..at, format!("{part},"))
            }
        }
        _ => (cv, format!("[{part}]")),
    }
}

/// The string literal `lit` with a blank line and the string token `orig`
/// appended to its text: both raw JSON bodies joined, no decoding.
fn prepend_str(lit: &str, orig: &[u8]) -> String {
    let mut s = String::with_capacity(lit.len() + orig.len());
    s.push_str(&lit[..lit.len() - 1]);
    s.push_str("\\n\\n");
    s.push_str(&String::from_utf8_lossy(&orig[1..]));
    s
}

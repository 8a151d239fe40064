//! Putting numbered sources in front of the model.

use std::fmt;
use std::ops::Range;

use crate::sources::{Source, Sources};

use super::Endpoint;
use super::error::RequestError;
use crate::json::{self, Field, push_json_str};

/// Where [`inject`] puts the sources block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Placement {
    /// In front of the last `user` message (the default): the earlier
    /// prompt prefix stays cache-friendly, and chat templates that refuse a
    /// system message in the middle still work. A string content stays a
    /// string, `<block><question>` (the escaped block spliced in after the
    /// opening quote, the original escaped bytes kept); an array of parts
    /// gets a `{"type":"text","text":<block>}` part in front; a missing or
    /// `null` content becomes `[<that part>]`. A body without a `user`
    /// message falls back to [`Placement::System`].
    #[default]
    UserMessage,
    /// Responses: the question's text always (see [`inject`]).
    ///
    /// Chat: a `{"role":"system","content":<block>}` message at the front of
    /// `messages`. Messages: the block appended to `system`: a string
    /// `system` stays a string, `<system>\n\n<block>`; an array gets a text
    /// block at its end; an absent or `null` one becomes the block as a
    /// string.
    System,
}

/// The text the model sees: `header`, then each source rendered with
/// `source` and joined with `separator`, then `footer`.
///
/// `source` may contain the placeholders `{n}` (the footnote number, from
/// 1), `{title}`, `{url}`, `{text}`, `{heading}`, `{author}`, `{year}` and
/// `{reference}`; a missing field renders as the empty string. Placeholders
/// are replaced in one pass, so a value that itself contains `{title}` is
/// not expanded again; any other `{…}` is kept literally. `header` and
/// `footer` are used as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// Text before the first source: the instruction to cite with `[n]`.
    pub header: String,
    /// One source, with placeholders.
    pub source: String,
    /// Between two rendered sources.
    pub separator: String,
    /// Text after the last source.
    pub footer: String,
}

impl Default for Template {
    fn default() -> Self {
        Template {
            header: "Web search results for the question below, as numbered sources. \
                     Use them to answer. Cite a source by writing its number in square \
                     brackets, like [1], right after each sentence it supports; cite \
                     several as [1][2]. Do not cite sources that do not support the \
                     sentence.\n\n"
                .to_owned(),
            source: "[{n}] {title}\nURL: {url}\n{text}".to_owned(),
            separator: "\n\n".to_owned(),
            footer: "\n\n".to_owned(),
        }
    }
}

/// The placeholders a [`Template`]'s `source` may contain, without braces.
pub const PLACEHOLDERS: [&str; 8] = [
    "n",
    "title",
    "url",
    "text",
    "heading",
    "author",
    "year",
    "reference",
];

impl Template {
    /// The first `{name}` in `source` (a name of ASCII letters, digits
    /// and `_`) that is not one of [`PLACEHOLDERS`], with its braces, when
    /// there is one. [`render_sources`] would keep it literally, which in a
    /// configured template is almost always a typo; other braces (`{}`,
    /// `{"k": 1}`) are plain text.
    ///
    /// # Example
    /// ```
    /// use citestream::request::Template;
    ///
    /// let mut t = Template::default();
    /// assert_eq!(t.unknown_placeholder(), None);
    /// t.source = "[{n}] {titel} {}".into();
    /// assert_eq!(t.unknown_placeholder(), Some("{titel}"));
    /// ```
    #[must_use]
    pub fn unknown_placeholder(&self) -> Option<&str> {
        let src = self.source.as_str();
        src.match_indices('{').find_map(|(open, _)| {
            let close = open + 1 + src[open + 1..].find('}')?;
            let name = &src[open + 1..close];
            let ident =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            (ident && !PLACEHOLDERS.contains(&name)).then(|| &src[open..=close])
        })
    }
}

/// Options of [`inject`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InjectOptions {
    /// Where the block goes.
    pub placement: Placement,
    /// What it says.
    pub template: Template,
}

/// Error of [`inject`]: the body is not a request it can put sources into.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InjectError {
    /// The body is not a JSON object (see [`super::inspect`]).
    Invalid(RequestError),
    /// The body has no `messages` array to put a message into (on
    /// `/v1/responses`: no question, neither a string `input` nor a user
    /// item in it).
    NoMessages,
}

impl fmt::Display for InjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InjectError::Invalid(e) => write!(f, "cannot inject sources: {e}"),
            InjectError::NoMessages => f.write_str("cannot inject sources: no messages array"),
        }
    }
}

impl std::error::Error for InjectError {}

/// Renders the sources block as plain text (not yet JSON-escaped).
///
/// # Example
/// ```
/// use citestream::request::{render_sources, Template};
/// use citestream::sources::{Source, Sources};
///
/// let s = Sources::new(vec![Source { title: Some("T".into()), url: Some("https://t/".into()), ..Default::default() }]);
/// let t = Template { header: "H\n".into(), source: "[{n}] {title} <{url}>".into(), separator: "\n".into(), footer: String::new() };
/// assert_eq!(render_sources(&t, &s), "H\n[1] T <https://t/>");
/// ```
#[must_use]
pub fn render_sources(template: &Template, sources: &Sources) -> String {
    let mut out = template.header.clone();
    for (i, s) in sources.list().iter().enumerate() {
        if i > 0 {
            out.push_str(&template.separator);
        }
        render_one(&mut out, &template.source, i + 1, s);
    }
    out.push_str(&template.footer);
    out
}

fn render_one(out: &mut String, tpl: &str, n: usize, s: &Source) {
    let mut rest = tpl;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open..];
        let close = after.find('}');
        let value: Option<std::borrow::Cow<'_, str>> = close.and_then(|c| {
            fn f(o: &Option<String>) -> Option<std::borrow::Cow<'_, str>> {
                Some(o.as_deref().unwrap_or("").into())
            }
            match &after[1..c] {
                "n" => Some(n.to_string().into()),
                "title" => f(&s.title),
                "url" => f(&s.url),
                "text" => f(&s.text),
                "heading" => f(&s.heading),
                "author" => f(&s.author),
                "year" => f(&s.year),
                "reference" => f(&s.reference),
                _ => None,
            }
        });
        match (value, close) {
            (Some(v), Some(c)) => {
                out.push_str(&v);
                rest = &after[c + 1..];
            }
            _ => {
                out.push('{');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
}

/// Returns `body` with the numbered `sources` put in front of the model as
/// [`InjectOptions`] say. The block is JSON-escaped by serde_json, so any
/// title or snippet (quotes, backslashes, control characters) yields valid
/// JSON; the rest of the body is copied byte for byte around the insertion.
/// With no sources, `body` is returned unchanged.
///
/// Use it on the body [`super::inspect`] returned (without `web_search`).
///
/// On `/v1/responses` the block goes in front of the question's text
/// whatever the placement: a string `input` or `content` stays a string,
/// a parts array gets an `input_text` part in front; never into
/// `instructions`.
///
/// # Example
/// ```
/// use citestream::request::{inject, Endpoint, InjectOptions};
/// use citestream::sources::{Source, Sources};
///
/// let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
/// let s = Sources::new(vec![Source { title: Some("A \"q\"".into()), ..Default::default() }]);
/// let out = inject(Endpoint::ChatCompletions, body, &s, &InjectOptions::default()).unwrap();
/// let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
/// let content = v["messages"][0]["content"].as_str().unwrap();
/// assert!(content.contains("[1] A \"q\"") && content.ends_with("\n\nhi"));
/// ```
///
/// # Errors
/// [`InjectError::Invalid`] when `body` is not a JSON object;
/// [`InjectError::NoMessages`] when it has no `messages` array and the
/// block would go into one (chat without a `user` message), or, on
/// `/v1/responses`, when it has no question.
///
/// # Panics
/// Never panics.
pub fn inject(
    endpoint: Endpoint,
    body: &[u8],
    sources: &Sources,
    options: &InjectOptions,
) -> Result<Vec<u8>, InjectError> {
    let (start, ms) = super::read::top_members(endpoint, body).map_err(InjectError::Invalid)?;
    if sources.is_empty() {
        return Ok(body.to_vec());
    }
    let b = body;
    let mut lit = String::new();
    push_json_str(&mut lit, &render_sources(&options.template, sources));
    if endpoint == Endpoint::Responses {
        let (r, text) =
            super::responses::inject_edit(b, &ms, &lit).ok_or(InjectError::NoMessages)?;
        return Ok(splice(b, r, &text));
    }
    let block_part = format!("{{\"type\":\"text\",\"text\":{lit}}}");

    let msgs = super::read::messages(b, &ms);
    let user = match (options.placement, &msgs) {
        (Placement::UserMessage, Some((_, list))) => {
            super::read::last_user(b, list).map(|i| &list[i])
        }
        _ => None,
    };
    let (r, text) = match (user, endpoint) {
        (Some((mrange, mm)), _) => user_edit(b, mrange, mm, &lit, block_part),
        (None, Endpoint::ChatCompletions) => {
            let Some((arr, list)) = &msgs else {
                return Err(InjectError::NoMessages);
            };
            let at = arr.start + 1;
            let sep = if list.is_empty() && arr_is_empty(b, arr.start) {
                ""
            } else {
                ","
            };
            let message = format!("{{\"role\":\"system\",\"content\":{lit}}}{sep}");
            (at..at, message)
        }
        (None, _) => messages_system_edit(b, start, &ms, lit, block_part),
    };
    Ok(splice(b, r, &text))
}

/// `b` with `r` replaced by `text`.
fn splice(b: &[u8], r: Range<usize>, text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() + text.len());
    out.extend_from_slice(&b[..r.start]);
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&b[r.end..]);
    out
}

/// An edit of a body: the range to replace and its replacement (an empty
/// range inserts).
pub(super) type Edit = (Range<usize>, String);

/// The block in front of the user message `mm` (at `mrange`): spliced into
/// a string content (`lit` is the block as a JSON string), as a first part
/// of an array.
fn user_edit(b: &[u8], mrange: &Range<usize>, mm: &[Field], lit: &str, block_part: String) -> Edit {
    let Some(c) = json::find(b, mm, "content") else {
        let at = mrange.start + 1;
        let sep = if mm.is_empty() { "" } else { "," };
        return (at..at, format!("\"content\":[{block_part}]{sep}"));
    };
    let v = c.value();
    match b.get(v.start) {
        Some(b'"') => {
            let at = v.start + 1;
            (at..at, string_inside(lit).to_owned())
        }
        Some(b'[') => {
            let at = v.start + 1;
            if arr_is_empty(b, v.start) {
                (at..at, block_part)
            } else {
                (at..at, format!("{block_part},"))
            }
        }
        _ => (v, format!("[{block_part}]")),
    }
}

/// The block appended to a Messages body's `system` (members `ms` of the
/// object at `start`).
fn messages_system_edit(
    b: &[u8],
    start: usize,
    ms: &[Field],
    lit: String,
    block_part: String,
) -> Edit {
    let Some(s) = json::find(b, ms, "system") else {
        let end = json::skip_valid(b, start).unwrap_or(b.len());
        let at = end.saturating_sub(1);
        let sep = if ms.is_empty() { "" } else { "," };
        return (at..at, format!("{sep}\"system\":{lit}"));
    };
    let v = s.value();
    match b.get(v.start) {
        Some(b'"') => {
            let at = v.end - 1;
            (at..at, format!("\\n\\n{}", string_inside(&lit)))
        }
        Some(b'[') => {
            let at = v.end - 1;
            let sep = if arr_is_empty(b, v.start) { "" } else { "," };
            (at..at, format!("{sep}{block_part}"))
        }
        _ => (v, lit),
    }
}

/// The escaped characters of a JSON string literal, without its quotes.
fn string_inside(lit: &str) -> &str {
    lit.strip_prefix('"')
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or(lit)
}

fn arr_is_empty(b: &[u8], at: usize) -> bool {
    json::elements(b, at).is_none_or(|e| e.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> Sources {
        Sources::new(vec![Source {
            title: Some("T \"q\"".into()),
            url: Some("u".into()),
            ..Default::default()
        }])
    }

    /// The rendered block's escaped characters (no quotes).
    fn block_inside(opts: &InjectOptions) -> String {
        let mut lit = String::new();
        push_json_str(&mut lit, &render_sources(&opts.template, &src()));
        string_inside(&lit).to_owned()
    }

    /// Injects, checks the output is valid JSON, and returns it with the
    /// rendered block's escaped characters written `B` (so the block as a
    /// JSON string reads `"B"`).
    fn inj(endpoint: Endpoint, body: &str, placement: Placement) -> String {
        let opts = InjectOptions {
            placement,
            ..InjectOptions::default()
        };
        let out = inject(endpoint, body.as_bytes(), &src(), &opts).unwrap();
        let out = String::from_utf8(out).unwrap();
        serde_json::from_str::<serde_json::Value>(&out).unwrap();
        out.replace(&block_inside(&opts), "B")
    }

    const CHAT: Endpoint = Endpoint::ChatCompletions;
    const MSGS: Endpoint = Endpoint::Messages;
    const USER: Placement = Placement::UserMessage;
    const SYSTEM: Placement = Placement::System;

    #[test]
    fn user_message_edits() {
        let part = r#"{"type":"text","text":"B"}"#;
        for (body, want) in [
            // A string stays a string: the block spliced in front, the
            // original escaped bytes kept.
            (
                r#"{"messages":[{"role":"user","content":"q"}]}"#,
                r#"{"messages":[{"role":"user","content":"Bq"}]}"#.to_owned(),
            ),
            (
                r#"{"messages":[{"role":"user","content":"caf\u00e9 \"x\"\n"}]}"#,
                r#"{"messages":[{"role":"user","content":"Bcaf\u00e9 \"x\"\n"}]}"#.to_owned(),
            ),
            (
                r#"{"messages":[{"role":"user","content" : ""}]}"#,
                r#"{"messages":[{"role":"user","content" : "B"}]}"#.to_owned(),
            ),
            (
                r#"{"messages":[{"role":"user","content":[]}]}"#,
                format!(r#"{{"messages":[{{"role":"user","content":[{part}]}}]}}"#),
            ),
            (
                r#"{"messages":[{"role":"user","content":[ {"type":"text","text":"q"}]}]}"#,
                format!(
                    r#"{{"messages":[{{"role":"user","content":[{part}, {{"type":"text","text":"q"}}]}}]}}"#
                ),
            ),
            (
                r#"{"messages":[{"role":"user"}]}"#,
                format!(r#"{{"messages":[{{"content":[{part}],"role":"user"}}]}}"#),
            ),
            (
                r#"{"messages":[{"role":"user","content":null}]}"#,
                format!(r#"{{"messages":[{{"role":"user","content":[{part}]}}]}}"#),
            ),
        ] {
            assert_eq!(inj(CHAT, body, USER), want, "{body}");
            assert_eq!(inj(MSGS, body, USER), want, "{body}");
        }
    }

    #[test]
    fn a_string_content_reads_block_then_question() {
        let opts = InjectOptions::default();
        for q in [
            "q",
            "",
            "caf\u{e9} \"x\"\n\\ \u{1F600} </script>",
            "\u{7f}\u{0}",
        ] {
            let mut body = String::from(r#"{"messages":[{"role":"user","content":"#);
            push_json_str(&mut body, q);
            body.push_str("}]}");
            let out = inject(CHAT, body.as_bytes(), &src(), &opts).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            let want = format!("{}{q}", render_sources(&opts.template, &src()));
            assert_eq!(v["messages"][0]["content"], want.as_str(), "{q:?}");
        }
    }

    #[test]
    fn chat_system_message_goes_first() {
        for (body, want) in [
            (
                r#"{"messages":[{"role":"user","content":"q"}]}"#,
                r#"{"messages":[{"role":"system","content":"B"},{"role":"user","content":"q"}]}"#,
            ),
            (
                r#"{"messages":[]}"#,
                r#"{"messages":[{"role":"system","content":"B"}]}"#,
            ),
            // No user message: the fallback to a system message.
            (
                r#"{"messages":[{"role":"assistant","content":"a"}]}"#,
                r#"{"messages":[{"role":"system","content":"B"},{"role":"assistant","content":"a"}]}"#,
            ),
        ] {
            assert_eq!(inj(CHAT, body, SYSTEM), want, "{body}");
        }
        let none = inject(CHAT, b"{}", &src(), &InjectOptions::default());
        assert_eq!(none, Err(InjectError::NoMessages));
    }

    #[test]
    fn messages_system_edits() {
        let part = r#"{"type":"text","text":"B"}"#;
        for (body, want) in [
            (
                r#"{"messages":[]}"#,
                r#"{"messages":[],"system":"B"}"#.to_owned(),
            ),
            (r#"{}"#, r#"{"system":"B"}"#.to_owned()),
            // A string stays a string: the block after a blank line.
            (
                r#"{"system":"s\u00e9","messages":[]}"#,
                r#"{"system":"s\u00e9\n\nB","messages":[]}"#.to_owned(),
            ),
            (
                r#"{"system":[{"type":"text","text":"s"}]}"#,
                format!(r#"{{"system":[{{"type":"text","text":"s"}},{part}]}}"#),
            ),
            (r#"{"system":[]}"#, format!(r#"{{"system":[{part}]}}"#)),
            (r#"{"system":null}"#, r#"{"system":"B"}"#.to_owned()),
        ] {
            assert_eq!(inj(MSGS, body, SYSTEM), want, "{body}");
        }
    }

    #[test]
    fn unknown_placeholders() {
        let with = |source: &str| Template {
            source: source.into(),
            ..Template::default()
        };
        for ok in [
            "[{n}] {title}\nURL: {url}\n{text} {heading} {author} {year} {reference}",
            "{} { n } {\"k\": 1} {{n}} {n",
            "",
        ] {
            assert_eq!(with(ok).unknown_placeholder(), None, "{ok:?}");
        }
        for (bad, name) in [
            ("{titel}", "{titel}"),
            ("[{n}] {Title}", "{Title}"),
            ("{{snippet}}", "{snippet}"),
            ("{n} {url_2}", "{url_2}"),
        ] {
            assert_eq!(with(bad).unknown_placeholder(), Some(name), "{bad:?}");
        }
    }

    #[test]
    fn no_sources_and_bad_bodies() {
        let body = br#"{"messages":[]}"#;
        let empty = Sources::new(Vec::new());
        let opts = InjectOptions::default();
        assert_eq!(inject(CHAT, body, &empty, &opts).unwrap(), body);
        assert!(matches!(
            inject(CHAT, b"[1]", &src(), &opts),
            Err(InjectError::Invalid(_))
        ));
    }
}

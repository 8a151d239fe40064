//! Request and answer shapes of each remote provider (see
//! `tests/fixtures/INDEX.md` for the documented shapes and the recorded
//! answers the tests replay).
//!
//! | provider | request | results | fields → source |
//! |---|---|---|---|
//! | searxng | `GET {url}/search?q=&format=json` | `results[]` | title, url, content → text, publishedDate → year, author |
//! | perplexity | `POST {url}` `{query, max_results}`, Bearer | `results[]` | title, url, snippet → text, date / last_updated → year |
//! | http | `POST {url}` `{query, count}`, Bearer when set | top-level array | title, link → url, snippet → text |
//! | brave | `GET {url}?q=&count=`, `X-Subscription-Token` | `web.results[]` | title, url, description → text, page_age / age → year |
//! | tavily | `POST {url}` `{query, max_results}`, Bearer | `results[]` | title, url, content → text, published_date → year |
//! | exa | `POST {url}` `{query, numResults, contents.text.maxCharacters}`, `x-api-key` | `results[]` | title, url, text / highlights / summary → text, publishedDate → year, author |
//!
//! Parsing is lenient: a result that is not an object is skipped, a field
//! that is missing or not a string is absent. Only a missing results array
//! is an error.

use reqwest::{Client, RequestBuilder};
use serde_json::{Value, json};

use crate::Source;
use crate::config::ProviderKind;

/// Perplexity, Brave and Tavily take at most 20 results per request.
const MAX_PER_REQUEST: usize = 20;

/// The request for `query`.
pub(super) fn request(
    kind: ProviderKind,
    client: &Client,
    url: &str,
    api_key: &str,
    query: &str,
    max_results: usize,
    text_chars: usize,
) -> RequestBuilder {
    let capped = max_results.clamp(1, MAX_PER_REQUEST);
    let req = match kind {
        ProviderKind::Searxng => {
            let url = format!("{}/search", url.trim_end_matches('/'));
            return client
                .get(url)
                .query(&[("q", query), ("format", "json")])
                .header("accept", "application/json");
        }
        ProviderKind::Brave => {
            return client
                .get(url)
                .query(&[("q", query), ("count", &capped.to_string())])
                .header("accept", "application/json")
                .header("x-subscription-token", api_key);
        }
        ProviderKind::Perplexity => client
            .post(url)
            .json(&json!({"query": query, "max_results": capped})),
        ProviderKind::Tavily => client
            .post(url)
            .json(&json!({"query": query, "max_results": capped})),
        ProviderKind::Http => client
            .post(url)
            .json(&json!({"query": query, "count": max_results})),
        ProviderKind::Exa => {
            let body = json!({
                "query": query,
                "numResults": max_results,
                "contents": {"text": {"maxCharacters": text_chars}},
            });
            return client.post(url).json(&body).header("x-api-key", api_key);
        }
        ProviderKind::Local | ProviderKind::Static => unreachable!("not remote"),
    };
    let req = req.header("accept", "application/json");
    if api_key.is_empty() {
        req
    } else {
        req.bearer_auth(api_key)
    }
}

/// The sources in a 2xx answer.
pub(super) fn parse(kind: ProviderKind, v: &Value) -> Result<Vec<Source>, String> {
    let results = match kind {
        ProviderKind::Http => v.as_array().ok_or("the answer is not a JSON array")?,
        ProviderKind::Brave => match v.pointer("/web/results") {
            Some(r) => r.as_array().ok_or("web.results is not an array")?,
            // Brave leaves `web` out when nothing was found.
            None if v.is_object() => return Ok(Vec::new()),
            None => return Err("the answer is not a JSON object".into()),
        },
        _ => v
            .get("results")
            .and_then(Value::as_array)
            .ok_or("the answer has no results array")?,
    };
    Ok(results
        .iter()
        .filter(|r| r.is_object())
        .map(|r| source(kind, r))
        .collect())
}

/// One result object → a source.
fn source(kind: ProviderKind, r: &Value) -> Source {
    let s = |key: &str| r.get(key).and_then(Value::as_str).map(str::to_owned);
    let first = |keys: &[&str]| keys.iter().find_map(|k| s(k));
    let mut out = Source {
        title: s("title"),
        url: s("url"),
        ..Source::default()
    };
    match kind {
        ProviderKind::Searxng => {
            out.text = s("content");
            out.year = first(&["publishedDate", "pubdate"]);
            out.author = s("author");
        }
        ProviderKind::Perplexity => {
            out.text = s("snippet");
            out.year = first(&["date", "last_updated"]);
        }
        ProviderKind::Http => {
            out.url = s("link");
            out.text = s("snippet");
        }
        ProviderKind::Brave => {
            out.text = s("description");
            out.year = first(&["page_age", "age"]);
        }
        ProviderKind::Tavily => {
            out.text = s("content");
            out.year = s("published_date");
        }
        ProviderKind::Exa => {
            out.text = s("text").or_else(|| highlights(r)).or_else(|| s("summary"));
            out.year = s("publishedDate");
            out.author = s("author");
        }
        ProviderKind::Local | ProviderKind::Static => {}
    }
    out
}

/// Exa's `highlights` (strings) joined with ` … `.
fn highlights(r: &Value) -> Option<String> {
    let h: Vec<&str> = r
        .get("highlights")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    (!h.is_empty()).then(|| h.join(" … "))
}

//! The remote providers against a loopback server replaying recorded
//! provider answers (`tests/fixtures/`, origins in its INDEX.md): the
//! request each provider sends, the sources it returns after the adapter
//! rules, and every failure mode (error statuses, invalid JSON, a slow
//! answer past the timeout, a 50 MB answer, a refused connection).

mod common;

use std::time::Duration;

use citestream_search::{
    EndpointConfig, ProviderKind, Search, SearchConfig, SearchErrorKind, SearchQuery, Source,
};
use common::{Body, Reply, Server, fixture};
use serde_json::{Value, json};

const KEY: &str = "test-key-123";

fn config(kind: ProviderKind, url: &str) -> SearchConfig {
    let mut c = SearchConfig {
        provider: kind,
        timeout: Duration::from_secs(20),
        ..SearchConfig::default()
    };
    let ep = EndpointConfig {
        url: url.to_owned(),
        api_key: KEY.to_owned(),
    };
    match kind {
        ProviderKind::Searxng => c.searxng.url = url.to_owned(),
        ProviderKind::Perplexity => c.perplexity = ep,
        ProviderKind::Http => c.http = ep,
        ProviderKind::Brave => c.brave = ep,
        ProviderKind::Tavily => c.tavily = ep,
        ProviderKind::Exa => c.exa = ep,
        _ => unreachable!(),
    }
    c
}

fn query(text: &str) -> SearchQuery {
    SearchQuery {
        text: text.to_owned(),
        context: Vec::new(),
    }
}

/// Starts a server answering `reply` and searches `q` through `kind` at
/// `path` on it.
async fn search_at(
    kind: ProviderKind,
    path: &str,
    reply: Reply,
    cfg: impl FnOnce(&mut SearchConfig),
    q: &str,
) -> (Result<Vec<Source>, citestream_search::SearchError>, Server) {
    let server = Server::start(reply).await;
    let mut c = config(kind, &format!("{}{path}", server.url));
    cfg(&mut c);
    let search = Search::new(&c).expect("setup");
    assert_eq!(search.provider_name(), kind.name());
    (search.search(&query(q)).await, server)
}

fn json_fixture(path: &str) -> Value {
    serde_json::from_slice(&fixture(path)).expect("fixture is JSON")
}

fn assert_clean(sources: &[Source]) {
    let mut urls = std::collections::HashSet::new();
    for s in sources {
        let url = s.url.as_deref().expect("every source has a URL");
        assert!(urls.insert(url.to_owned()), "duplicate URL {url}");
        for f in [&s.title, &s.text, &s.heading, &s.author]
            .into_iter()
            .flatten()
        {
            assert!(
                !f.contains("<strong>") && !f.contains("&#x27;") && !f.contains("&amp;"),
                "markup left in {f:?}"
            );
            assert!(!f.contains('\u{200E}'), "bidi mark left in {f:?}");
            assert!(!f.is_empty());
        }
    }
}

// ---------------------------------------------------------------- SearXNG

#[tokio::test]
async fn searxng_recorded_answer() {
    let (r, server) = search_at(
        ProviderKind::Searxng,
        "/",
        Reply::fixture(200, "searxng/search_python_200.json"),
        |c| c.max_results = 30,
        "python",
    )
    .await;
    let sources = r.expect("search");
    let req = server.request();
    assert_eq!(req.method, "GET");
    assert_eq!(req.path(), "/search");
    assert_eq!(
        req.query(),
        vec![
            ("q".into(), "python".into()),
            ("format".into(), "json".into())
        ]
    );
    assert_eq!(req.header("authorization"), None);
    let recorded = json_fixture("searxng/search_python_200.json");
    let results = recorded["results"].as_array().unwrap();
    let distinct: std::collections::HashSet<&str> =
        results.iter().filter_map(|r| r["url"].as_str()).collect();
    assert_eq!(sources.len(), distinct.len());
    assert_eq!(sources[0].url.as_deref(), results[0]["url"].as_str());
    assert_eq!(sources[0].title.as_deref(), results[0]["title"].as_str());
    assert_clean(&sources);
    // `content` had U+200E marks and engine date prefixes; the marks are gone.
    assert!(
        results
            .iter()
            .any(|r| r["content"].as_str().unwrap_or("").contains('\u{200E}'))
    );
}

#[tokio::test]
async fn searxng_keeps_max_results_in_order() {
    let (r, _s) = search_at(
        ProviderKind::Searxng,
        "",
        Reply::fixture(200, "searxng/search_python_200.json"),
        |_| {},
        "python",
    )
    .await;
    let sources = r.unwrap();
    assert_eq!(sources.len(), 5);
    let recorded = json_fixture("searxng/search_python_200.json");
    for (s, r) in sources.iter().zip(recorded["results"].as_array().unwrap()) {
        assert_eq!(s.url.as_deref(), r["url"].as_str());
    }
}

#[tokio::test]
async fn searxng_query_is_encoded() {
    let q = "weather in Lisbon & Porto? 100% été #1";
    let (_r, server) = search_at(
        ProviderKind::Searxng,
        "/base/",
        Reply::fixture(200, "searxng/search_python_200.json"),
        |_| {},
        q,
    )
    .await;
    let req = server.request();
    assert_eq!(req.path(), "/base/search");
    assert_eq!(req.query()[0], ("q".to_owned(), q.to_owned()));
}

#[tokio::test]
async fn searxng_403_says_how_to_enable_json() {
    let (r, _s) = search_at(
        ProviderKind::Searxng,
        "",
        Reply::fixture(403, "searxng/error_403_format_not_enabled.html"),
        |_| {},
        "python",
    )
    .await;
    let e = r.unwrap_err();
    assert_eq!(e.kind(), SearchErrorKind::Status);
    let m = e.to_string();
    assert!(m.contains("HTTP 403"), "{m}");
    assert!(
        m.contains("enable json in search.formats of its settings.yml"),
        "{m}"
    );
    assert!(m.contains("You don't have the permission"), "{m}");
    assert!(!m.contains("<h1>"), "{m}");
}

// ------------------------------------------------------------------ Brave

#[tokio::test]
async fn brave_recorded_answer() {
    let (r, server) = search_at(
        ProviderKind::Brave,
        "/res/v1/web/search",
        Reply::fixture(200, "brave/web_search_python_200.json"),
        |c| c.max_results = 20,
        "python",
    )
    .await;
    let sources = r.unwrap();
    let req = server.request();
    assert_eq!(req.method, "GET");
    assert_eq!(req.path(), "/res/v1/web/search");
    assert_eq!(
        req.query(),
        vec![("q".into(), "python".into()), ("count".into(), "20".into())]
    );
    assert_eq!(req.header("x-subscription-token"), Some(KEY));
    assert_eq!(req.header("accept"), Some("application/json"));
    assert_eq!(req.header("authorization"), None);
    let recorded = json_fixture("brave/web_search_python_200.json");
    let web = recorded["web"]["results"].as_array().unwrap();
    assert_eq!(sources.len(), web.len());
    assert_clean(&sources);
    // `<strong>` highlighting and `&#x27;` were in the descriptions.
    assert!(
        web.iter()
            .any(|r| r["description"].as_str().unwrap().contains("<strong>"))
    );
    let i = web
        .iter()
        .position(|r| r["description"].as_str().unwrap().contains("<strong>"))
        .unwrap();
    let want = web[i]["description"]
        .as_str()
        .unwrap()
        .replace("<strong>", "")
        .replace("</strong>", "");
    assert_eq!(
        sources[i].text.as_deref(),
        Some(want.replace("&#x27;", "'").as_str())
    );
    // page_age → year; results without page_age/age have none.
    for (s, r) in sources.iter().zip(web) {
        match r["page_age"].as_str() {
            Some(d) => assert_eq!(s.year.as_deref(), Some(&d[..4])),
            None if r.get("age").is_none() => assert_eq!(s.year, None),
            None => {}
        }
    }
}

#[tokio::test]
async fn brave_validation_errors() {
    for f in [
        "brave/error_422_validation.json",
        "brave/error_422_missing_subscription_token.json",
    ] {
        let (r, _s) = search_at(
            ProviderKind::Brave,
            "",
            Reply::fixture(422, f),
            |_| {},
            "python",
        )
        .await;
        let e = r.unwrap_err();
        assert_eq!(e.kind(), SearchErrorKind::Status, "{f}");
        assert!(e.to_string().starts_with("brave: HTTP 422: {"), "{e}");
    }
}

#[tokio::test]
async fn brave_without_web_section_is_nothing_found() {
    let mut body = json_fixture("brave/web_search_python_200.json");
    body.as_object_mut().unwrap().remove("web");
    let (r, _s) = search_at(
        ProviderKind::Brave,
        "",
        Reply::json(200, body.to_string()),
        |_| {},
        "python",
    )
    .await;
    assert_eq!(r.unwrap(), vec![]);
}

// ----------------------------------------------------------------- Tavily

#[tokio::test]
async fn tavily_recorded_answers() {
    let (r, server) = search_at(
        ProviderKind::Tavily,
        "/search",
        Reply::fixture(200, "tavily/search_basic_200.json"),
        |_| {},
        "What is Pydantic AI?",
    )
    .await;
    let sources = r.unwrap();
    let req = server.request();
    assert_eq!(req.method, "POST");
    assert_eq!(req.path(), "/search");
    assert_eq!(req.header("authorization"), Some("Bearer test-key-123"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(
        req.json(),
        json!({"query": "What is Pydantic AI?", "max_results": 5})
    );
    let recorded = json_fixture("tavily/search_basic_200.json");
    let results = recorded["results"].as_array().unwrap();
    assert_eq!(sources.len(), results.len());
    for (s, r) in sources.iter().zip(results) {
        assert_eq!(s.url.as_deref(), r["url"].as_str());
        assert!(!s.text.as_deref().unwrap().is_empty());
    }
    assert_clean(&sources);

    let (r, _s) = search_at(
        ProviderKind::Tavily,
        "/search",
        Reply::fixture(200, "tavily/search_include_domains_max2_200.json"),
        |_| {},
        "q",
    )
    .await;
    assert_eq!(r.unwrap().len(), 2);
}

#[tokio::test]
async fn tavily_bad_key() {
    let (r, _s) = search_at(
        ProviderKind::Tavily,
        "",
        Reply::fixture(401, "tavily/error_401_invalid_key.json"),
        |_| {},
        "q",
    )
    .await;
    let e = r.unwrap_err();
    assert_eq!(e.kind(), SearchErrorKind::Status);
    assert!(e.to_string().contains("HTTP 401"), "{e}");
}

#[tokio::test]
async fn text_is_capped_on_a_char_boundary() {
    let (r, _s) = search_at(
        ProviderKind::Tavily,
        "",
        Reply::fixture(200, "tavily/search_basic_200.json"),
        |c| c.max_text_chars = 7,
        "q",
    )
    .await;
    for s in r.unwrap() {
        assert!(s.text.as_deref().unwrap().chars().count() <= 7, "{s:?}");
    }
}

// -------------------------------------------------------------------- Exa

#[tokio::test]
async fn exa_recorded_answers() {
    let (r, server) = search_at(
        ProviderKind::Exa,
        "/search",
        Reply::fixture(200, "exa/search_highlights_200.json"),
        |_| {},
        "What is Pydantic AI?",
    )
    .await;
    let sources = r.unwrap();
    let req = server.request();
    assert_eq!(req.method, "POST");
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(
        req.json(),
        json!({"query": "What is Pydantic AI?", "numResults": 5, "contents": {"text": {"maxCharacters": 1500}}})
    );
    assert_eq!(sources.len(), 2);
    // Result 1 has no publishedDate, result 2 has `2024-06-21T15:55:04.000Z`.
    assert_eq!(sources[0].year, None);
    assert_eq!(sources[1].year.as_deref(), Some("2024"));
    assert!(sources.iter().all(|s| s.text.is_some()));
    assert_clean(&sources);

    let (r, _s) = search_at(
        ProviderKind::Exa,
        "",
        Reply::fixture(200, "exa/search_text_200.json"),
        |_| {},
        "q",
    )
    .await;
    let sources = r.unwrap();
    // The API cut `text` at 500 characters; whitespace runs are squeezed.
    let recorded = json_fixture("exa/search_text_200.json");
    let text = recorded["results"][0]["text"].as_str().unwrap();
    assert_eq!(text.chars().count(), 500);
    let squeezed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(sources[0].text.as_deref(), Some(squeezed.as_str()));

    let (r, _s) = search_at(
        ProviderKind::Exa,
        "",
        Reply::fixture(200, "exa/search_docs_example.json"),
        |_| {},
        "q",
    )
    .await;
    let sources = r.unwrap();
    assert_eq!(sources[0].year.as_deref(), Some("2000"));
    assert_eq!(sources[0].author, None); // `author: null`
}

// ------------------------------------------------------ Perplexity, LiteLLM

#[tokio::test]
async fn perplexity_documented_answer() {
    let (r, server) = search_at(
        ProviderKind::Perplexity,
        "/search",
        Reply::fixture(200, "perplexity/search_api_reference_example.json"),
        |_| {},
        "Lisbon",
    )
    .await;
    let sources = r.unwrap();
    let req = server.request();
    assert_eq!(req.method, "POST");
    assert_eq!(req.path(), "/search");
    assert_eq!(req.header("authorization"), Some("Bearer test-key-123"));
    assert_eq!(req.json(), json!({"query": "Lisbon", "max_results": 5}));
    // Every value is the placeholder "<string>": a tag, stripped from the
    // text fields; the URL is kept as given.
    assert_eq!(sources.len(), 1);
    assert_eq!(sources[0].url.as_deref(), Some("<string>"));
    assert_eq!(sources[0].title, None);
}

#[tokio::test]
async fn litellm_search_tool() {
    let (r, server) = search_at(
        ProviderKind::Perplexity,
        "/v1/search/my-search",
        Reply::fixture(200, "litellm/search_docs_example.json"),
        |c| c.perplexity.api_key = String::new(),
        "AI",
    )
    .await;
    let sources = r.unwrap();
    let req = server.request();
    assert_eq!(req.path(), "/v1/search/my-search");
    assert_eq!(
        req.header("authorization"),
        None,
        "no key configured: no header"
    );
    assert_eq!(sources.len(), 2);
    assert_eq!(
        sources[0].title.as_deref(),
        Some("Latest Advances in Artificial Intelligence")
    );
    assert_eq!(sources[0].year.as_deref(), Some("2024"));
    assert_eq!(
        sources[1].url.as_deref(),
        Some("https://nature.com/articles/ml-breakthrough")
    );

    let (r, _s) = search_at(
        ProviderKind::Perplexity,
        "/v1/search/x",
        Reply::fixture(401, "litellm/error_401_invalid_proxy_key.json"),
        |_| {},
        "AI",
    )
    .await;
    let e = r.unwrap_err();
    assert_eq!(e.kind(), SearchErrorKind::Status);
    assert!(e.to_string().contains("HTTP 401"), "{e}");
}

// ------------------------------------------------------------------- http

#[tokio::test]
async fn http_documented_answers() {
    let (r, server) = search_at(
        ProviderKind::Http,
        "/hook",
        Reply::fixture(200, "openwebui_external/response_docs_example.json"),
        |_| {},
        "Lisbon",
    )
    .await;
    let sources = r.unwrap();
    let req = server.request();
    assert_eq!(req.method, "POST");
    assert_eq!(req.path(), "/hook");
    assert_eq!(req.header("authorization"), Some("Bearer test-key-123"));
    assert_eq!(req.json(), json!({"query": "Lisbon", "count": 5}));
    assert_eq!(sources.len(), 2);
    assert_eq!(sources[0].url.as_deref(), Some("URL of the search result"));
    assert_eq!(
        sources[0].title.as_deref(),
        Some("Title of the search result page")
    );
    assert_eq!(
        sources[0].text.as_deref(),
        Some("A brief description or snippet from the search result page")
    );

    let (r, server) = search_at(
        ProviderKind::Http,
        "/hook",
        Reply::fixture(200, "openwebui_external/response_empty_docs_example.json"),
        |c| c.http.api_key = String::new(),
        "x",
    )
    .await;
    assert_eq!(r.unwrap(), vec![]);
    assert_eq!(server.request().header("authorization"), None);
}

// ------------------------------------------- shared rules and failure modes

/// A recorded Tavily answer with its first result repeated at the end and
/// the second one's `url` removed, `title` made null and `content` given
/// HTML: duplicates and results without URL are dropped, markup removed.
#[tokio::test]
async fn duplicate_and_missing_urls_are_dropped() {
    let mut body = json_fixture("tavily/search_basic_200.json");
    let results = body["results"].as_array_mut().unwrap();
    let first = results[0].clone();
    results[1].as_object_mut().unwrap().remove("url");
    results[2]["title"] = Value::Null;
    results[2]["content"] = json!("<p>Pydantic&nbsp;AI &amp; <b>agents</b></p>");
    results.push(first);
    let n = results.len();
    let (r, _s) = search_at(
        ProviderKind::Tavily,
        "",
        Reply::json(200, body.to_string()),
        |c| c.max_results = 20,
        "q",
    )
    .await;
    let sources = r.unwrap();
    assert_eq!(sources.len(), n - 2);
    assert_eq!(sources[1].title, None);
    assert_eq!(sources[1].text.as_deref(), Some("Pydantic AI & agents"));
    assert_clean(&sources);
}

#[tokio::test]
async fn invalid_json_and_wrong_shapes_fail() {
    let cases: [(ProviderKind, &[u8]); 5] = [
        (ProviderKind::Searxng, b"{\"results\": [" as &[u8]),
        (ProviderKind::Tavily, b"<html>not json</html>"),
        (ProviderKind::Exa, b"{\"data\": []}"),
        (ProviderKind::Http, b"{\"results\": []}"),
        (ProviderKind::Perplexity, b"{\"results\": {}}"),
    ];
    for (kind, body) in cases {
        let (r, _s) = search_at(kind, "", Reply::json(200, body), |_| {}, "q").await;
        let e = r.unwrap_err();
        assert_eq!(e.kind(), SearchErrorKind::Body, "{kind}: {e}");
        assert!(e.to_string().starts_with(&format!("{kind}: ")), "{e}");
    }
}

#[tokio::test]
async fn slow_answer_past_the_timeout_fails() {
    let mut reply = Reply::fixture(200, "tavily/search_basic_200.json");
    reply.delay = Duration::from_secs(30);
    let (r, _s) = search_at(
        ProviderKind::Tavily,
        "",
        reply,
        |c| c.timeout = Duration::from_millis(200),
        "q",
    )
    .await;
    let e = r.unwrap_err();
    assert_eq!(e.kind(), SearchErrorKind::Timeout);
    assert!(e.to_string().contains("200ms"), "{e}");
}

#[tokio::test]
async fn a_50_mb_answer_is_a_failed_search() {
    for declare_length in [true, false] {
        let reply = Reply {
            body: Body::Huge {
                n: 50 << 20,
                declare_length,
            },
            ..Reply::json(200, "")
        };
        let (r, _s) = search_at(ProviderKind::Searxng, "", reply, |_| {}, "q").await;
        let e = r.unwrap_err();
        assert_eq!(e.kind(), SearchErrorKind::Body, "{e}");
        assert!(e.to_string().contains("larger than 8 MiB"), "{e}");
    }
}

#[tokio::test]
async fn refused_connection_is_a_transport_failure() {
    // Bind, then drop: nothing listens on the port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = config(ProviderKind::Http, &format!("http://127.0.0.1:{port}/x"));
    let e = Search::new(&c)
        .unwrap()
        .search(&query("q"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), SearchErrorKind::Transport, "{e}");
}

#[test]
fn setup_errors_name_the_key() {
    let mut c = config(ProviderKind::Http, "");
    assert_eq!(
        Search::new(&c).unwrap_err().to_string(),
        "search.http.url is required for provider \"http\""
    );
    c = config(ProviderKind::Brave, "");
    c.brave.api_key = String::new();
    assert_eq!(
        Search::new(&c).unwrap_err().to_string(),
        "search.brave.api_key is required for provider \"brave\""
    );
    c = config(ProviderKind::Exa, "ftp://127.0.0.1/x");
    assert!(
        Search::new(&c)
            .unwrap_err()
            .to_string()
            .starts_with("search.exa.url = \"ftp://127.0.0.1/x\": ")
    );
    c = config(ProviderKind::Searxng, "not a url");
    assert!(
        Search::new(&c)
            .unwrap_err()
            .to_string()
            .starts_with("search.searxng.url")
    );
    c = config(ProviderKind::Tavily, "");
    c.max_results = 0;
    assert_eq!(
        Search::new(&c).unwrap_err().to_string(),
        "search.max_results must be greater than zero"
    );
    // Public endpoints by default.
    for kind in [
        ProviderKind::Brave,
        ProviderKind::Tavily,
        ProviderKind::Exa,
        ProviderKind::Perplexity,
    ] {
        assert!(Search::new(&config(kind, "")).is_ok(), "{kind}");
    }
}

/// Every remote provider is sent the query formed from the conversation:
/// a follow-up that does not name its subject carries the earlier turns'
/// (capitalised words: remote providers have no corpus signal), a question
/// that names its own is sent as written, and `query = "last"` sends the
/// question alone; `max_query_chars` keeps only the end of a long one.
#[tokio::test]
async fn remote_providers_are_sent_the_formed_query() {
    use citestream::request::Turn;
    use citestream_search::QueryMode;

    let context = vec![
        Turn {
            role: "system".into(),
            text: "You are a guide to Norway.".into(),
        },
        Turn {
            role: "user".into(),
            text: "What is the capital of Peru?".into(),
        },
        Turn {
            role: "assistant".into(),
            text: "The capital of Peru is Lima [1].".into(),
        },
    ];
    let long = format!(
        "{}and what is the capital of Japan?",
        "padding ".repeat(500)
    );
    let cases: [(&str, QueryMode, &str); 4] = [
        (
            "And what is its population?",
            QueryMode::Context,
            "And what is its population? Peru",
        ),
        (
            "And what is its population?",
            QueryMode::Last,
            "And what is its population?",
        ),
        (
            "What is the capital of Japan?",
            QueryMode::Context,
            "What is the capital of Japan?",
        ),
        (
            &long,
            QueryMode::Context,
            "padding padding and what is the capital of Japan?",
        ),
    ];
    let providers: [(ProviderKind, &str, &str); 6] = [
        (ProviderKind::Searxng, "/", "searxng/search_python_200.json"),
        (
            ProviderKind::Brave,
            "/res/v1/web/search",
            "brave/web_search_python_200.json",
        ),
        (
            ProviderKind::Tavily,
            "/search",
            "tavily/search_basic_200.json",
        ),
        (ProviderKind::Exa, "/search", "exa/search_text_200.json"),
        (
            ProviderKind::Perplexity,
            "/search",
            "perplexity/search_api_reference_example.json",
        ),
        (
            ProviderKind::Http,
            "/search",
            "openwebui_external/response_docs_example.json",
        ),
    ];
    for (kind, path, answer) in providers {
        for (question, mode, sent) in cases {
            let server = Server::start(Reply::fixture(200, answer)).await;
            let mut c = config(kind, &format!("{}{path}", server.url));
            c.query = mode;
            c.max_query_chars = 50;
            let search = Search::new(&c).unwrap();
            let q = SearchQuery {
                text: question.to_owned(),
                context: context.clone(),
            };
            let formed = search.form(&q).await;
            assert_eq!(formed.text(), sent, "{kind} {mode:?}");
            assert_eq!(formed.chars(), sent.chars().count());
            search.search_formed(&formed).await.expect("answer");
            let req = server.request();
            let got = match kind {
                ProviderKind::Searxng | ProviderKind::Brave => req
                    .query()
                    .into_iter()
                    .find(|(k, _)| k == "q")
                    .map(|(_, v)| v)
                    .expect("q"),
                _ => req.json()["query"].as_str().expect("query").to_owned(),
            };
            assert_eq!(got, sent, "{kind} {mode:?}");
        }
    }
}

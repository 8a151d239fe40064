//! `search.query = "model"` against a loopback OpenAI-compatible model
//! server: a good answer is the query; garbage, an empty answer, a slow
//! answer past `search.query_timeout`, a 500 and a refused connection each
//! fall back to the `context` query. The request the model server gets is
//! checked too: one non-streamed chat completion with the conversation
//! (system turns left out) and the configured model and key.

mod common;

use std::time::Duration;

use citestream::request::Turn;
use citestream_search::{Formation, QueryMode, Search, SearchConfig, SearchQuery};
use common::{Reply, Server};
use serde_json::json;

fn follow_up() -> SearchQuery {
    let turn = |role: &str, text: &str| Turn {
        role: role.into(),
        text: text.into(),
    };
    SearchQuery {
        text: "And what is its population?".into(),
        context: vec![
            turn("system", "You are a guide to Norway."),
            turn("user", "What is the capital of Peru?"),
            turn("assistant", "The capital of Peru is Lima [1]."),
        ],
    }
}

fn config(base_url: &str) -> SearchConfig {
    let mut c = SearchConfig {
        query: QueryMode::Model,
        query_timeout: Duration::from_millis(500),
        ..SearchConfig::default()
    };
    c.query_model.base_url = base_url.to_owned();
    c.query_model.api_key = "sk-query".into();
    c.query_model.model = "query-writer".into();
    c
}

fn completion(content: &str) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "query-writer",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        })
        .to_string(),
    )
}

/// The `context` query of [`follow_up`] (what every failure falls back to).
const CONTEXT: &str = "And what is its population? Peru";

#[tokio::test]
async fn a_good_answer_is_the_query() {
    let server = Server::start(completion("\"Peru population 2024\"\n")).await;
    let search = Search::new(&config(&server.url)).unwrap();
    let formed = search.form(&follow_up()).await;
    assert_eq!(formed.text(), "Peru population 2024");
    assert_eq!(formed.formation(), Formation::Model);
    // The sources are searched for the model's query (the bundled corpus).
    let sources = search.search_formed(&formed).await.unwrap();
    assert_eq!(
        sources[0].title.as_deref(),
        Some("Peru - The World Factbook")
    );

    let req = server.request();
    assert_eq!(req.method, "POST");
    assert_eq!(req.path(), "/v1/chat/completions");
    assert_eq!(req.header("authorization"), Some("Bearer sk-query"));
    let body = req.json();
    assert_eq!(body["model"], "query-writer");
    assert_eq!(body["stream"], false);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    let prompt = messages[1]["content"].as_str().unwrap();
    assert!(
        prompt.contains("user: What is the capital of Peru?"),
        "{prompt}"
    );
    assert!(prompt.contains("assistant: The capital of Peru is Lima [1]."));
    assert!(prompt.ends_with("Last user message: And what is its population?"));
    assert!(
        !prompt.contains("Norway"),
        "system turns are not sent: {prompt}"
    );
}

#[tokio::test]
async fn a_base_url_ending_in_v1_is_not_doubled() {
    let server = Server::start(completion("Peru population")).await;
    let search = Search::new(&config(&format!("{}/v1", server.url))).unwrap();
    assert_eq!(search.form(&follow_up()).await.text(), "Peru population");
    assert_eq!(server.request().path(), "/v1/chat/completions");
}

async fn falls_back(reply: Reply) {
    let server = Server::start(reply.clone()).await;
    let search = Search::new(&config(&server.url)).unwrap();
    let formed = search.form(&follow_up()).await;
    assert_eq!(formed.text(), CONTEXT, "{reply:?}");
    assert_eq!(formed.formation(), Formation::Carried);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn garbage_falls_back_to_the_context_query() {
    falls_back(Reply::json(200, "<html>not json</html>")).await;
    falls_back(Reply::json(200, json!({"choices": []}).to_string())).await;
    falls_back(Reply::json(
        200,
        json!({"choices": [{"message": {"content": 42}}]}).to_string(),
    ))
    .await;
}

#[tokio::test]
async fn an_empty_answer_falls_back_to_the_context_query() {
    falls_back(completion("")).await;
    falls_back(completion("  \n\"\"\n")).await;
    falls_back(completion("?!")).await;
}

#[tokio::test]
async fn a_500_falls_back_to_the_context_query() {
    falls_back(Reply::json(
        500,
        json!({"error": {"message": "boom"}}).to_string(),
    ))
    .await;
}

#[tokio::test]
async fn a_slow_answer_falls_back_after_the_query_timeout() {
    let mut slow = completion("Peru population");
    slow.delay = Duration::from_secs(5);
    let server = Server::start(slow).await;
    let search = Search::new(&config(&server.url)).unwrap();
    // The model would answer after 5 s; the 500 ms query_timeout passed
    // first, so the query is the context one.
    let formed = search.form(&follow_up()).await;
    assert_eq!(formed.text(), CONTEXT);
    assert_eq!(formed.formation(), Formation::Carried);
}

#[tokio::test]
async fn a_refused_connection_falls_back_to_the_context_query() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let search = Search::new(&config(&url)).unwrap();
    assert_eq!(search.form(&follow_up()).await.text(), CONTEXT);
}

#[test]
fn model_mode_needs_a_base_url_and_a_model() {
    let mut c = config("");
    let e = Search::new(&c).unwrap_err().to_string();
    assert!(e.contains("search.query_model.base_url"), "{e}");
    c.query_model.base_url = "http://127.0.0.1:1".into();
    c.query_model.model = String::new();
    let e = Search::new(&c).unwrap_err().to_string();
    assert!(e.contains("search.query_model.model"), "{e}");
    // Other modes do not need it.
    c.query = QueryMode::Context;
    assert!(Search::new(&c).is_ok());
}

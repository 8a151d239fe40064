//! The remote providers: `searxng`, `perplexity`, `http`, `brave`,
//! `tavily`, `exa`, over one HTTP client (reqwest, rustls with ring).
//!
//! Each provider is a request builder and a body parser ([`wire`]); this
//! module sends the request, reads the answer with a size cap
//! ([`MAX_BODY`]: a larger answer is a failed search, never a large
//! allocation), turns a non-2xx status into [`SearchErrorKind::Status`]
//! (with a hint for SearXNG's 403) and invalid JSON into
//! [`SearchErrorKind::Body`]. The timeout is applied by [`crate::Search`].

mod wire;

use std::sync::Arc;

use reqwest::{RequestBuilder, StatusCode};

use crate::config::{ProviderKind, SearchConfig};
use crate::setup::{SetupError, endpoint_url};
use crate::{BoxFuture, FormedQuery, Provider, SearchError, SearchErrorKind, Source, adapt};

/// The largest answer read from a provider: 8 MiB.
pub(crate) const MAX_BODY: usize = 8 << 20;

/// A remote provider.
#[derive(Debug)]
pub(crate) struct Remote {
    kind: ProviderKind,
    url: String,
    api_key: String,
    text_chars: usize,
    client: crate::http::HttpClient,
}

impl Remote {
    /// Checks `config` for `kind` and builds the client (with the host's
    /// TLS trust when given).
    pub(crate) fn new(
        kind: ProviderKind,
        config: &SearchConfig,
        tls: Option<&Arc<rustls::ClientConfig>>,
        resends: &crate::http::Resends,
    ) -> Result<Remote, SetupError> {
        let (table, default_url) = match kind {
            ProviderKind::Searxng => {
                let url = endpoint_url(kind, &config.searxng.url, "")?;
                return Remote::build(
                    kind,
                    url,
                    String::new(),
                    config.max_text_chars,
                    tls,
                    resends,
                );
            }
            ProviderKind::Perplexity => (&config.perplexity, "https://api.perplexity.ai/search"),
            ProviderKind::Http => (&config.http, ""),
            ProviderKind::Brave => (
                &config.brave,
                "https://api.search.brave.com/res/v1/web/search",
            ),
            ProviderKind::Tavily => (&config.tavily, "https://api.tavily.com/search"),
            ProviderKind::Exa => (&config.exa, "https://api.exa.ai/search"),
            ProviderKind::Local | ProviderKind::Static => unreachable!("not remote"),
        };
        let url = endpoint_url(kind, &table.url, default_url)?;
        let key_required = matches!(
            kind,
            ProviderKind::Brave | ProviderKind::Tavily | ProviderKind::Exa
        );
        if key_required && table.api_key.is_empty() {
            return Err(SetupError::new(format!(
                "search.{kind}.api_key is required for provider \"{kind}\""
            )));
        }
        Remote::build(
            kind,
            url,
            table.api_key.clone(),
            config.max_text_chars,
            tls,
            resends,
        )
    }

    fn build(
        kind: ProviderKind,
        url: String,
        api_key: String,
        text_chars: usize,
        tls: Option<&Arc<rustls::ClientConfig>>,
        resends: &crate::http::Resends,
    ) -> Result<Remote, SetupError> {
        let client =
            crate::http::client(tls, resends, crate::http::Caller::Provider).map_err(|e| {
                SetupError::new(format!(
                    "search.{kind}: cannot build the HTTP client: {}",
                    chain(&e)
                ))
            })?;
        Ok(Remote {
            kind,
            url,
            api_key,
            text_chars,
            client,
        })
    }

    async fn run(
        &self,
        query: &FormedQuery,
        max_results: usize,
    ) -> Result<Vec<Source>, SearchError> {
        let name = self.kind.name();
        let req = wire::request(
            self.kind,
            &self.client.pooled,
            &self.url,
            &self.api_key,
            query.text(),
            max_results,
            self.text_chars,
        );
        let (status, body) = send(&self.client, req)
            .await
            .map_err(|e| SearchError::new(e.kind(), format!("{name}: {}", e.message())))?;
        if !status.is_success() {
            return Err(status_error(self.kind, status, &body));
        }
        let value: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            SearchError::new(
                SearchErrorKind::Body,
                format!("{name}: the answer is not JSON: {e}"),
            )
        })?;
        wire::parse(self.kind, &value)
            .map_err(|e| SearchError::new(SearchErrorKind::Body, format!("{name}: {e}")))
    }
}

impl Provider for Remote {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn search<'a>(
        &'a self,
        query: &'a FormedQuery,
        max_results: usize,
    ) -> BoxFuture<'a, Result<Vec<Source>, SearchError>> {
        Box::pin(self.run(query, max_results))
    }
}

/// Sends `req` and reads at most [`MAX_BODY`] bytes of the answer.
async fn send(
    client: &crate::http::HttpClient,
    req: RequestBuilder,
) -> Result<(StatusCode, Vec<u8>), SearchError> {
    let mut resp = crate::http::send(client, req)
        .await
        .map_err(|e| transport(&e))?;
    let status = resp.status();
    let too_large = || {
        SearchError::new(
            SearchErrorKind::Body,
            format!("the answer is larger than {} MiB", MAX_BODY >> 20),
        )
    };
    if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport(&e))? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, body))
}

fn transport(e: &reqwest::Error) -> SearchError {
    let kind = if e.is_timeout() {
        SearchErrorKind::Timeout
    } else {
        SearchErrorKind::Transport
    };
    SearchError::new(kind, chain(e))
}

/// An error and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// A non-2xx answer: the status and the start of the body, HTML stripped.
fn status_error(kind: ProviderKind, status: StatusCode, body: &[u8]) -> SearchError {
    let name = kind.name();
    let text = String::from_utf8_lossy(&body[..body.len().min(2048)]);
    let mut detail = adapt::strip_html(&text);
    if let Some((i, _)) = detail.char_indices().nth(300) {
        detail.truncate(i);
        detail.push('…');
    }
    let mut message = format!("{name}: HTTP {}", status.as_u16());
    if !detail.is_empty() {
        message.push_str(": ");
        message.push_str(&detail);
    }
    if kind == ProviderKind::Searxng && status == StatusCode::FORBIDDEN {
        message.push_str(" (the instance does not serve JSON: enable json in search.formats of its settings.yml)");
    }
    SearchError::new(SearchErrorKind::Status, message)
}

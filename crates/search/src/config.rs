//! The `[search]` table of the config file (docs/reference/config.md).
//!
//! Every key is optional; a missing key takes its documented
//! default ([`SearchConfig::default`], docs/reference/config.md, "`[search]`"). Unknown keys are an error (`deny_unknown_fields`),
//! so a typo in a key is reported at start-up instead of being ignored.
//!
//! ```toml
//! [search]
//! provider = "local"     # local | static | searxng | perplexity | brave | tavily | exa | http
//! max_results = 5
//! timeout = "8s"
//! max_text_chars = 1500
//! query = "context"      # context | last | model: how the query is formed (docs/search.md)
//! max_query_chars = 1000 # of the last user message, from its end
//! query_timeout = "3s"   # query = "model": then fall back to "context"
//! [search.query_model]   # query = "model": an OpenAI-compatible chat model writes the query
//! base_url = ""          # e.g. "http://127.0.0.1:8000" (POST {base_url}/v1/chat/completions)
//! api_key = ""
//! model = ""
//! [search.local]
//! path = ""              # "" = the bundled corpus
//! url_base = "local:"    # url of a passage whose file has none: url_base + relative path + #anchor
//! [search.static]
//! path = "sources.json"
//! [search.searxng]
//! url = "http://127.0.0.1:8888"
//! [search.perplexity]    # also [search.http], [search.brave], [search.tavily], [search.exa]
//! url = ""               # "" = the provider's public endpoint (required for `http`)
//! api_key = ""
//! ```
//!
//! The host crate embeds [`SearchConfig`] in its whole-file config; this
//! module only describes the table. Checking the values (a missing file, an
//! empty folder, a missing key) happens in [`crate::Search::new`].

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// The default `search.local.url_base`.
pub const DEFAULT_URL_BASE: &str = "local:";

/// The `[search]` table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// Which provider answers searches (default `local`).
    pub provider: ProviderKind,
    /// At most this many sources per search (default 5).
    pub max_results: usize,
    /// A search that takes longer fails (docs/reference/request.md, "Quota"); default 8 s.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Each source's `text` is cut to this many characters (default 1500).
    pub max_text_chars: usize,
    /// How the query is formed from the conversation (default `context`).
    pub query: QueryMode,
    /// Only the last this many characters of the last user message are
    /// searched, cut at a word boundary (default 1000).
    pub max_query_chars: usize,
    /// `query = "model"`: the query model's answer is awaited this long,
    /// then the query is formed as for `context` (default 3 s).
    #[serde(with = "humantime_serde")]
    pub query_timeout: Duration,
    /// `[search.query_model]`.
    pub query_model: QueryModelConfig,
    /// `[search.local]`.
    pub local: LocalConfig,
    /// `[search.static]`.
    pub r#static: PathConfig,
    /// `[search.searxng]`.
    pub searxng: SearxngConfig,
    /// `[search.perplexity]`.
    pub perplexity: EndpointConfig,
    /// `[search.http]`.
    pub http: EndpointConfig,
    /// `[search.brave]`.
    pub brave: EndpointConfig,
    /// `[search.tavily]`.
    pub tavily: EndpointConfig,
    /// `[search.exa]`.
    pub exa: EndpointConfig,
    /// Above zero: each search's results are kept this long and reused for
    /// the same provider and query (the hosts' search cache,
    /// docs/search.md); default 0 s = off.
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
    /// At most this many results lists in the in-process cache (with the
    /// memory quota store; the Redis cache expires by `cache_ttl` alone);
    /// default 10000.
    pub cache_entries: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            provider: ProviderKind::Local,
            max_results: 5,
            timeout: Duration::from_secs(8),
            max_text_chars: 1500,
            query: QueryMode::Context,
            max_query_chars: 1000,
            query_timeout: Duration::from_secs(3),
            query_model: QueryModelConfig::default(),
            local: LocalConfig::default(),
            r#static: PathConfig {
                path: "sources.json".into(),
            },
            searxng: SearxngConfig::default(),
            perplexity: EndpointConfig::default(),
            http: EndpointConfig::default(),
            brave: EndpointConfig::default(),
            tavily: EndpointConfig::default(),
            exa: EndpointConfig::default(),
            cache_ttl: Duration::ZERO,
            cache_entries: 10_000,
        }
    }
}

/// The value of `search.provider`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// BM25 over a folder of documents, or the bundled corpus.
    #[default]
    Local,
    /// Always the sources of one file.
    Static,
    /// A SearXNG instance (`GET {url}/search?q=…&format=json`).
    Searxng,
    /// A Perplexity-Search-shaped endpoint (also LiteLLM `/v1/search/<tool>`).
    Perplexity,
    /// Brave Search API.
    Brave,
    /// Tavily.
    Tavily,
    /// Exa.
    Exa,
    /// `POST {url} {"query","count"}` → `[{"link","title","snippet"}]`.
    Http,
}

impl ProviderKind {
    /// The config name (`local`, `searxng`, …).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Local => "local",
            ProviderKind::Static => "static",
            ProviderKind::Searxng => "searxng",
            ProviderKind::Perplexity => "perplexity",
            ProviderKind::Brave => "brave",
            ProviderKind::Tavily => "tavily",
            ProviderKind::Exa => "exa",
            ProviderKind::Http => "http",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The value of `search.query`: how the query is formed from the
/// conversation (see [`crate::query`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryMode {
    /// The last user message, with terms of earlier turns when it does not
    /// name its own subject (no model call).
    #[default]
    Context,
    /// The last user message alone.
    Last,
    /// A model writes the query (`[search.query_model]`); `context` when
    /// it fails.
    Model,
}

impl QueryMode {
    /// The config name (`context`, `last`, `model`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            QueryMode::Context => "context",
            QueryMode::Last => "last",
            QueryMode::Model => "model",
        }
    }
}

/// `[search.query_model]`: the OpenAI-compatible chat model that writes
/// the query when `search.query = "model"`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryModelConfig {
    /// The server, e.g. `http://127.0.0.1:8000` (`/v1/chat/completions`
    /// is appended; a trailing `/v1` is accepted).
    pub base_url: String,
    /// Sent as `Authorization: Bearer`; `""` = none.
    pub api_key: String,
    /// The `model` of the request.
    pub model: String,
}

impl fmt::Debug for QueryModelConfig {
    /// The key is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryModelConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &redacted(&self.api_key))
            .field("model", &self.model)
            .finish()
    }
}

fn redacted(key: &str) -> &'static str {
    if key.is_empty() { "" } else { "<redacted>" }
}

/// `[search.local]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalConfig {
    /// The folder of documents; `""` = the bundled corpus.
    pub path: String,
    /// The URL of a passage whose file names none: `url_base` + the file's
    /// path relative to the folder + `#` + the heading's anchor (default
    /// `"local:"`), so no path of the server reaches a client.
    pub url_base: String,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            path: String::new(),
            url_base: DEFAULT_URL_BASE.to_owned(),
        }
    }
}

/// `[search.static]`: a file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PathConfig {
    /// A JSON array of sources.
    pub path: String,
}

/// `[search.searxng]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearxngConfig {
    /// Base URL of the instance (default `http://127.0.0.1:8888`).
    pub url: String,
}

impl Default for SearxngConfig {
    fn default() -> Self {
        SearxngConfig {
            url: "http://127.0.0.1:8888".into(),
        }
    }
}

/// `[search.perplexity]`, `[search.http]`, `[search.brave]`,
/// `[search.tavily]`, `[search.exa]`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointConfig {
    /// Endpoint URL; `""` = the provider's public endpoint (required for
    /// `http`).
    pub url: String,
    /// API key; `""` = none.
    pub api_key: String,
}

impl fmt::Debug for EndpointConfig {
    /// The key is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("url", &self.url)
            .field("api_key", &redacted(&self.api_key))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        search: SearchConfig,
    }

    fn parse(text: &str) -> Result<SearchConfig, String> {
        toml::from_str::<File>(text)
            .map(|f| f.search)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_match_spec() {
        let c = parse("").unwrap();
        assert_eq!(c, SearchConfig::default());
        assert_eq!(c.provider, ProviderKind::Local);
        assert_eq!(c.max_results, 5);
        assert_eq!(c.timeout, Duration::from_secs(8));
        assert_eq!(c.max_text_chars, 1500);
        assert_eq!(c.r#static.path, "sources.json");
        assert_eq!(c.searxng.url, "http://127.0.0.1:8888");
        assert_eq!(c.local.path, "");
        assert_eq!(c.local.url_base, "local:");
        assert_eq!(c.query, QueryMode::Context);
        assert_eq!(c.max_query_chars, 1000);
        assert_eq!(c.query_timeout, Duration::from_secs(3));
        assert_eq!(c.query_model, QueryModelConfig::default());
    }

    #[test]
    fn query_keys_parse() {
        let c = parse(
            "[search]\nquery = \"model\"\nmax_query_chars = 200\nquery_timeout = \"500ms\"\n\
             [search.query_model]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key = \"sk-q\"\nmodel = \"m\"\n",
        )
        .unwrap();
        assert_eq!(c.query, QueryMode::Model);
        assert_eq!(c.max_query_chars, 200);
        assert_eq!(c.query_timeout, Duration::from_millis(500));
        assert_eq!(c.query_model.model, "m");
        assert!(!format!("{c:?}").contains("sk-q"));
        assert_eq!(
            parse("[search]\nquery = \"last\"\n").unwrap().query,
            QueryMode::Last
        );
        assert!(parse("[search]\nquery = \"llm\"\n").is_err());
        assert!(parse("[search.query_model]\nurl = \"x\"\n").is_err());
    }

    #[test]
    fn keys_parse() {
        let c = parse(
            "[search]\nprovider = \"brave\"\ntimeout = \"250ms\"\nmax_results = 3\n\
             [search.brave]\napi_key = \"k\"\nurl = \"http://127.0.0.1:1/x\"\n\
             [search.static]\npath = \"s.json\"\n",
        )
        .unwrap();
        assert_eq!(c.provider, ProviderKind::Brave);
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!(c.max_results, 3);
        assert_eq!(c.brave.api_key, "k");
        assert_eq!(c.r#static.path, "s.json");
        assert!(!format!("{c:?}").contains("\"k\""));
    }

    #[test]
    fn unknown_keys_and_providers_are_errors() {
        assert!(parse("[search]\nmax_result = 3\n").is_err());
        assert!(parse("[search.searxng]\napi_key = \"x\"\n").is_err());
        assert!(parse("[search.static]\nurl_base = \"x\"\n").is_err());
        let e = parse("[search]\nprovider = \"google\"\n").unwrap_err();
        assert!(e.contains("google"), "{e}");
        assert!(parse("[search]\ntimeout = \"soon\"\n").is_err());
    }
}

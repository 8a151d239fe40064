//! Search providers for the citestream hosts (gateway, Envoy processor,
//! Python package): the search half of the request side (docs/reference/request.md).
//!
//! * [`SearchConfig`]: the `[search]` table of the config file (docs/reference/config.md),
//!   every key optional, unknown keys rejected.
//! * [`Search`]: the configured provider plus the adapter rules every
//!   provider shares. Hosts build one at start ([`Search::new`], which
//!   reports a bad configuration as a [`SetupError`]) and call
//!   [`Search::search`] per request. A search that fails (error, timeout,
//!   non-2xx answer) is a [`SearchError`] with a [`SearchErrorKind`] for
//!   metrics; it is logged here with `tracing` and must never fail the
//!   request (docs/reference/request.md, "Quota").
//! * [`query`]: what is searched for a conversation (`search.query`): the
//!   last user message, with the terms of earlier turns when it does not
//!   name its own subject, or a model's query. [`Search::form`] gives the
//!   [`FormedQuery`] (hosts log its length), [`Search::search_formed`]
//!   searches it; [`Search::search`] does both.
//!   [`query::conversation_query`] reads a conversation file (a request
//!   body or its `messages` array) into a [`SearchQuery`], through the
//!   core's request inspection.
//! * [`Provider`]: one backend. Built in: `local` (BM25 over a folder, or
//!   the bundled corpus embedded in the binary), `static`, `searxng`,
//!   `perplexity` (also LiteLLM `/v1/search/<tool>`), `http`, `brave`,
//!   `tavily`, `exa`. Hosts may plug their own in with
//!   [`Search::with_provider`].
//! * [`Resends`]: the count of requests the remote providers' and the query
//!   model's HTTP client sent once more on a fresh connection (the
//!   keep-alive race); a host hands one in
//!   ([`Search::with_tls_and_resends`]) and exports it with its metrics.
//!
//! # Adapter rules (applied once, for every provider)
//!
//! 1. The provider is given the configured timeout; when it passes, the
//!    search fails with [`SearchErrorKind::Timeout`].
//! 2. HTML tags are removed from `title`, `text`, `heading` and `author`,
//!    entities are decoded, and whitespace runs become one space.
//! 3. Results without a URL, and results whose URL an earlier result had,
//!    are dropped; at most `max_results` are kept, in the provider's order.
//! 4. `text` is cut to `max_text_chars` characters (a character boundary).
//! 5. A date in `year` (`2024-06-21T15:55:04Z`, `September 9, 2023`) becomes
//!    its four-digit year; a date without one (`20 hours ago`) is dropped.
//! 6. Empty fields become absent.
//!
//! # Example
//!
//! ```
//! use citestream_search::{Search, SearchConfig, SearchQuery};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let search = Search::new(&SearchConfig::default()).unwrap(); // bundled corpus
//! let query = SearchQuery { text: "What is the capital of Portugal?".into(), context: vec![] };
//! let sources = search.search(&query).await.unwrap();
//! assert!(sources.iter().any(|s| s.title.as_deref().unwrap_or("").contains("Portugal")));
//! # }
//! ```

mod adapt;
mod config;
mod http;
mod local;
mod provider;
pub mod query;
mod remote;
mod search;
mod setup;
mod static_file;

pub use citestream::request::SearchQuery;
pub use citestream::sources::Source;

pub use config::{
    DEFAULT_URL_BASE, EndpointConfig, LocalConfig, PathConfig, ProviderKind, QueryMode,
    QueryModelConfig, SearchConfig, SearxngConfig,
};
pub use http::Resends;
pub use local::LocalIndex;
pub use provider::{BoxFuture, Provider, SearchError, SearchErrorKind};
pub use query::{Formation, FormedQuery};
pub use search::Search;
pub use setup::SetupError;

//! [`Search`]: a configured provider plus the shared adapter rules.
//!
//! [`Search::new`] checks the configuration and builds the provider (for
//! `local`, the BM25 index: do it once at start). [`Search::form`] forms
//! the query from the conversation ([`crate::query`], `search.query`);
//! [`Search::search_formed`] runs the provider on it under the timeout,
//! applies the adapter rules ([`crate::adapt`]) and logs a failure with
//! `tracing` (target `citestream_search`, fields `provider`, `kind`,
//! `error`). [`Search::search`] is the two in a row, for hosts that do not
//! log the formed query.

use std::path::Path;
use std::time::Duration;

use crate::config::{ProviderKind, QueryMode, SearchConfig};
use crate::local::LocalIndex;
use crate::query::{self, FormedQuery, QueryModel};
use crate::remote::Remote;
use crate::setup::SetupError;
use crate::static_file::StaticFile;
use crate::{Provider, Resends, SearchError, SearchErrorKind, SearchQuery, Source, adapt};

/// A search backend ready to use, with the adapter rules.
///
/// `Send + Sync`: share one behind an `Arc` across requests.
#[derive(Debug)]
pub struct Search {
    provider: Box<dyn Provider>,
    max_results: usize,
    timeout: Duration,
    max_text_chars: usize,
    query: QueryMode,
    max_query_chars: usize,
    query_timeout: Duration,
    query_model: Option<QueryModel>,
}

impl Search {
    /// Builds the provider `config.provider` names.
    ///
    /// # Errors
    ///
    /// A [`SetupError`] when `max_results`, `timeout`, `max_text_chars`,
    /// `max_query_chars` or `query_timeout` is zero; when `query = "model"`
    /// and `[search.query_model]` lacks `base_url` or `model`; for `local`, when the folder cannot be read or holds no
    /// documents; for `static`, when the file cannot be read or is not a
    /// JSON array of sources; for `http`, when `url` is empty; for `brave`,
    /// `tavily` and `exa`, when `api_key` is empty; for every remote
    /// provider, when the URL is not an `http`/`https` URL.
    pub fn new(config: &SearchConfig) -> Result<Search, SetupError> {
        Search::with_tls(config, None)
    }

    /// [`Search::new`], the remote providers trusting what `tls` trusts
    /// (the host's `[tls]`) instead of the bundled roots only.
    ///
    /// # Errors
    ///
    /// As [`Search::new`].
    pub fn with_tls(
        config: &SearchConfig,
        tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Search, SetupError> {
        Search::with_tls_and_resends(config, tls, &Resends::default())
    }

    /// [`Search::with_tls`], counting in `resends` the requests the remote
    /// provider's and the query model's clients send once more on a fresh
    /// connection (the keep-alive race; see [`Resends`]). A host passes the
    /// same `Resends` to every `Search` it builds (reloads too) and exports
    /// its counts.
    ///
    /// # Errors
    ///
    /// As [`Search::new`].
    pub fn with_tls_and_resends(
        config: &SearchConfig,
        tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
        resends: &Resends,
    ) -> Result<Search, SetupError> {
        let provider: Box<dyn Provider> = match config.provider {
            ProviderKind::Local if config.local.path.is_empty() => Box::new(LocalIndex::bundled()),
            ProviderKind::Local => Box::new(LocalIndex::from_dir_with_url_base(
                Path::new(&config.local.path),
                &config.local.url_base,
            )?),
            ProviderKind::Static => Box::new(StaticFile::load(Path::new(&config.r#static.path))?),
            kind => Box::new(Remote::new(kind, config, tls, resends)?),
        };
        Search::build(provider, config, tls, resends)
    }

    /// A `Search` over any provider, with the limits of `config` (its
    /// `provider` key and sub-tables are not used).
    ///
    /// # Errors
    ///
    /// As [`Search::new`] for the keys other than the provider's.
    pub fn with_provider(
        provider: Box<dyn Provider>,
        config: &SearchConfig,
    ) -> Result<Search, SetupError> {
        Search::build(provider, config, None, &Resends::default())
    }

    /// [`Search::with_provider`], the query model's client trusting `tls`.
    fn build(
        provider: Box<dyn Provider>,
        config: &SearchConfig,
        tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
        resends: &Resends,
    ) -> Result<Search, SetupError> {
        for (key, zero) in [
            ("max_results", config.max_results == 0),
            ("timeout", config.timeout.is_zero()),
            ("max_text_chars", config.max_text_chars == 0),
            ("max_query_chars", config.max_query_chars == 0),
            ("query_timeout", config.query_timeout.is_zero()),
        ] {
            if zero {
                return Err(SetupError::new(format!(
                    "search.{key} must be greater than zero"
                )));
            }
        }
        let query_model = match config.query {
            QueryMode::Model => Some(QueryModel::new(&config.query_model, tls, resends)?),
            QueryMode::Context | QueryMode::Last => None,
        };
        Ok(Search {
            provider,
            max_results: config.max_results,
            timeout: config.timeout,
            max_text_chars: config.max_text_chars,
            query: config.query,
            max_query_chars: config.max_query_chars,
            query_timeout: config.query_timeout,
            query_model,
        })
    }

    /// The provider's config name (`local`, `searxng`, …), for logs and
    /// metrics labels.
    #[must_use]
    pub fn provider_name(&self) -> &'static str {
        self.provider.name()
    }

    /// The query formed from the conversation per `search.query` (see
    /// [`crate::query`]): microseconds for `context` and `last`; for
    /// `model`, one call to the query model bounded by
    /// `search.query_timeout`, and the `context` query when it fails (the
    /// failure is logged, `warn`, with its class). The formed text is
    /// logged at `debug` (target `citestream_search`).
    pub async fn form(&self, query: &SearchQuery) -> FormedQuery {
        let formed = match &self.query_model {
            Some(model) => {
                let asked = tokio::time::timeout(
                    self.query_timeout,
                    model.ask(query, self.max_query_chars),
                )
                .await
                .unwrap_or_else(|_| Err(query::ModelError::timeout()));
                match asked {
                    Ok(text) => FormedQuery::from_model(text),
                    Err(e) => {
                        tracing::warn!(kind = e.label(), error = %e, "query model failed: the query is formed from the context");
                        self.form_context(query, QueryMode::Context)
                    }
                }
            }
            None => self.form_context(query, self.query),
        };
        tracing::debug!(
            query = formed.text(),
            query_chars = formed.chars(),
            formation = formed.formation().label(),
            "search query"
        );
        formed
    }

    fn form_context(&self, query: &SearchQuery, mode: QueryMode) -> FormedQuery {
        query::form(query, mode, self.max_query_chars, &|w| {
            self.provider.subject(w)
        })
    }

    /// [`Search::form`], then [`Search::search_formed`].
    ///
    /// # Errors
    ///
    /// As [`Search::search_formed`].
    pub async fn search(&self, query: &SearchQuery) -> Result<Vec<Source>, SearchError> {
        let formed = self.form(query).await;
        self.search_formed(&formed).await
    }

    /// Searches for a formed query.
    ///
    /// Returns at most `max_results` sources after the adapter rules; an
    /// empty list when nothing was found. Dropping the future cancels the
    /// search.
    ///
    /// # Errors
    ///
    /// A [`SearchError`] when the provider failed or the timeout passed; it
    /// is already logged (`warn`). Treat it as "no sources" (docs/reference/request.md, "Quota"):
    /// it must not fail the request.
    pub async fn search_formed(&self, query: &FormedQuery) -> Result<Vec<Source>, SearchError> {
        let name = self.provider.name();
        let result =
            match tokio::time::timeout(self.timeout, self.provider.search(query, self.max_results))
                .await
            {
                Ok(r) => r,
                Err(_) => Err(SearchError::new(
                    SearchErrorKind::Timeout,
                    format!(
                        "{name}: no answer within {}",
                        humantime_serde::re::humantime::format_duration(self.timeout)
                    ),
                )),
            };
        match result {
            Ok(sources) => Ok(adapt::apply(sources, self.max_results, self.max_text_chars)),
            Err(e) => {
                tracing::warn!(provider = name, kind = e.kind().label(), error = %e, "search failed");
                Err(e)
            }
        }
    }
}

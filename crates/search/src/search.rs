//! [`Search`]: a configured provider plus the shared adapter rules.
//!
//! [`Search::new`] checks the configuration and builds the provider (for
//! `local`, the BM25 index: do it once at start). [`Search::search`] runs
//! the provider under the timeout, applies the adapter rules
//! ([`crate::adapt`]) and logs a failure with `tracing` (target
//! `citestream_search`, fields `provider`, `kind`, `error`).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::config::{ProviderKind, SearchConfig};
use crate::local::LocalIndex;
use crate::remote::{self, Remote};
use crate::static_file::StaticFile;
use crate::{Provider, SearchError, SearchErrorKind, SearchQuery, Source, adapt};

/// A search backend ready to use, with the adapter rules.
///
/// `Send + Sync`: share one behind an `Arc` across requests.
#[derive(Debug)]
pub struct Search {
    provider: Box<dyn Provider>,
    max_results: usize,
    timeout: Duration,
    max_text_chars: usize,
}

/// A configuration the search cannot start with (a missing file, an empty
/// folder, a missing URL or key). The message names the key and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupError {
    message: String,
}

impl SetupError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        SetupError {
            message: message.into(),
        }
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SetupError {}

impl Search {
    /// Builds the provider `config.provider` names.
    ///
    /// # Errors
    ///
    /// A [`SetupError`] when `max_results`, `timeout` or `max_text_chars`
    /// is zero; for `local`, when the folder cannot be read or holds no
    /// documents; for `static`, when the file cannot be read or is not a
    /// JSON array of sources; for `http`, when `url` is empty; for `brave`,
    /// `tavily` and `exa`, when `api_key` is empty; for every remote
    /// provider, when the URL is not an `http`/`https` URL.
    pub fn new(config: &SearchConfig) -> Result<Search, SetupError> {
        let provider: Box<dyn Provider> = match config.provider {
            ProviderKind::Local if config.local.path.is_empty() => Box::new(LocalIndex::bundled()),
            ProviderKind::Local => Box::new(LocalIndex::from_dir_with_url_base(
                Path::new(&config.local.path),
                &config.local.url_base,
            )?),
            ProviderKind::Static => Box::new(StaticFile::load(Path::new(&config.r#static.path))?),
            kind => Box::new(Remote::new(kind, config)?),
        };
        Search::with_provider(provider, config)
    }

    /// A `Search` over any provider, with the limits of `config` (its
    /// `provider` key and sub-tables are not used).
    ///
    /// # Errors
    ///
    /// A [`SetupError`] when `max_results`, `timeout` or `max_text_chars`
    /// is zero.
    pub fn with_provider(
        provider: Box<dyn Provider>,
        config: &SearchConfig,
    ) -> Result<Search, SetupError> {
        for (key, zero) in [
            ("max_results", config.max_results == 0),
            ("timeout", config.timeout.is_zero()),
            ("max_text_chars", config.max_text_chars == 0),
        ] {
            if zero {
                return Err(SetupError::new(format!(
                    "search.{key} must be greater than zero"
                )));
            }
        }
        Ok(Search {
            provider,
            max_results: config.max_results,
            timeout: config.timeout,
            max_text_chars: config.max_text_chars,
        })
    }

    /// The provider's config name (`local`, `searxng`, …), for logs and
    /// metrics labels.
    #[must_use]
    pub fn provider_name(&self) -> &'static str {
        self.provider.name()
    }

    /// Searches for `query.text` (the earlier turns in `query.context` are
    /// not used by the built-in providers).
    ///
    /// Returns at most `max_results` sources after the adapter rules; an
    /// empty list when nothing was found. Dropping the future cancels the
    /// search.
    ///
    /// # Errors
    ///
    /// A [`SearchError`] when the provider failed or the timeout passed; it
    /// is already logged (`warn`). Treat it as "no sources" (SPEC
    /// section 4): it must not fail the request.
    pub async fn search(&self, query: &SearchQuery) -> Result<Vec<Source>, SearchError> {
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

/// The URL a remote provider uses: `configured`, or `default` when empty.
pub(crate) fn endpoint_url(
    kind: ProviderKind,
    configured: &str,
    default: &str,
) -> Result<String, SetupError> {
    let url = if configured.is_empty() {
        default
    } else {
        configured
    };
    if url.is_empty() {
        return Err(SetupError::new(format!(
            "search.{kind}.url is required for provider \"{kind}\""
        )));
    }
    remote::check_url(url)
        .map_err(|e| SetupError::new(format!("search.{kind}.url = {url:?}: {e}")))?;
    Ok(url.to_owned())
}

//! The request side of the system for any host (the request rules of
//! [docs/reference/request.md](../../../docs/reference/request.md)):
//! auth → account → inspect → quota reserve → search → inject, with the
//! reservation handed on to the response side. Hosts drive it through
//! [`crate::exchange::Exchange`], which also owns the response rules.
//!
//! Contract:
//! * [`Grounding::prepare`] takes the endpoint, the request headers and
//!   the whole request body, and returns either an [`ErrorReply`] (401 for
//!   a missing or unknown key in `keys` mode, 400 for a body the flow
//!   refuses), or a [`Grounded`] request: the body to send upstream, the
//!   [`ResponsePlan`](citestream::flow::ResponsePlan) when the response must be rewritten, the
//!   [`Outcome`], the values of the `x-citestream-search` and
//!   `x-citestream-searches-remaining` headers, and the search the sources
//!   used, still reserved (the core's [`citestream::quota::Reservation`]
//!   in [`Grounded::prepared`], holding the host's [`Store`]): commit it
//!   when the upstream answers 2xx, release it otherwise; dropping it
//!   releases it.
//! * A search failure, an empty result, a used-up quota or an unreachable
//!   quota store never fail the request: it goes upstream without sources
//!   (docs/reference/responses.md, "Errors and bad input").
//! * Dropping the future returned by `prepare` (the client went away)
//!   cancels the search and releases an unfinished reservation at once,
//!   in the Redis store too (see [`crate::store`]).
//! * Metrics: each search run (by result, with its duration), quota
//!   exhaustions and quota store errors. Requests are counted by the
//!   exchange, once their status is known.
//!
//! Body size limits are the host's job (it reads the body); a host answers
//! an over-size body with [`ErrorReply::too_large`].

use std::sync::Arc;
use std::time::Instant;

use crate::telemetry::{self, Instrument, Key};

use bytes::Bytes;
use citestream::RewriteOptions;
use citestream::flow::{Flow, Outcome, Prepared};
use citestream::quota::{Clock, QuotaStore, SystemClock, utc_day};
use citestream::request::{Endpoint, InjectOptions, SearchQuery};
use citestream_search::{Search, SearchErrorKind};

use crate::auth::{Account, Accounts};
use crate::config::{AuthMode, Config, ConfigError};
use crate::errors::{ErrorReply, ErrorShape};
use crate::metrics::{Metrics, SearchResult};
use crate::store::{SharedClock, Store};

/// The request side, built once per process from the config and shared by
/// every request (`Arc<Grounding>`).
#[derive(Debug)]
pub struct Grounding {
    accounts: Accounts,
    store: Store,
    search: Search,
    cache: crate::cache::SearchCache,
    inject: InjectOptions,
    rewrite: RewriteOptions,
    metrics: Arc<Metrics>,
    clock: SharedClock,
    limits: Limits,
    keys: KeyRules,
    tls: Arc<rustls::ClientConfig>,
}

/// The size limits of `[server]` and `[rewrite]`, and the response
/// body's idle limit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// `server.max_request_body`.
    pub(crate) max_request_body: u64,
    /// `rewrite.max_whole_body`.
    pub(crate) max_whole_body: usize,
    /// `upstream.idle_timeout` (zero: none).
    pub(crate) idle_timeout: std::time::Duration,
}

/// What the upstream gets for credentials (`[upstream]`, `auth.mode`).
#[derive(Clone, Debug)]
pub(crate) struct KeyRules {
    /// `upstream.api_key`, when set.
    pub(crate) api_key: Option<String>,
    /// `auth.mode = "keys"` and not `upstream.forward_client_auth`: the
    /// client's key headers are removed.
    pub(crate) strip_client: bool,
}

/// The start-up warning for `open` mode with an upstream key on an address
/// other hosts can reach, if `cfg` deserves it.
#[must_use]
pub fn key_warning(cfg: &Config) -> Option<String> {
    let ip = cfg.server.listen.ip();
    (cfg.auth.mode == AuthMode::Open && !cfg.upstream.api_key.is_empty() && !ip.is_loopback()).then(
        || {
            format!(
                "auth.mode = \"open\" with upstream.api_key set, listening on {}: \
                 anyone who can reach it spends that key (use auth.mode = \"keys\")",
                cfg.server.listen
            )
        },
    )
}

/// What a search that ran tells the log.
struct Ran {
    cache: crate::cache::CacheResult,
    time: std::time::Duration,
    query_chars: usize,
}

/// A request ready to go upstream: what the core's flow decided
/// ([`Prepared`]: the body to forward, the
/// [`ResponsePlan`](citestream::flow::ResponsePlan), the
/// [`Outcome`], the reserved search) and what the host learnt on the way.
#[derive(Debug)]
pub struct Grounded {
    /// The flow's end. Its `reservation` (`Some` only with a `plan`) is
    /// the search the sources used, reserved in the host's [`Store`] until
    /// the upstream answers: commit it on a 2xx, release it otherwise;
    /// dropping it releases it at once (see [`crate::store`]). Its
    /// `errors` are already logged and counted.
    pub prepared: Prepared<Store>,
    /// The account's searches left today, when a search was asked for and
    /// the quota store could be asked.
    pub remaining: Option<u32>,
    /// Whether the search came from the search cache (the log's `cache`).
    pub cache: crate::cache::CacheResult,
    /// The account id (for logs).
    pub account: String,
    /// The request asked for a streamed response.
    pub stream: bool,
    /// The request's `model` (for logs).
    pub model: Option<String>,
    /// How long the search took, when one ran.
    pub search_time: Option<std::time::Duration>,
    /// Characters of the formed search query (what the provider was
    /// given), when one was searched.
    pub query_chars: Option<usize>,
}

impl Grounded {
    /// The `x-citestream-search` header value.
    #[must_use]
    pub fn search_header(&self) -> &'static str {
        self.prepared.outcome.as_str()
    }

    /// The `x-citestream-searches-remaining` header value, when there is
    /// one.
    #[must_use]
    pub fn remaining_header(&self) -> Option<String> {
        self.remaining.map(|n| n.to_string())
    }
}

impl Grounding {
    /// Builds the accounts, the quota store (not connected yet) and the
    /// search provider of `cfg`, on the system clock.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key at fault (e.g. a search provider
    /// that cannot start, an invalid Redis URL).
    pub async fn new(cfg: &Config) -> Result<Grounding, ConfigError> {
        Grounding::with_clock(cfg, Arc::new(SystemClock)).await
    }

    /// [`Grounding::new`] on another clock (tests move it across
    /// midnight).
    ///
    /// # Errors
    /// As [`Grounding::new`].
    pub async fn with_clock(cfg: &Config, clock: Arc<dyn Clock>) -> Result<Grounding, ConfigError> {
        Grounding::build(cfg, clock, Arc::new(Metrics::new())).await
    }

    /// [`Grounding::with_clock`] recording in `metrics` (the search's
    /// resends too).
    async fn build(
        cfg: &Config,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> Result<Grounding, ConfigError> {
        let clock = SharedClock(clock);
        let accounts = Accounts::from_config(cfg)?;
        let store = Store::from_config(cfg, clock.clone())?;
        let cache = crate::cache::SearchCache::from_config(cfg, &store)?;
        // The setup error's message names the key itself.
        let tls = crate::tls::client_config(&cfg.tls)?;
        let search =
            Search::with_tls_and_resends(&cfg.search, Some(&tls), metrics.search_resends())
                .map_err(|e| ConfigError::new("", e.to_string()))?;
        let keys = KeyRules {
            api_key: (!cfg.upstream.api_key.is_empty()).then(|| cfg.upstream.api_key.clone()),
            strip_client: cfg.auth.mode == AuthMode::Keys && !cfg.upstream.forward_client_auth,
        };
        if let Some(w) = key_warning(cfg) {
            tracing::warn!("{w}");
        }
        Ok(Grounding {
            accounts,
            store,
            search,
            cache,
            inject: cfg.inject_options(),
            rewrite: cfg.rewrite_options(),
            metrics,
            clock,
            limits: Limits {
                max_request_body: cfg.server.max_request_body.0,
                max_whole_body: usize::try_from(cfg.rewrite.max_whole_body.0).unwrap_or(usize::MAX),
                idle_timeout: cfg.upstream.idle_timeout,
            },
            keys,
            tls,
        })
    }

    /// The request side of a reloaded `cfg` (accounts and keys, plans,
    /// search provider, inject and rewrite options all `cfg`'s), keeping
    /// this one's metrics registry and clock, and its quota store when
    /// `keep_store` (the counts survive; see
    /// [`crate::reload::keep_store`]). A local index is built here: call
    /// it off the serving path.
    ///
    /// # Errors
    /// As [`Grounding::new`].
    pub async fn reloaded(&self, cfg: &Config, keep_store: bool) -> Result<Grounding, ConfigError> {
        let mut g = Grounding::build(cfg, self.clock.0.clone(), self.metrics.clone()).await?;
        if keep_store {
            g.store = self.store.clone();
        }
        Ok(g)
    }

    /// The TLS trust of `[tls]` ([`crate::tls`]), for the host's own
    /// outgoing clients (the gateway's upstream).
    #[must_use]
    pub fn tls(&self) -> &Arc<rustls::ClientConfig> {
        &self.tls
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    pub(crate) fn key_rules(&self) -> &KeyRules {
        &self.keys
    }

    /// The metrics registry (hosts record upstream latency, event latency
    /// and open streams in it and serve [`Metrics::render`]).
    #[must_use]
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The response rewriter's options (`[rewrite]`).
    #[must_use]
    pub fn rewrite_options(&self) -> &RewriteOptions {
        &self.rewrite
    }

    /// The quota store.
    #[must_use]
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The accounts.
    #[must_use]
    pub fn accounts(&self) -> &Accounts {
        &self.accounts
    }

    /// The search provider.
    #[must_use]
    pub fn search(&self) -> &Search {
        &self.search
    }

    /// Authenticates a request that is not grounded (any other `/v1/`
    /// path), with the error shape of `path`.
    ///
    /// # Errors
    /// A 401 [`ErrorReply`] in `keys` mode without a known key.
    pub fn authenticate(
        &self,
        path: &str,
        headers: &http::HeaderMap,
    ) -> Result<&Account, ErrorReply> {
        self.accounts
            .authenticate_headers(headers)
            .map_err(|e| ErrorReply::unauthorized(ErrorShape::for_path(path), &e.to_string()))
    }

    /// Runs the request side of one `POST /v1/chat/completions` or
    /// `POST /v1/messages`.
    ///
    /// # Errors
    /// An [`ErrorReply`] to answer instead of going upstream: 401 (auth)
    /// or 400 (a body that is not a JSON object, a `web_search` that is not
    /// a boolean).
    pub async fn prepare(
        &self,
        endpoint: Endpoint,
        headers: &http::HeaderMap,
        body: Bytes,
    ) -> Result<Grounded, ErrorReply> {
        let auth = telemetry::span("auth");
        let account = match auth.in_scope(|| self.accounts.authenticate_headers(headers)) {
            Ok(a) => a,
            Err(e) => return Err(ErrorReply::unauthorized(endpoint.into(), &e.to_string())),
        };
        auth.record_str(Key::Account, account.id());
        drop(auth);
        let limit = account.searches_per_day();
        let reserve = telemetry::span("quota.reserve");
        reserve.record_str(Key::Account, account.id());
        let flow = match Flow::start(self.store.clone(), account.id(), limit, endpoint, body)
            .instrument(reserve)
            .await
        {
            Ok(f) => f,
            Err(e) => return Err(ErrorReply::from(&e)),
        };
        let asked = flow.inspection().web_search();
        let stream = flow.inspection().stream();
        let model = flow.inspection().model().map(str::to_owned);
        let (prepared, ran) = match flow.query().cloned() {
            None => (flow.finish(Vec::new(), &self.inject).await, None),
            Some(q) => {
                let (prepared, ran) = self.search_and_finish(flow, &q).await;
                (prepared, Some(ran))
            }
        };
        let (cache, search_time, query_chars) = match ran {
            Some(r) => (r.cache, Some(r.time), Some(r.query_chars)),
            None => (crate::cache::CacheResult::Off, None, None),
        };
        for e in &prepared.errors {
            self.metrics.quota_error();
            tracing::warn!(error = %e, account = account.id(), "quota store");
        }
        let remaining = match prepared.outcome {
            _ if !asked => None,
            Outcome::QuotaExhausted => {
                self.metrics.quota_exhausted();
                Some(0)
            }
            Outcome::QuotaUnavailable => None,
            _ => self.remaining(account.id(), limit).await,
        };
        Ok(Grounded {
            prepared,
            remaining,
            cache,
            account: account.id().to_owned(),
            stream,
            model,
            search_time,
            query_chars,
        })
    }

    /// Forms the query of `q`, runs the search (through the cache) and
    /// ends `flow` with what it found, or failed; counts the search.
    async fn search_and_finish(
        &self,
        flow: Flow<Store>,
        q: &SearchQuery,
    ) -> (Prepared<Store>, Ran) {
        let t0 = Instant::now();
        // The cache keys on the query the provider is given, and the log
        // counts its characters.
        let formed = self.search.form(q).await;
        let query_chars = formed.text().chars().count();
        tracing::debug!(query = %formed.text(), "search query");
        let span = telemetry::span("search");
        span.record_static(Key::Provider, self.search.provider_name());
        let searched = (self.cache)
            .search(self.search.provider_name(), formed.text(), || {
                self.search.search_formed(&formed)
            })
            .instrument(span.clone())
            .await;
        if let Some(c) = searched.cache.as_str() {
            span.record_static(Key::Cache, c);
        }
        let ran = Ran {
            cache: searched.cache,
            time: t0.elapsed(),
            query_chars,
        };
        if let Some(hit) = ran.cache.is_hit() {
            self.metrics.search_cache(hit);
        }
        let prepared = match searched.result {
            Ok(found) => {
                span.record_int(Key::Results, i64::try_from(found.len()).unwrap_or(i64::MAX));
                let r = if found.is_empty() {
                    SearchResult::NothingFound
                } else {
                    SearchResult::Found
                };
                self.metrics.search(r, t0.elapsed());
                flow.finish(found, &self.inject).await
            }
            Err(e) => {
                let r = if e.kind() == SearchErrorKind::Timeout {
                    SearchResult::Timeout
                } else {
                    SearchResult::Error
                };
                self.metrics.search(r, t0.elapsed()); // `search` logged it
                flow.fail().await
            }
        };
        (prepared, ran)
    }

    /// Searches left today: the limit less committed and reserved ones.
    async fn remaining(&self, account: &str, limit: u32) -> Option<u32> {
        let day = utc_day(self.clock.unix_secs());
        match self.store.usage(account, day).await {
            Ok(u) => Some(limit.saturating_sub(u.committed.saturating_add(u.reserved))),
            Err(e) => {
                self.metrics.quota_error();
                tracing::warn!(error = %e, account, "quota store");
                None
            }
        }
    }
}

//! One request through an embedding gateway: inspect, reserve, (the caller
//! searches), inject, and the reservation handed on to be committed or
//! released on the upstream's answer.
//!
//! The flow does no I/O of its own except through the [`QuotaStore`] it is
//! given; the caller runs the search and sends the result upstream.
//!
//! ```text
//! body ──start──► Flow ──query()──► caller searches ──finish(found)/fail()──► Prepared
//!        │ 400 (RequestError)                                                │ body to forward
//!        ▼                                                                   │ plan: Some(ResponsePlan) → rewrite the response
//!   answer it                                                                ▼ plan: None → pass the response through
//! ```
//!
//! With `web_search` absent or false, nothing to search for, the day's
//! searches used up, the quota store unreachable, nothing found or the
//! search failed, the body goes upstream without sources (only
//! `web_search` removed) and `plan` is `None`: the response passes through
//! untouched.
//!
//! Quota: a search that found nothing or failed is released here. A search
//! whose sources were injected is **not** committed here: it stays
//! reserved in [`Prepared::reservation`], and the caller commits it when
//! the upstream accepts the grounded request (a 2xx status) and releases
//! it otherwise (an error status, no answer, the client gone); dropping
//! it releases it. A reserved search counts as used meanwhile, so
//! concurrent requests never exceed the limit.
//!
//! # Example
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use citestream::quota::MemoryStore;
//! use citestream::flow::Flow;
//! use citestream::request::{Endpoint, InjectOptions};
//! use citestream::sources::Source;
//!
//! let store = MemoryStore::new();
//! let body = br#"{"model":"m","web_search":true,"messages":[{"role":"user","content":"q?"}]}"#.to_vec();
//! let flow = match Flow::start(&store, "acct", 100, Endpoint::ChatCompletions, body).await {
//!     Ok(f) => f,
//!     Err(e) => { let _ = (e.status(), e.body()); return; } // answer the 400
//! };
//! let prepared = flow
//!     .run(&InjectOptions::default(), |query| async move {
//!         assert_eq!(query.text, "q?"); // search the web for this
//!         Ok::<_, std::io::Error>(vec![Source { title: Some("T".into()), url: Some("https://t/".into()), ..Default::default() }])
//!     })
//!     .await;
//! assert!(prepared.plan.is_some());
//! // The upstream answered 2xx: the search counts.
//! prepared.reservation.unwrap().commit().await.unwrap();
//! # });
//! ```

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use crate::quota::{QuotaError, QuotaStore, Reservation, reserve};
use crate::sources::{Source, Sources};

use crate::request::{
    Endpoint, InjectOptions, Inspection, RequestError, SearchQuery, inject, inspect,
};

/// What the response rewriter needs to know about a request that got
/// sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponsePlan {
    /// The endpoint (response shape).
    pub endpoint: Endpoint,
    /// The sources given to the model, numbered from 1.
    pub sources: Arc<Sources>,
    /// Choices requested (`n`; 1 on `/v1/messages`).
    pub n: u32,
    /// The request asked for a stream.
    pub stream: bool,
    /// `stream_options.include_usage` was true.
    pub include_usage: bool,
}

/// Why a request went (or did not go) to the model with sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// `web_search` was absent or false.
    NotRequested,
    /// `web_search` was true but the last user message has no text.
    NoQuery,
    /// The account's searches for the day are used up.
    QuotaExhausted,
    /// The quota store could not be asked (see [`Prepared::errors`]).
    QuotaUnavailable,
    /// The search found nothing (the reservation was released).
    NothingFound,
    /// The search failed (the reservation was released).
    SearchFailed,
    /// Sources were injected (the search is reserved until the upstream
    /// answers).
    Injected,
}

impl Outcome {
    /// Every outcome, in a fixed order (for tables indexed by outcome).
    pub const ALL: [Outcome; 7] = [
        Outcome::NotRequested,
        Outcome::NoQuery,
        Outcome::Injected,
        Outcome::NothingFound,
        Outcome::SearchFailed,
        Outcome::QuotaExhausted,
        Outcome::QuotaUnavailable,
    ];

    /// The outcome's name, as the hosts' `x-citestream-search` header and
    /// `search` metric label spell it: `not-requested`, `no-query`,
    /// `injected`, `nothing-found`, `failed`, `quota-exhausted`,
    /// `quota-unavailable`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::NotRequested => "not-requested",
            Outcome::NoQuery => "no-query",
            Outcome::Injected => "injected",
            Outcome::NothingFound => "nothing-found",
            Outcome::SearchFailed => "failed",
            Outcome::QuotaExhausted => "quota-exhausted",
            Outcome::QuotaUnavailable => "quota-unavailable",
        }
    }
}

/// The end of a [`Flow`]: what to send upstream and how to treat the
/// response.
#[derive(Debug)]
pub struct Prepared<S: QuotaStore> {
    /// The body to forward upstream (without `web_search`; with sources
    /// when `plan` is `Some`).
    pub body: Bytes,
    /// `Some` when sources were injected: configure the response rewriter
    /// with it. `None`: pass the response through untouched.
    pub plan: Option<ResponsePlan>,
    /// Why.
    pub outcome: Outcome,
    /// Quota store errors met on the way, to report (log, metrics). They
    /// never fail the request.
    pub errors: Vec<QuotaError>,
    /// The search the injected sources used, still reserved (`Some` exactly
    /// when `plan` is): commit it when the upstream answers 2xx, release it
    /// otherwise. Dropping it releases it.
    pub reservation: Option<Reservation<S>>,
}

/// A request between inspection and the search. Created by
/// [`Flow::start`]; ended by [`Flow::finish`], [`Flow::fail`] or
/// [`Flow::run`]. Dropping it releases its reservation (if the store can do
/// that synchronously).
#[derive(Debug)]
pub struct Flow<S: QuotaStore> {
    inspection: Inspection,
    reservation: Option<Reservation<S>>,
    outcome: Outcome,
    errors: Vec<QuotaError>,
}

impl<S: QuotaStore> Flow<S> {
    /// Inspects `body` and, when it asks for a search and has a query,
    /// reserves one search of `account` (daily `limit`) in `store`:
    /// `&store`, or an owned handle when the reservation must outlive the
    /// caller's borrow (a host holding it until the upstream answers).
    ///
    /// # Errors
    /// The [`RequestError`] of [`inspect`] (a 400 to answer). Quota
    /// problems are not errors: see [`Flow::outcome`] and [`Flow::errors`].
    pub async fn start(
        store: S,
        account: &str,
        limit: u32,
        endpoint: Endpoint,
        body: impl Into<Bytes>,
    ) -> Result<Self, RequestError> {
        let inspection = inspect(endpoint, body)?;
        let mut flow = Flow {
            inspection,
            reservation: None,
            outcome: Outcome::NotRequested,
            errors: Vec::new(),
        };
        if !flow.inspection.web_search() {
            return Ok(flow);
        }
        if flow.inspection.query().is_none() {
            flow.outcome = Outcome::NoQuery;
            return Ok(flow);
        }
        match reserve(store, account, limit).await {
            Ok(Some(r)) => flow.reservation = Some(r),
            Ok(None) => flow.outcome = Outcome::QuotaExhausted,
            Err(e) => {
                flow.outcome = Outcome::QuotaUnavailable;
                flow.errors.push(e);
            }
        }
        Ok(flow)
    }

    /// What to search for: `Some` only when the caller should run a search
    /// now (asked for, has a query, and a search was reserved).
    #[must_use]
    pub fn query(&self) -> Option<&SearchQuery> {
        self.reservation.as_ref().and(self.inspection.query())
    }

    /// The inspected request.
    #[must_use]
    pub fn inspection(&self) -> &Inspection {
        &self.inspection
    }

    /// Why no search will run, when [`Flow::query`] is `None`; `None` while
    /// a search is pending.
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.reservation.is_none().then_some(self.outcome)
    }

    /// Quota store errors so far.
    #[must_use]
    pub fn errors(&self) -> &[QuotaError] {
        &self.errors
    }

    fn pass(self, outcome: Outcome, errors: Vec<QuotaError>) -> Prepared<S> {
        Prepared {
            body: self.inspection.into_body(),
            plan: None,
            outcome,
            errors,
            reservation: None,
        }
    }

    /// Ends the flow with the search results. With at least one source, the
    /// sources are injected and the reservation handed on in
    /// [`Prepared::reservation`]; with none, the reservation is released and
    /// the body passes without sources. When no search was pending
    /// ([`Flow::query`] was `None`), `found` is ignored.
    pub async fn finish(mut self, found: Vec<Source>, options: &InjectOptions) -> Prepared<S> {
        let Some(r) = self.reservation.take() else {
            let (o, e) = (self.outcome, std::mem::take(&mut self.errors));
            return self.pass(o, e);
        };
        let mut errors = std::mem::take(&mut self.errors);
        if found.is_empty() {
            if let Err(e) = r.release().await {
                errors.push(e);
            }
            return self.pass(Outcome::NothingFound, errors);
        }
        let sources = Sources::new(found);
        let i = &self.inspection;
        match inject(i.endpoint(), i.body(), &sources, options) {
            Ok(body) => {
                let plan = ResponsePlan {
                    endpoint: i.endpoint(),
                    sources: Arc::new(sources),
                    n: i.n(),
                    stream: i.stream(),
                    include_usage: i.include_usage(),
                };
                Prepared {
                    body: Bytes::from(body),
                    plan: Some(plan),
                    outcome: Outcome::Injected,
                    errors,
                    reservation: Some(r),
                }
            }
            Err(_) => {
                if let Err(e) = r.release().await {
                    errors.push(e);
                }
                self.pass(Outcome::NothingFound, errors)
            }
        }
    }

    /// Ends the flow after a failed search (error, timeout): the
    /// reservation is released and the body passes without sources.
    pub async fn fail(mut self) -> Prepared<S> {
        let mut errors = std::mem::take(&mut self.errors);
        match self.reservation.take() {
            Some(r) => {
                if let Err(e) = r.release().await {
                    errors.push(e);
                }
                self.pass(Outcome::SearchFailed, errors)
            }
            None => {
                let o = self.outcome;
                self.pass(o, errors)
            }
        }
    }

    /// Runs `search` on the query when one is pending, then
    /// [`Flow::finish`] or [`Flow::fail`]. `search` is not called when no
    /// search is pending.
    pub async fn run<F, Fut, E>(self, options: &InjectOptions, search: F) -> Prepared<S>
    where
        F: FnOnce(SearchQuery) -> Fut,
        Fut: Future<Output = Result<Vec<Source>, E>>,
    {
        let Some(q) = self.query().cloned() else {
            return self.finish(Vec::new(), options).await;
        };
        match search(q).await {
            Ok(found) => self.finish(found, options).await,
            Err(_) => self.fail().await,
        }
    }
}

impl ResponsePlan {
    /// The streaming rewriter for this response: `opts` with `n` taken from
    /// the request.
    #[must_use]
    pub fn stream_rewriter(&self, opts: &crate::RewriteOptions) -> crate::Rewriter {
        let mut opts = opts.clone();
        opts.n(self.n);
        crate::Rewriter::new(self.endpoint, self.sources.clone(), opts)
    }

    /// Rewrites a whole (non-streamed) response body for this endpoint;
    /// borrowed when unchanged (error bodies, invalid JSON).
    #[must_use]
    pub fn rewrite_body<'a>(
        &self,
        body: &'a [u8],
        opts: &crate::RewriteOptions,
    ) -> std::borrow::Cow<'a, [u8]> {
        crate::rewrite::rewrite_body(self.endpoint, body, &self.sources, opts)
    }
}

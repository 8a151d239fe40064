//! What every citestream host (`citestream serve`, `citestream ext-proc`,
//! the Python package) shares, free of any HTTP server stack:
//!
//! * [`config`]: the config file (docs/reference/config.md: TOML, `${VAR}`, the
//!   `CITESTREAM_*` overrides, one-line start-up errors naming the key);
//! * [`auth`]: accounts, plans and hashed API keys;
//! * [`store`]: the configured quota store (memory, Redis or a Redis
//!   Cluster), releasing reservations of cancelled requests at once;
//! * [`cache`]: the search cache, in the process or in the quota's Redis;
//! * [`grounding`]: the request side (auth → account → inspect → quota →
//!   search → inject) and the values of the `x-citestream-*` headers;
//! * [`errors`]: error bodies in the endpoint's shape (OpenAI or
//!   Anthropic);
//! * [`metrics`]: the Prometheus registry;
//! * [`telemetry`]: JSON log lines and OpenTelemetry traces (`[log]`).
//! * [`reload`]: the config reloaded on SIGHUP while serving.
//!
//! Hosts pass `http::HeaderMap`s (or raw header values) and `Bytes`; they
//! own the server, the upstream connection and the response path, which
//! they drive with [`citestream::flow::ResponsePlan`].
//!
//! # Example
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use citestream::request::Endpoint;
//! use citestream_host::config::Config;
//! use citestream_host::grounding::Grounding;
//!
//! let cfg = Config::from_toml_with_env("", &|_| None).unwrap(); // the embedded defaults
//! let g = Grounding::new(&cfg).await.unwrap();
//! let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
//! let req = g
//!     .prepare(Endpoint::ChatCompletions, &http::HeaderMap::new(), body.to_vec().into())
//!     .await
//!     .unwrap();
//! assert_eq!(req.search_header(), "not-requested");
//! assert!(req.prepared.plan.is_none());
//! # });
//! ```

pub mod auth;
pub mod cache;
pub mod config;
pub mod errors;
pub mod exchange;
pub mod grounding;
pub mod metrics;
pub mod reload;
pub mod store;
pub mod telemetry;
pub mod tls;

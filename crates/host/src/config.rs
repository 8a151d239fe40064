//! The config file of `citestream serve` and `citestream ext-proc` (docs/reference/config.md),
//! shared by every host.
//!
//! Contract:
//! * The file is TOML; every key is optional ([`Config::default`] is the
//!   embedded default: listen `127.0.0.1:8080`, local search over the
//!   bundled corpus, the demo upstream, memory quota, open auth) and an
//!   unknown key is an error.
//! * `${VAR}` in any string value is replaced by the environment variable
//!   `VAR` before the value is read; an unset variable is an error naming
//!   it and the key. `$${` stands for a literal `${`.
//! * `CITESTREAM_LISTEN`, `CITESTREAM_UPSTREAM_URL` and
//!   `CITESTREAM_REDIS_URL`, when set (even to ""), replace `server.listen`,
//!   `upstream.base_url` and `quota.redis_url`; a `--listen` flag is applied
//!   by the caller afterwards ([`Config::set_listen`]).
//! * Relative paths in a file (`search.local.path`, `search.static.path`)
//!   resolve against the folder of that file, not the working directory
//!   ([`Config::resolve_paths`]); the embedded defaults (no file) keep
//!   theirs relative to the working directory.
//! * Durations are written `"30s"`, `"500ms"`, `"2m"`; sizes `"32MiB"`,
//!   `"64KiB"`, `"1MB"` or a plain number of bytes.
//! * Every error is a [`ConfigError`] whose `Display` is one line naming
//!   the key (`server.shutdown_grace: invalid duration "30x": …`); hosts
//!   print it and exit with status 2.
//!
//! # Example
//! ```
//! use citestream_host::config::Config;
//!
//! let env = |name: &str| (name == "KEY").then(|| "secret".to_owned());
//! let cfg = Config::from_toml_with_env(
//!     "[upstream]\nbase_url = \"http://127.0.0.1:9000\"\napi_key = \"${KEY}\"\n",
//!     &env,
//! )
//! .unwrap();
//! assert_eq!(cfg.upstream.api_key, "secret");
//!
//! let err = Config::from_toml_with_env("[server]\nshutdown_grace = \"30x\"\n", &env).unwrap_err();
//! assert!(err.to_string().starts_with("server.shutdown_grace: "));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use citestream::request::{InjectOptions, PLACEHOLDERS, Placement, Template};
use citestream::{Dialect, OffsetUnit, RewriteOptions};
use serde::Deserialize;

pub use citestream_search::SearchConfig;

mod units;

pub use units::ByteSize;

/// The whole config file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Config {
    /// `[server]`.
    pub server: ServerConfig,
    /// `[upstream]` (not used by `ext-proc`: Envoy routes the request).
    pub upstream: UpstreamConfig,
    /// `[[routes]]`: upstreams by the request's `model`, first match wins.
    pub routes: Vec<RouteConfig>,
    /// `[tls]`: trust and client certificate of every outgoing HTTPS
    /// connection.
    pub tls: TlsConfig,
    /// `[search]` and its provider tables.
    pub search: SearchConfig,
    /// `[rewrite]`.
    pub rewrite: RewriteConfig,
    /// `[inject]`.
    pub inject: InjectConfig,
    /// `[quota]`.
    pub quota: QuotaConfig,
    /// `[auth]`.
    pub auth: AuthConfig,
    /// `[plans.<name>]`.
    pub plans: BTreeMap<String, PlanConfig>,
    /// `[[accounts]]`.
    pub accounts: Vec<AccountConfig>,
    /// `[log]`: log level and trace export.
    pub log: LogConfig,
    /// `[ext_proc]`: settings only `citestream ext-proc` reads.
    pub ext_proc: ExtProcConfig,
}

/// `log.level`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Failures only.
    Error,
    /// Failures and 5xx request lines.
    Warn,
    /// One line per request (the default).
    #[default]
    Info,
    /// Probes and protocol detail too.
    Debug,
}

/// `[log]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct LogConfig {
    /// `error | warn | info | debug`; `RUST_LOG`, when set, overrides it.
    pub level: LogLevel,
    /// `""` (the default): no traces; else an OTLP/HTTP collector's base
    /// URL (`http://127.0.0.1:4318`), which gets the spans at
    /// `{otlp_endpoint}/v1/traces`.
    pub otlp_endpoint: String,
}

/// `[ext_proc]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ExtProcConfig {
    /// Where `ext-proc` serves `/metrics`, `/healthz` and `/readyz`;
    /// `""` turns it off. Default `127.0.0.1:9464`.
    pub metrics_listen: String,
}

impl Default for ExtProcConfig {
    fn default() -> Self {
        ExtProcConfig {
            metrics_listen: "127.0.0.1:9464".to_owned(),
        }
    }
}

impl ExtProcConfig {
    /// The metrics address; `None` when turned off.
    ///
    /// # Errors
    /// A [`ConfigError`] naming `ext_proc.metrics_listen` when it is not an
    /// address.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        if self.metrics_listen.is_empty() {
            return Ok(None);
        }
        parse_listen(&self.metrics_listen)
            .map(Some)
            .map_err(|m| ConfigError::new("ext_proc.metrics_listen", m))
    }
}

/// `[server]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Address to listen on. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// How long open streams may run on after SIGTERM/SIGINT. Default 30 s.
    #[serde(with = "units::duration")]
    pub shutdown_grace: Duration,
    /// After SIGTERM: `/readyz` answers 503 this long, everything still
    /// served, before the listener closes (so a load balancer's probe
    /// sees it). Default 0 s.
    #[serde(with = "units::duration")]
    pub drain_delay: Duration,
    /// Largest request body; larger is a 413. Default 32 MiB.
    pub max_request_body: ByteSize,
    /// How long a client may take to send a request's headers (slow
    /// clients are disconnected). Default 10 s (docs/reference/config.md,
    /// "`[server]`").
    #[serde(with = "units::duration")]
    pub header_read_timeout: Duration,
    /// `serve`: how many threads accept and serve connections, each with
    /// its own single-threaded runtime, listener (`SO_REUSEPORT`) and
    /// upstream pool. Default: the cores this process may use
    /// (`std::thread::available_parallelism`, which counts a cgroup CPU
    /// quota); 1 to [`MAX_WORKERS`].
    pub workers: usize,
}

/// The largest `server.workers`.
pub const MAX_WORKERS: usize = 1024;

/// The default `server.workers`: the cores this process may use.
#[must_use]
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            shutdown_grace: Duration::from_secs(30),
            drain_delay: Duration::ZERO,
            max_request_body: ByteSize(32 << 20),
            header_read_timeout: Duration::from_secs(10),
            workers: default_workers(),
        }
    }
}

/// `[upstream]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// The model server, e.g. `https://api.openai.com`; `""` = the built-in
    /// demo model.
    pub base_url: String,
    /// The `/v1/messages` upstream when it differs from `base_url`.
    pub messages_base_url: String,
    /// When set, sent upstream instead of the client's key.
    pub api_key: String,
    /// Connecting to the upstream. Default 5 s.
    #[serde(with = "units::duration")]
    pub connect_timeout: Duration,
    /// From sending the request until the upstream's response headers.
    /// Default 120 s.
    #[serde(with = "units::duration")]
    pub headers_timeout: Duration,
    /// `keys` mode: send the client's `authorization` / `x-api-key`
    /// upstream (default false: they are removed).
    pub forward_client_auth: bool,
    /// A started response body that sends nothing this long is cut (the
    /// client sees a broken stream). Default 120 s.
    #[serde(with = "units::duration")]
    pub idle_timeout: Duration,
    /// How many more times a request is sent after a connect error or a
    /// 429/502/503/504 before the client got anything. Default 1.
    pub retries: u32,
    /// How long an idle pooled upstream connection is kept. Default 4 s:
    /// below the 5 s keep-alive of uvicorn (vLLM, SGLang and most Python
    /// model servers), so the gateway drops an idle connection before the
    /// server closes it under a request.
    #[serde(with = "units::duration")]
    pub pool_idle_timeout: Duration,
    /// Most idle connections kept per upstream host. Default 64.
    pub pool_max_idle_per_host: usize,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            base_url: String::new(),
            messages_base_url: String::new(),
            api_key: String::new(),
            connect_timeout: Duration::from_secs(5),
            headers_timeout: Duration::from_secs(120),
            forward_client_auth: false,
            idle_timeout: Duration::from_secs(120),
            retries: 1,
            pool_idle_timeout: Duration::from_secs(4),
            pool_max_idle_per_host: 64,
        }
    }
}

/// One `[[routes]]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteConfig {
    /// An exact model name, or a prefix ending in `*`.
    pub model: String,
    /// The endpoints, tried round robin (the next one on a connect error).
    pub base_urls: Vec<String>,
    /// When set, sent upstream instead of `upstream.api_key` or the
    /// client's key.
    #[serde(default)]
    pub api_key: String,
    /// When set, the `model` member of the forwarded body becomes this.
    #[serde(default)]
    pub upstream_model: String,
}

impl RouteConfig {
    /// Whether the request's `model` matches this route (exact, or the
    /// prefix before a trailing `*`).
    #[must_use]
    pub fn matches(&self, model: &str) -> bool {
        match self.model.strip_suffix('*') {
            Some(prefix) => model.starts_with(prefix),
            None => model == self.model,
        }
    }
}

/// `[tls]`. Paths resolve against the config file's folder.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct TlsConfig {
    /// PEM roots trusted besides the platform's and the bundled ones.
    pub ca_file: String,
    /// PEM client certificate chain, for upstreams that require mTLS.
    pub client_cert: String,
    /// PEM private key of `client_cert`.
    pub client_key: String,
}

/// `rewrite.dialect`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DialectName {
    /// `sources` + `annotations`.
    #[default]
    Sources,
    /// `citations`.
    Citations,
    /// Both.
    Both,
}

/// `rewrite.offsets`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffsetsName {
    /// Unicode scalar values.
    #[default]
    Chars,
    /// UTF-16 code units.
    Utf16,
    /// UTF-8 bytes.
    Bytes,
}

/// `[rewrite]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RewriteConfig {
    /// `sources | citations | both`.
    pub dialect: DialectName,
    /// `chars | utf16 | bytes`.
    pub offsets: OffsetsName,
    /// Largest whole (non-streamed) response body held for rewriting; a
    /// larger one passes through unrewritten. Default 64 MiB.
    pub max_whole_body: ByteSize,
}

impl Default for RewriteConfig {
    fn default() -> Self {
        RewriteConfig {
            dialect: DialectName::default(),
            offsets: OffsetsName::default(),
            max_whole_body: ByteSize(64 << 20),
        }
    }
}

/// `inject.placement`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementName {
    /// In front of the last user message.
    #[default]
    User,
    /// A system message (chat) / appended to `system` (messages).
    System,
}

/// `[inject]`: where the sources block goes and what it says (the
/// defaults are [`Template::default`]'s).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct InjectConfig {
    /// `user | system`.
    pub placement: PlacementName,
    /// Text before the first source.
    pub header: String,
    /// One source, with the placeholders of
    /// [`citestream::request::PLACEHOLDERS`] (`{n}`, `{title}`, …); any
    /// other `{name}` is a start-up error.
    pub source: String,
    /// Between two sources.
    pub separator: String,
    /// After the last source.
    pub footer: String,
}

impl Default for InjectConfig {
    fn default() -> Self {
        let t = Template::default();
        InjectConfig {
            placement: PlacementName::User,
            header: t.header,
            source: t.source,
            separator: t.separator,
            footer: t.footer,
        }
    }
}

/// `quota.store`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreName {
    /// In-process.
    #[default]
    Memory,
    /// Redis at `quota.redis_url`, or the Redis Cluster of
    /// `quota.redis_cluster`.
    Redis,
}

/// `[quota]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct QuotaConfig {
    /// `memory | redis`.
    pub store: StoreName,
    /// `redis://host:port/db`: one Redis (or Valkey) for `store = "redis"`.
    pub redis_url: String,
    /// Or the seed nodes of a Redis Cluster, `["redis://h1:7000", ...]`.
    pub redis_cluster: Vec<String>,
}

/// `auth.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Everyone is the account `anonymous` on plan `default`.
    #[default]
    Open,
    /// Only the listed keys, as `Authorization: Bearer` or `x-api-key`.
    Keys,
}

/// `[auth]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct AuthConfig {
    /// `open | keys`.
    pub mode: AuthMode,
}

/// `[plans.<name>]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct PlanConfig {
    /// Searches per UTC day. Default 100.
    pub searches_per_day: u32,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            searches_per_day: 100,
        }
    }
}

/// One `[[accounts]]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AccountConfig {
    /// The account id (quota key, logs).
    pub id: String,
    /// The plan name; default `default`.
    #[serde(default = "default_plan")]
    pub plan: String,
    /// `sha256:<64 hex digits>` of each key.
    #[serde(default)]
    pub keys: Vec<String>,
}

/// The plan of open mode, and of accounts that name none; it exists even
/// when not configured (100 searches per day).
pub const DEFAULT_PLAN: &str = "default";

/// One `[[accounts]]` entry as [`Config::checked_accounts`] checked it:
/// its plan's daily limit and its keys' SHA-256 hashes.
#[derive(Debug)]
pub(crate) struct CheckedAccount<'a> {
    pub(crate) id: &'a str,
    pub(crate) plan: &'a str,
    pub(crate) searches_per_day: u32,
    pub(crate) key_hashes: Vec<[u8; 32]>,
}

/// The 32 bytes of a `sha256:<64 hex digits>` key hash.
pub(crate) fn parse_key_hash(s: &str) -> Option<[u8; 32]> {
    let hex = s.strip_prefix("sha256:")?;
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn default_plan() -> String {
    DEFAULT_PLAN.to_owned()
}

/// A start-up error: one line naming the key (or variable) at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    key: String,
    message: String,
}

impl ConfigError {
    /// An error about `key` (a dotted path such as `server.listen`, or an
    /// environment variable name).
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }

    /// The key or variable at fault (`""` for a file-level error).
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// What is wrong with it.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, whatever the underlying error printed.
        let msg = self
            .message
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if self.key.is_empty() {
            f.write_str(&msg)
        } else {
            write!(f, "{}: {msg}", self.key)
        }
    }
}

impl std::error::Error for ConfigError {}

/// The environment lookup used for `${VAR}` and the overrides.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The environment variables that override keys, and the key each sets.
pub const OVERRIDES: [(&str, &str); 3] = [
    ("CITESTREAM_LISTEN", "server.listen"),
    ("CITESTREAM_UPSTREAM_URL", "upstream.base_url"),
    ("CITESTREAM_REDIS_URL", "quota.redis_url"),
];

impl Config {
    /// Loads the config the way `citestream serve` does: the file at `path`
    /// (or the embedded defaults when `None`), `${VAR}` from the process
    /// environment, then the `CITESTREAM_*` overrides, then validation.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file, key or variable at fault.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let env = |name: &str| std::env::var(name).ok();
        let text = match path {
            Some(p) => std::fs::read_to_string(p)
                .map_err(|e| ConfigError::new(p.display().to_string(), e.to_string()))?,
            None => String::new(),
        };
        let mut cfg = Config::from_toml_with_env(&text, &env)?;
        if let Some(dir) = path.and_then(Path::parent) {
            cfg.resolve_paths(dir);
        }
        Ok(cfg)
    }

    /// Makes the relative paths of the config (`tls.ca_file`,
    /// `tls.client_cert`, `tls.client_key`, `search.local.path`,
    /// `search.static.path`) relative to `dir`, the config file's folder;
    /// absolute and empty paths stay as they are.
    pub fn resolve_paths(&mut self, dir: &Path) {
        let resolve = |p: &mut String| {
            if !p.is_empty() && Path::new(p.as_str()).is_relative() {
                *p = dir.join(p.as_str()).to_string_lossy().into_owned();
            }
        };
        resolve(&mut self.tls.ca_file);
        resolve(&mut self.tls.client_cert);
        resolve(&mut self.tls.client_key);
        resolve(&mut self.search.local.path);
        resolve(&mut self.search.r#static.path);
    }

    /// Parses `text` with `${VAR}` and the `CITESTREAM_*` overrides taken
    /// from `env`, and validates the result.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key or variable at fault.
    pub fn from_toml_with_env(text: &str, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!("line {line}: ")
                })
                .unwrap_or_default();
            ConfigError::new("", format!("invalid TOML: {at}{}", e.message()))
        })?;
        let mut path = Vec::new();
        expand_table(&mut table, &mut path, env)?;
        let mut cfg: Config =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                let key = e.path().to_string();
                let key = if key == "." { String::new() } else { key };
                ConfigError::new(key, e.into_inner().message().to_owned())
            })?;
        cfg.apply_overrides(env)?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn apply_overrides(&mut self, env: EnvLookup<'_>) -> Result<(), ConfigError> {
        if let Some(v) = env("CITESTREAM_LISTEN") {
            self.server.listen =
                parse_listen(&v).map_err(|m| ConfigError::new("CITESTREAM_LISTEN", m))?;
        }
        if let Some(v) = env("CITESTREAM_UPSTREAM_URL") {
            check_base_url(&v).map_err(|m| ConfigError::new("CITESTREAM_UPSTREAM_URL", m))?;
            self.upstream.base_url = v;
        }
        if let Some(v) = env("CITESTREAM_REDIS_URL") {
            self.quota.redis_url = v;
        }
        Ok(())
    }

    /// Sets `server.listen` from a `--listen ADDR` flag.
    ///
    /// # Errors
    /// A [`ConfigError`] naming `--listen` when `addr` is not `IP:PORT`.
    pub fn set_listen(&mut self, addr: &str) -> Result<(), ConfigError> {
        self.server.listen = parse_listen(addr).map_err(|m| ConfigError::new("--listen", m))?;
        Ok(())
    }

    /// Applies a `--metrics-listen` flag (`citestream ext-proc`) over
    /// `ext_proc.metrics_listen`; `""` turns the port off.
    ///
    /// # Errors
    /// A [`ConfigError`] naming `--metrics-listen` when `addr` is not an
    /// address.
    pub fn set_metrics_listen(&mut self, addr: &str) -> Result<(), ConfigError> {
        if !addr.is_empty() {
            parse_listen(addr).map_err(|m| ConfigError::new("--metrics-listen", m))?;
        }
        addr.clone_into(&mut self.ext_proc.metrics_listen);
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        check_base_url(&self.upstream.base_url)
            .map_err(|m| ConfigError::new("upstream.base_url", m))?;
        check_base_url(&self.upstream.messages_base_url)
            .map_err(|m| ConfigError::new("upstream.messages_base_url", m))?;
        for (i, r) in self.routes.iter().enumerate() {
            let key = |k: &str| format!("routes[{i}].{k}");
            if r.model.is_empty() || r.model.strip_suffix('*').is_some_and(|p| p.contains('*')) {
                return Err(ConfigError::new(
                    key("model"),
                    "an exact model name, or a prefix ending in *",
                ));
            }
            if r.base_urls.is_empty() {
                return Err(ConfigError::new(key("base_urls"), "at least one URL"));
            }
            for (j, u) in r.base_urls.iter().enumerate() {
                if u.is_empty() {
                    return Err(ConfigError::new(
                        format!("{}[{j}]", key("base_urls")),
                        "empty URL",
                    ));
                }
                check_base_url(u)
                    .map_err(|m| ConfigError::new(format!("{}[{j}]", key("base_urls")), m))?;
            }
        }
        if self.tls.client_cert.is_empty() != self.tls.client_key.is_empty() {
            return Err(ConfigError::new(
                "tls.client_key",
                "tls.client_cert and tls.client_key go together",
            ));
        }
        if self.server.max_request_body.0 == 0 {
            return Err(ConfigError::new(
                "server.max_request_body",
                "must be above 0",
            ));
        }
        if !(1..=MAX_WORKERS).contains(&self.server.workers) {
            return Err(ConfigError::new(
                "server.workers",
                format!("must be 1 to {MAX_WORKERS} (default: the number of cores)"),
            ));
        }
        if self.quota.store == StoreName::Redis {
            match (
                self.quota.redis_url.is_empty(),
                self.quota.redis_cluster.is_empty(),
            ) {
                (true, true) => {
                    return Err(ConfigError::new(
                        "quota.redis_url",
                        "required when quota.store is \"redis\" (or set CITESTREAM_REDIS_URL, or quota.redis_cluster)",
                    ));
                }
                (false, false) => {
                    return Err(ConfigError::new(
                        "quota.redis_cluster",
                        "set quota.redis_url (one Redis) or quota.redis_cluster (a Cluster), not both",
                    ));
                }
                _ => {}
            }
        }
        self.ext_proc.metrics_addr()?;
        check_base_url(&self.log.otlp_endpoint)
            .map_err(|m| ConfigError::new("log.otlp_endpoint", m))?;
        if let Some(p) = self.inject_options().template.unknown_placeholder() {
            let known: Vec<String> = PLACEHOLDERS.iter().map(|n| format!("{{{n}}}")).collect();
            return Err(ConfigError::new(
                "inject.source",
                format!("unknown placeholder {p} (known: {})", known.join(" ")),
            ));
        }
        self.checked_accounts().map(drop)
    }

    /// The daily limit of the plan `name`: its `[plans.NAME]` table, or
    /// the built-in one of [`DEFAULT_PLAN`] when that is not configured;
    /// `None` for any other plan that is not configured.
    #[must_use]
    pub fn plan_limit(&self, name: &str) -> Option<u32> {
        match self.plans.get(name) {
            Some(p) => Some(p.searches_per_day),
            None if name == DEFAULT_PLAN => Some(PlanConfig::default().searches_per_day),
            None => None,
        }
    }

    /// `[[accounts]]` checked against `[plans]` and `auth.mode`: the one
    /// copy of those rules (loading runs it; the accounts the hosts
    /// authenticate with are built from its answer).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key: an empty or duplicate account id,
    /// an unknown plan, a malformed or duplicate key hash, `keys` mode
    /// without any key.
    pub(crate) fn checked_accounts(&self) -> Result<Vec<CheckedAccount<'_>>, ConfigError> {
        let mut out: Vec<CheckedAccount<'_>> = Vec::with_capacity(self.accounts.len());
        let mut hashes = std::collections::HashSet::new();
        for (i, a) in self.accounts.iter().enumerate() {
            if a.id.is_empty() {
                return Err(ConfigError::new(
                    format!("accounts[{i}].id"),
                    "must not be empty",
                ));
            }
            if out.iter().any(|b| b.id == a.id) {
                return Err(ConfigError::new(
                    format!("accounts[{i}].id"),
                    format!("account {:?} is listed twice", a.id),
                ));
            }
            let searches_per_day = self.plan_limit(&a.plan).ok_or_else(|| {
                ConfigError::new(
                    format!("accounts[{i}].plan"),
                    format!("no plan {:?} (add a [plans.{}] table)", a.plan, a.plan),
                )
            })?;
            let mut key_hashes = Vec::with_capacity(a.keys.len());
            for (j, k) in a.keys.iter().enumerate() {
                let key = format!("accounts[{i}].keys[{j}]");
                let h = parse_key_hash(k).ok_or_else(|| {
                    ConfigError::new(
                        key.clone(),
                        "keys are stored hashed: expected \"sha256:<64 hex digits>\" (the SHA-256 of the key)",
                    )
                })?;
                if !hashes.insert(h) {
                    return Err(ConfigError::new(key, "this key is listed twice"));
                }
                key_hashes.push(h);
            }
            out.push(CheckedAccount {
                id: &a.id,
                plan: &a.plan,
                searches_per_day,
                key_hashes,
            });
        }
        if self.auth.mode == AuthMode::Keys && hashes.is_empty() {
            return Err(ConfigError::new(
                "auth.mode",
                "\"keys\" needs at least one [[accounts]] entry with keys",
            ));
        }
        Ok(out)
    }

    /// The response rewriter's options from `[rewrite]` (`n` is set per
    /// request by the response plan).
    #[must_use]
    pub fn rewrite_options(&self) -> RewriteOptions {
        let mut o = RewriteOptions::new();
        o.dialect(match self.rewrite.dialect {
            DialectName::Sources => Dialect::SOURCES,
            DialectName::Citations => Dialect::CITATIONS,
            DialectName::Both => Dialect::BOTH,
        })
        .offsets(match self.rewrite.offsets {
            OffsetsName::Chars => OffsetUnit::Chars,
            OffsetsName::Utf16 => OffsetUnit::Utf16,
            OffsetsName::Bytes => OffsetUnit::Bytes,
        });
        o
    }

    /// How sources are put in front of the model, from `[inject]`.
    #[must_use]
    pub fn inject_options(&self) -> InjectOptions {
        let i = &self.inject;
        InjectOptions {
            placement: match i.placement {
                PlacementName::User => Placement::UserMessage,
                PlacementName::System => Placement::System,
            },
            template: Template {
                header: i.header.clone(),
                source: i.source.clone(),
                separator: i.separator.clone(),
                footer: i.footer.clone(),
            },
        }
    }
}

fn parse_listen(v: &str) -> Result<SocketAddr, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("invalid address {v:?} (expected IP:PORT, e.g. 127.0.0.1:8080)"))
}

/// `""` or an absolute `http(s)://host[:port][/path]` URL without query.
fn check_base_url(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    let uri: http::Uri = v.parse().map_err(|e| format!("invalid URL {v:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(format!(
                "invalid URL {v:?}: the scheme must be http or https"
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("invalid URL {v:?}: no host"));
    }
    if uri.query().is_some() {
        return Err(format!("invalid URL {v:?}: a base URL takes no query"));
    }
    Ok(())
}

/// Replaces `${VAR}` in every string of `table`, naming the key on error.
fn expand_table(
    table: &mut toml::Table,
    path: &mut Vec<String>,
    env: EnvLookup<'_>,
) -> Result<(), ConfigError> {
    for (k, v) in table.iter_mut() {
        path.push(k.clone());
        expand_value(v, path, env)?;
        path.pop();
    }
    Ok(())
}

fn expand_value(
    v: &mut toml::Value,
    path: &mut Vec<String>,
    env: EnvLookup<'_>,
) -> Result<(), ConfigError> {
    match v {
        toml::Value::String(s) if s.contains('$') => {
            *s = expand_str(s, env).map_err(|m| ConfigError::new(path.join("."), m))?;
        }
        toml::Value::Array(a) => {
            let key = path.pop().unwrap_or_default();
            for (i, item) in a.iter_mut().enumerate() {
                path.push(format!("{key}[{i}]"));
                expand_value(item, path, env)?;
                path.pop();
            }
            path.push(key);
        }
        toml::Value::Table(t) => expand_table(t, path, env)?,
        _ => {}
    }
    Ok(())
}

/// `${VAR}` → the variable's value; `$${` → `${`; any other `$` is kept.
fn expand_str(s: &str, env: EnvLookup<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = t;
        } else if let Some(t) = tail.strip_prefix("${") {
            let end = t
                .find('}')
                .ok_or_else(|| format!("unterminated ${{ in {s:?}"))?;
            let name = &t[..end];
            if name.is_empty() {
                return Err(format!("empty ${{}} in {s:?}"));
            }
            let val = env(name).ok_or_else(|| format!("environment variable {name} is not set"))?;
            out.push_str(&val);
            rest = &t[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests;

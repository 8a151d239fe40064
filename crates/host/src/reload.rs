//! Reloading the config file while serving (SIGHUP), for every
//! long-running host (`citestream serve`, `citestream ext-proc`).
//!
//! Contract:
//! * [`Swap`] holds what requests use. A request takes [`Swap::load`] once,
//!   at its start, and keeps that value to its end (an open stream
//!   finishes with the config it started with); [`Swap::store`] replaces
//!   it for the requests that start afterwards.
//! * [`Reloader::reload`] reads the file again exactly as at start
//!   (`${VAR}`, the `CITESTREAM_*` overrides, validation, relative paths,
//!   the `--listen` flag: the host's `load` function), then builds the new
//!   value with the host's `build` on a blocking thread, off the serving
//!   path (a local index over a large folder takes seconds). Only a value
//!   built in full is returned for the host to store; a file that does not
//!   load or a value that does not build is logged at `warn` with its
//!   one-line error, and the old config stays.
//! * Keys read once at start are not reloaded and a change is logged
//!   (`warn`): `server.listen` and `server.header_read_timeout` need a
//!   restart. Everything else is the new config's.
//! * [`keep_store`]: the quota store is kept (the same store, so today's
//!   counts survive) when `[quota]` did not change.
//! * Reloads run one at a time, in the order asked.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use crate::config::{Config, ConfigError};
use crate::grounding::Grounding;

/// What the process asks a serving host to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signal {
    /// SIGTERM: drain (`/readyz` 503 for `server.drain_delay`, still
    /// serving), stop accepting, let open streams finish, exit.
    Terminate,
    /// SIGINT: the same without the delay.
    Interrupt,
    /// SIGHUP: reload the config file.
    Reload,
}

/// The value requests use, replaced whole on a reload.
#[derive(Debug)]
pub struct Swap<T>(RwLock<Arc<T>>);

impl<T> Swap<T> {
    /// Starts with `value`.
    pub fn new(value: Arc<T>) -> Swap<T> {
        Swap(RwLock::new(value))
    }

    /// The current value (take it once per request, at its start).
    #[must_use]
    pub fn load(&self) -> Arc<T> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the value for the requests that start from now on.
    pub fn store(&self, value: Arc<T>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = value;
    }
}

/// `true` when the reloaded config can keep the running quota store: the
/// `[quota]` table did not change.
#[must_use]
pub fn keep_store(old: &Config, new: &Config) -> bool {
    old.quota == new.quota
}

/// The request side of `new` after `old`, for a [`Reloader::reload`]
/// build (on its blocking thread): [`Grounding::reloaded`], keeping the
/// quota store when [`keep_store`] says so.
///
/// # Errors
/// As [`Grounding::new`].
pub fn rebuild_grounding(
    grounding: &Grounding,
    old: &Config,
    new: &Config,
) -> Result<Grounding, ConfigError> {
    let rt = tokio::runtime::Handle::current();
    rt.block_on(grounding.reloaded(new, keep_store(old, new)))
}

type LoadFn = dyn Fn() -> Result<Config, ConfigError> + Send + Sync;

/// Reads the config file again on request, and remembers the config in
/// force.
pub struct Reloader {
    load: Arc<LoadFn>,
    current: Mutex<Config>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader").finish_non_exhaustive()
    }
}

impl Reloader {
    /// A reloader whose config in force is `current` and that reads the
    /// file with `load` (the host's start-up loading, flags included).
    pub fn new(
        current: Config,
        load: impl Fn() -> Result<Config, ConfigError> + Send + Sync + 'static,
    ) -> Reloader {
        Reloader {
            load: Arc::new(load),
            current: Mutex::new(current),
            one_at_a_time: tokio::sync::Mutex::new(()),
        }
    }

    /// The config in force.
    #[must_use]
    pub fn config(&self) -> Config {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Loads the file and runs `build(old, new)` on a blocking thread;
    /// `Some` with the built value and the new config (now the config in
    /// force) when both succeeded, `None` (logged) when not.
    pub async fn reload<T, F>(&self, build: F) -> Option<(T, Config)>
    where
        T: Send + 'static,
        F: FnOnce(&Config, &Config) -> Result<T, ConfigError> + Send + 'static,
    {
        let _turn = self.one_at_a_time.lock().await;
        let t0 = Instant::now();
        let old = self.config();
        let load = self.load.clone();
        let built = tokio::task::spawn_blocking(move || {
            let new = load()?;
            let value = build(&old, &new)?;
            Ok::<_, ConfigError>((value, new, old))
        })
        .await;
        let (value, new, old) = match built {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "config reload failed; the old config stays");
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "config reload failed; the old config stays");
                return None;
            }
        };
        if new.server.listen != old.server.listen {
            tracing::warn!(
                listening = %old.server.listen,
                configured = %new.server.listen,
                "server.listen changed: it takes a restart; still listening on the old address"
            );
        }
        if new.server.header_read_timeout != old.server.header_read_timeout {
            tracing::warn!("server.header_read_timeout changed: it takes a restart");
        }
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = new.clone();
        tracing::info!(
            reload_ms = t0.elapsed().as_secs_f64() * 1e3,
            "config reloaded"
        );
        Some((value, new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        Config::from_toml_with_env(text, &|_| None).unwrap()
    }

    #[test]
    fn swap_hands_out_the_value_of_the_moment() {
        let s = Swap::new(Arc::new(1));
        let held = s.load();
        s.store(Arc::new(2));
        assert_eq!((*held, *s.load()), (1, 2));
    }

    #[test]
    fn the_store_is_kept_only_for_the_same_quota_table() {
        let a = cfg("");
        assert!(keep_store(
            &a,
            &cfg("[plans.default]\nsearches_per_day = 3\n")
        ));
        assert!(!keep_store(
            &a,
            &cfg("[quota]\nstore = \"redis\"\nredis_url = \"redis://127.0.0.1:1\"\n")
        ));
    }

    #[tokio::test]
    async fn a_bad_file_or_build_keeps_the_old_config() {
        let file = Arc::new(Mutex::new(String::from(
            "[plans.default]\nsearches_per_day = 1\n",
        )));
        let f = file.clone();
        let r = Reloader::new(cfg(""), move || {
            Config::from_toml_with_env(&f.lock().unwrap(), &|_| None)
        });
        let got = r
            .reload(|_, new| Ok(new.plans["default"].searches_per_day))
            .await;
        assert_eq!(got.map(|(v, _)| v), Some(1));
        *file.lock().unwrap() = "[plans.default]\nsearches_per_day = -1\n".into();
        assert!(r.reload(|_, _| Ok(())).await.is_none());
        *file.lock().unwrap() = "[plans.default]\nsearches_per_day = 7\n".into();
        let failed = r
            .reload(|_, _| Err::<(), _>(ConfigError::new("search", "no index")))
            .await;
        assert!(failed.is_none());
        assert_eq!(r.config().plans["default"].searches_per_day, 1);
        let (old, new) = r
            .reload(|old, new| Ok((old.plans["default"].searches_per_day, new.clone())))
            .await
            .unwrap()
            .0;
        assert_eq!((old, new.plans["default"].searches_per_day), (1, 7));
    }
}

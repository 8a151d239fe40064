//! The quota store a host runs on (`[quota] store = "memory" | "redis"`),
//! with cancellation handled for async hosts.
//!
//! Contract: building the store connects to nothing; with Redis, a
//! background check logs a warning when it cannot be reached at start-up
//! (the host serves anyway). A request whose future is dropped (the client went away)
//! gives its unfinished reservation back at once, in both stores:
//! * dropping an unfinished [`citestream::quota::Reservation`] releases it
//!   (memory: synchronously; Redis: a release spawned on the current tokio
//!   runtime, instead of waiting for the reservation's lease);
//! * a reservation whose reply is still in flight when the caller is
//!   dropped is released as soon as the reply arrives (the Redis reserve
//!   runs in its own task and hands its ticket over a channel; a ticket
//!   nobody receives is released).

use std::future::Future;
use std::sync::Arc;

use citestream::quota::{
    Clock, MemoryStore, QuotaError, QuotaErrorKind, QuotaStore, Ticket, Usage,
};

mod redis;

pub use self::redis::{RedisConfig, RedisStore};

use crate::config::{Config, ConfigError, StoreName};

/// A [`Clock`] behind an `Arc`, so one clock can drive the store and the
/// host's own day arithmetic.
#[derive(Clone, Debug)]
pub struct SharedClock(pub Arc<dyn Clock>);

impl Clock for SharedClock {
    fn unix_secs(&self) -> u64 {
        self.0.unix_secs()
    }
}

/// The configured quota store.
#[derive(Clone, Debug)]
pub enum Store {
    /// In-process.
    Memory(MemoryStore),
    /// Redis (one server or a Cluster), shared by replicas.
    Redis(RedisStore),
}

impl Store {
    /// The store of `cfg.quota` on `clock`. Does not connect yet.
    ///
    /// # Errors
    /// A [`ConfigError`] naming `quota.redis_url` when it is not a Redis
    /// URL, or `quota.redis_cluster` when a seed node is not one.
    pub fn from_config(cfg: &Config, clock: SharedClock) -> Result<Store, ConfigError> {
        let store = match cfg.quota.store {
            StoreName::Memory => Store::Memory(MemoryStore::with_clock(clock)),
            StoreName::Redis if !cfg.quota.redis_cluster.is_empty() => Store::Redis(
                RedisStore::cluster(&cfg.quota.redis_cluster, RedisConfig::default(), clock)
                    .map_err(|e| {
                        ConfigError::new(
                            "quota.redis_cluster",
                            format!("invalid seed nodes {:?}: {e}", cfg.quota.redis_cluster),
                        )
                    })?,
            ),
            StoreName::Redis => {
                let client = redis_client(&cfg.quota.redis_url)?;
                Store::Redis(RedisStore::with_config(
                    client,
                    RedisConfig::default(),
                    clock,
                ))
            }
        };
        if let Store::Redis(r) = &store {
            warn_if_unreachable(r);
        }
        Ok(store)
    }

    /// The store's name, for logs.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::Redis(r) if r.is_cluster() => "redis-cluster",
            Store::Redis(_) => "redis",
        }
    }
}

/// Asks Redis once, in the background, and logs a warning when it cannot
/// be reached: the host serves anyway (answering without search until
/// Redis is back). Hosts set up logging after building the store, so the
/// check waits for a logger first (at most a second).
fn warn_if_unreachable(r: &RedisStore) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let r = r.clone();
    rt.spawn(async move {
        for _ in 0..100 {
            if tracing::dispatcher::has_been_set() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        if let Err(e) = r.ping().await {
            tracing::warn!(error = %e, "quota store: Redis cannot be reached at start-up; serving, without search until it can");
        }
    });
}

fn redis_client(url: &str) -> Result<::redis::Client, ConfigError> {
    ::redis::Client::open(url)
        .map_err(|e| ConfigError::new("quota.redis_url", format!("invalid Redis URL {url:?}: {e}")))
}

impl QuotaStore for Store {
    fn try_reserve(
        &self,
        account: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Option<Ticket>, QuotaError>> + Send {
        let account = account.to_owned();
        async move {
            match self {
                Store::Memory(m) => m.try_reserve(&account, limit).await,
                Store::Redis(r) => reserve_detached(r.clone(), account, limit).await,
            }
        }
    }

    async fn commit(&self, ticket: &Ticket) -> Result<bool, QuotaError> {
        match self {
            Store::Memory(m) => m.commit(ticket).await,
            Store::Redis(r) => r.commit(ticket).await,
        }
    }

    async fn release(&self, ticket: &Ticket) -> Result<bool, QuotaError> {
        match self {
            Store::Memory(m) => m.release(ticket).await,
            Store::Redis(r) => r.release(ticket).await,
        }
    }

    async fn usage(&self, account: &str, day: u64) -> Result<Usage, QuotaError> {
        match self {
            Store::Memory(m) => m.usage(account, day).await,
            Store::Redis(r) => r.usage(account, day).await,
        }
    }

    fn release_on_drop(&self, ticket: &Ticket) {
        match self {
            Store::Memory(m) => m.release_on_drop(ticket),
            Store::Redis(r) => {
                let Ok(rt) = tokio::runtime::Handle::try_current() else {
                    return; // no runtime: the lease frees it
                };
                let (r, t) = (r.clone(), ticket.clone());
                rt.spawn(async move {
                    if let Err(e) = r.release(&t).await {
                        tracing::warn!(error = %e, account = t.account(), "releasing a dropped reservation failed");
                    }
                });
            }
        }
    }
}

/// Reserves in a task of its own, so a caller dropped mid-reply cannot
/// leave a reservation behind: a ticket nobody receives is released.
async fn reserve_detached(
    r: RedisStore,
    account: String,
    limit: u32,
) -> Result<Option<Ticket>, QuotaError> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return r.try_reserve(&account, limit).await; // no runtime to detach on
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    rt.spawn(async move {
        let res = r.try_reserve(&account, limit).await;
        if let Err(Ok(Some(t))) = tx.send(res) {
            let _ = r.release(&t).await;
        }
    });
    rx.await.unwrap_or_else(|_| {
        Err(QuotaError::new(
            QuotaErrorKind::Backend,
            "reservation task ended",
        ))
    })
}

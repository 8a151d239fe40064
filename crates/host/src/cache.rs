//! The search cache (`search.cache_ttl`, `search.cache_entries`; see
//! docs/search.md): a search's results reused for the same provider and
//! query for `cache_ttl`.
//!
//! Contract:
//! * Off when `search.cache_ttl` is 0 (the default): every search asks the
//!   provider, [`CacheResult::Off`].
//! * The key is the provider's name and the query the provider is given
//!   (the formed query, `citestream_search::FormedQuery::text`), case
//!   folded and whitespace runs folded to one space ([`fold`]); stored
//!   under [`cache_key`] (the query as a SHA-256, so a key is short
//!   whatever the query's length).
//! * Where: with the memory quota store, in this process (an LRU of at most
//!   `search.cache_entries` results lists, each dropped `cache_ttl` after
//!   it was stored); with the Redis store, in the quota's Redis or Cluster
//!   (`SET … PX cache_ttl`, one key per entry, so every replica and
//!   `ext-proc` process on it shares the entries).
//! * Only results are kept: a failed search or one that found nothing is
//!   never stored.
//! * Identical searches that miss at the same time in one process ask the
//!   provider once: the first runs it, the others wait for its result
//!   (single flight); one that missed just before an identical search
//!   stored its results finds them (the search that runs looks at the
//!   cache once more first, and a flight ends only after its results are
//!   stored). When the first is cancelled (its client left) one of
//!   the waiting ones runs it instead.
//! * A cache that cannot be read or written (Redis down, an entry that
//!   does not decode) is a miss, logged at `warn`: never a failed request.
//! * A request given results from the cache or from an identical search in
//!   flight reports [`CacheResult::Hit`]; any other [`CacheResult::Miss`].
//!   The quota is the caller's business and unchanged: a cached result is
//!   a search like any other.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use citestream::sources::Source;
use citestream_search::{SearchError, SearchErrorKind};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::config::{Config, ConfigError};
use crate::store::{RedisStore, Store};

/// Whether a search used the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheResult {
    /// `search.cache_ttl` is 0.
    Off,
    /// Answered without asking the provider.
    Hit,
    /// The provider was asked.
    Miss,
}

impl CacheResult {
    /// `Some(true)` for a hit, `Some(false)` for a miss, `None` when the
    /// cache is off.
    #[must_use]
    pub fn is_hit(self) -> Option<bool> {
        match self {
            CacheResult::Off => None,
            CacheResult::Hit => Some(true),
            CacheResult::Miss => Some(false),
        }
    }

    /// `hit` or `miss` (the `/metrics` label and the log value); `None`
    /// when the cache is off.
    #[must_use]
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            CacheResult::Off => None,
            CacheResult::Hit => Some("hit"),
            CacheResult::Miss => Some("miss"),
        }
    }
}

/// What [`SearchCache::search`] returns: the search's result and whether
/// it came from the cache.
#[derive(Debug)]
pub struct Searched {
    /// The sources (empty: nothing found), or why the search failed.
    pub result: Result<Vec<Source>, SearchError>,
    /// Hit, miss, or off.
    pub cache: CacheResult,
}

/// A search result shared with the waiting identical searches.
type Shared = Result<Arc<Vec<Source>>, (SearchErrorKind, String)>;

/// The search cache of one host process. Built once per config
/// ([`SearchCache::from_config`]) next to the quota store it follows.
#[derive(Debug)]
pub struct SearchCache {
    ttl: Duration,
    backend: Backend,
    /// Searches running now, by key: their result, once there is one.
    flights: Mutex<HashMap<String, watch::Receiver<Option<Shared>>>>,
}

#[derive(Debug)]
enum Backend {
    Off,
    Memory(Mutex<Lru>),
    Redis(RedisStore),
}

/// The key prefix of cache entries (in Redis beside the quota's
/// `citestream:quota:` keys).
const PREFIX: &str = "citestream:search:";

/// `text` lowercased, whitespace runs made one space, trimmed.
#[must_use]
pub fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().flat_map(char::to_lowercase));
    }
    out
}

/// The cache key of `query` on `provider`:
/// `citestream:search:<provider>:<SHA-256 of the folded query, hex>`.
#[must_use]
pub fn cache_key(provider: &str, query: &str) -> String {
    let digest = Sha256::digest(fold(query).as_bytes());
    let mut key = String::with_capacity(PREFIX.len() + provider.len() + 1 + 64);
    key.push_str(PREFIX);
    key.push_str(provider);
    key.push(':');
    for b in digest {
        let _ = write!(key, "{b:02x}");
    }
    key
}

impl SearchCache {
    /// The cache `cfg.search` asks for, in the place `store` implies.
    ///
    /// # Errors
    /// A [`ConfigError`] naming `search.cache_entries` when it is 0 while
    /// an in-process cache is on.
    pub fn from_config(cfg: &Config, store: &Store) -> Result<SearchCache, ConfigError> {
        let ttl = cfg.search.cache_ttl;
        let backend = match store {
            _ if ttl.is_zero() => Backend::Off,
            Store::Memory(_) if cfg.search.cache_entries == 0 => {
                return Err(ConfigError::new(
                    "search.cache_entries",
                    "must be above 0 when search.cache_ttl is set",
                ));
            }
            Store::Memory(_) => Backend::Memory(Mutex::new(Lru::new(cfg.search.cache_entries))),
            Store::Redis(r) => Backend::Redis(r.clone()),
        };
        Ok(SearchCache {
            ttl,
            backend,
            flights: Mutex::new(HashMap::new()),
        })
    }

    /// Searches through the cache: `text` (the query `provider` is asked
    /// for) is looked up, and on a miss `run` asks the provider.
    /// Dropping the future cancels the search (a waiting identical search
    /// then runs it).
    pub async fn search<F, Fut>(&self, provider: &str, text: &str, run: F) -> Searched
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Source>, SearchError>>,
    {
        if matches!(self.backend, Backend::Off) {
            return Searched {
                result: run().await,
                cache: CacheResult::Off,
            };
        }
        let key = cache_key(provider, text);
        loop {
            if let Some(found) = self.get(&key).await {
                return hit(found);
            }
            let waiting = {
                let mut flights = self.lock_flights();
                match flights.get(&key) {
                    Some(rx) => Ok(rx.clone()),
                    None => {
                        let (tx, rx) = watch::channel(None);
                        flights.insert(key.clone(), rx);
                        Err(tx)
                    }
                }
            };
            let mut waiting = match waiting {
                Ok(rx) => rx,
                Err(tx) => return self.lead(&key, tx, run).await,
            };
            // `Err`: the running search was cancelled; go round again (and
            // maybe run it here).
            if let Ok(shared) = waiting.wait_for(Option::is_some).await {
                match shared.clone() {
                    Some(Ok(found)) if !found.is_empty() => return hit(found),
                    Some(Ok(_)) => {
                        return Searched {
                            result: Ok(Vec::new()),
                            cache: CacheResult::Miss,
                        };
                    }
                    Some(Err((kind, message))) => {
                        return Searched {
                            result: Err(SearchError::new(kind, message)),
                            cache: CacheResult::Miss,
                        };
                    }
                    None => {}
                }
            }
        }
    }

    /// Runs the search for everyone waiting on `key`, and stores results.
    async fn lead<F, Fut>(&self, key: &str, tx: watch::Sender<Option<Shared>>, run: F) -> Searched
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Source>, SearchError>>,
    {
        // Removes the flight however this ends (a cancelled search too).
        struct Landing<'a>(&'a SearchCache, &'a str);
        impl Drop for Landing<'_> {
            fn drop(&mut self) {
                self.0.lock_flights().remove(self.1);
            }
        }
        let _landing = Landing(self, key);
        // An identical search may have landed between this one's miss and
        // its flight: a flight is removed only after its results were
        // stored, so one more look finds them.
        if let Some(found) = self.get(key).await {
            tx.send_replace(Some(Ok(found.clone())));
            return hit(found);
        }
        let result = run().await;
        let shared = match &result {
            Ok(found) => Ok(Arc::new(found.clone())),
            Err(e) => Err((e.kind(), e.message().to_owned())),
        };
        tx.send_replace(Some(shared));
        match &result {
            Ok(found) if !found.is_empty() => self.put(key, found).await,
            _ => {}
        }
        Searched {
            result,
            cache: CacheResult::Miss,
        }
    }

    fn lock_flights(&self) -> MutexGuard<'_, HashMap<String, watch::Receiver<Option<Shared>>>> {
        self.flights.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn get(&self, key: &str) -> Option<Arc<Vec<Source>>> {
        match &self.backend {
            Backend::Off => None,
            Backend::Memory(lru) => lru
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(key, Instant::now()),
            Backend::Redis(r) => {
                let mut cmd = redis::cmd("GET");
                cmd.arg(key);
                match r.query::<Option<Vec<u8>>>(&cmd).await {
                    Ok(None) => None,
                    Ok(Some(bytes)) => match serde_json::from_slice::<Vec<Source>>(&bytes) {
                        Ok(found) if !found.is_empty() => Some(Arc::new(found)),
                        Ok(_) => None,
                        Err(e) => {
                            tracing::warn!(error = %e, "search cache: an entry that does not decode is a miss");
                            None
                        }
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "search cache: reading failed, a miss");
                        None
                    }
                }
            }
        }
    }

    async fn put(&self, key: &str, found: &[Source]) {
        match &self.backend {
            Backend::Off => {}
            Backend::Memory(lru) => lru.lock().unwrap_or_else(|p| p.into_inner()).put(
                key,
                Arc::new(found.to_vec()),
                Instant::now() + self.ttl,
            ),
            Backend::Redis(r) => {
                let Ok(json) = serde_json::to_vec(found) else {
                    return;
                };
                let ms = u64::try_from(self.ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1);
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(json).arg("PX").arg(ms);
                if let Err(e) = r.query::<()>(&cmd).await {
                    tracing::warn!(error = %e, "search cache: writing failed");
                }
            }
        }
    }

    /// Entries held in the in-process cache (0 for the Redis one).
    #[must_use]
    pub fn entries(&self) -> usize {
        match &self.backend {
            Backend::Memory(lru) => lru.lock().unwrap_or_else(|p| p.into_inner()).len(),
            _ => 0,
        }
    }
}

fn hit(found: Arc<Vec<Source>>) -> Searched {
    Searched {
        result: Ok(Arc::unwrap_or_clone(found)),
        cache: CacheResult::Hit,
    }
}

/// A bounded least-recently-used map with an expiry per entry.
#[derive(Debug)]
struct Lru {
    cap: usize,
    /// key → (results, expiry, last use).
    map: HashMap<String, (Arc<Vec<Source>>, Instant, u64)>,
    /// last use → key: the oldest first.
    order: BTreeMap<u64, String>,
    tick: u64,
}

impl Lru {
    fn new(cap: usize) -> Lru {
        Lru {
            cap: cap.max(1),
            map: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn get(&mut self, key: &str, now: Instant) -> Option<Arc<Vec<Source>>> {
        let (found, expires, used) = self.map.get_mut(key)?;
        if *expires <= now {
            let used = *used;
            self.order.remove(&used);
            self.map.remove(key);
            return None;
        }
        self.order.remove(used);
        self.tick += 1;
        *used = self.tick;
        self.order.insert(self.tick, key.to_owned());
        Some(found.clone())
    }

    fn put(&mut self, key: &str, found: Arc<Vec<Source>>, expires: Instant) {
        self.tick += 1;
        if let Some((_, _, used)) = self.map.insert(key.to_owned(), (found, expires, self.tick)) {
            self.order.remove(&used);
        }
        self.order.insert(self.tick, key.to_owned());
        while self.map.len() > self.cap {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(t: &str) -> Arc<Vec<Source>> {
        Arc::new(vec![Source {
            title: Some(t.into()),
            ..Source::default()
        }])
    }

    #[test]
    fn folding_and_keys() {
        assert_eq!(
            fold("  What IS\tthe\n capital  of Portugal? "),
            "what is the capital of portugal?"
        );
        assert_eq!(fold("ÉTÉ À Paris"), "été à paris");
        assert_eq!(cache_key("brave", "A  b"), cache_key("brave", "a b"));
        assert_ne!(cache_key("brave", "a b"), cache_key("exa", "a b"));
        assert_ne!(cache_key("brave", "a b"), cache_key("brave", "ab"));
        let k = cache_key("local", "x");
        assert!(k.starts_with("citestream:search:local:"));
        assert_eq!(k.len(), "citestream:search:local:".len() + 64);
    }

    #[test]
    fn the_lru_is_bounded_keeps_the_recently_used_and_expires() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut lru = Lru::new(2);
        lru.put("a", src("a"), later);
        lru.put("b", src("b"), later);
        assert!(lru.get("a", t0).is_some()); // a is now the newest
        lru.put("c", src("c"), later);
        assert_eq!(lru.len(), 2);
        assert!(lru.get("b", t0).is_none(), "the least recently used went");
        assert!(lru.get("a", t0).is_some());
        assert!(lru.get("c", t0).is_some());
        // Replacing a key keeps one entry.
        lru.put("c", src("c2"), later);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.order.len(), 2);
        assert_eq!(lru.get("c", t0).unwrap()[0].title.as_deref(), Some("c2"));
        // Expired entries are misses and go.
        assert!(lru.get("a", later).is_none());
        assert_eq!(lru.len(), 1);
        assert_eq!(lru.order.len(), 1);
    }
}

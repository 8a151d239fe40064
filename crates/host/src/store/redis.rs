//! The Redis quota store: [`RedisStore`], shared by every gateway replica
//! on one server.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    Client, ErrorKind, FromRedisValue, RedisError, RedisFuture, RedisResult, Script, Value,
};

use citestream::quota::{
    Clock, QuotaError, QuotaErrorKind, QuotaStore, SECS_PER_DAY, SystemClock, Ticket, Usage,
    civil_date, utc_day,
};

/// Check-and-reserve, atomically (one script, one key).
///
/// KEYS[1]: the hash of one account and day: field `committed` (integer)
/// and one field `r:<id>` per open reservation, valued with the Unix second
/// its lease ends. ARGV: limit, id, now, lease end, key expiry (Unix
/// seconds). Expired leases are dropped first (a gateway that died
/// mid-search does not hold a slot forever). Returns 1 when reserved, 0 when
/// `committed + open reservations` already reaches the limit.
const RESERVE: &str = r"
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local now = tonumber(ARGV[3])
local committed = 0
local open = 0
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local f = all[i]
  if f == 'committed' then
    committed = tonumber(all[i + 1]) or 0
  elseif string.sub(f, 1, 2) == 'r:' then
    if (tonumber(all[i + 1]) or 0) <= now then
      redis.call('HDEL', key, f)
    else
      open = open + 1
    end
  end
end
if committed + open >= limit then
  return 0
end
redis.call('HSET', key, 'r:' .. ARGV[2], ARGV[4])
redis.call('EXPIREAT', key, ARGV[5])
return 1
";

/// Commit: turn reservation ARGV[1] into a used search, once. Returns 1 if
/// it was open, 0 (no change) if unknown or already finished.
const COMMIT: &str = r"
if redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'committed', 1)
  return 1
end
return 0
";

/// Settings of a [`RedisStore`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisConfig {
    prefix: String,
    lease: Duration,
    expiry_margin: Duration,
    connection_timeout: Duration,
    response_timeout: Duration,
    retries: usize,
}

impl Default for RedisConfig {
    /// Prefix `citestream:quota:`, lease 10 min, expiry margin 1 h,
    /// connection and response timeouts 1 s, 1 reconnection retry.
    fn default() -> Self {
        RedisConfig {
            prefix: "citestream:quota:".to_owned(),
            lease: Duration::from_secs(600),
            expiry_margin: Duration::from_secs(3600),
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            retries: 1,
        }
    }
}

impl RedisConfig {
    /// Key prefix; keys are `<prefix><YYYY-MM-DD>:<account>`.
    pub fn prefix(&mut self, prefix: impl Into<String>) -> &mut Self {
        self.prefix = prefix.into();
        self
    }

    /// How long an open reservation holds its slot when it is neither
    /// committed nor released (a crashed gateway, a dropped
    /// [`citestream::quota::Reservation`]). Keep it well above the search timeout: a
    /// commit after the lease ran out and another reservation took the slot
    /// is a no-op (the search is then not counted, so the limit still holds).
    pub fn lease(&mut self, lease: Duration) -> &mut Self {
        self.lease = lease;
        self
    }

    /// How long after the end of its UTC day a key expires (lets a
    /// reservation made just before midnight commit after it).
    pub fn expiry_margin(&mut self, margin: Duration) -> &mut Self {
        self.expiry_margin = margin;
        self
    }

    /// Timeout of one connection attempt.
    pub fn connection_timeout(&mut self, t: Duration) -> &mut Self {
        self.connection_timeout = t;
        self
    }

    /// Timeout of one command.
    pub fn response_timeout(&mut self, t: Duration) -> &mut Self {
        self.response_timeout = t;
        self
    }

    /// Connection retries before an operation reports the store unavailable.
    pub fn retries(&mut self, n: usize) -> &mut Self {
        self.retries = n;
        self
    }
}

/// A quota store in Redis, shared by every gateway replica that points at
/// the same server (or Redis Cluster) and prefix.
///
/// One hash per account and UTC day (`<prefix><YYYY-MM-DD>:<account>`)
/// holds the committed count and the open reservations; check-and-reserve
/// is one Lua script, so `committed + reserved <= limit` holds across
/// replicas. Every script and command touches that one key, so on a Redis
/// Cluster each runs on the one master that owns its slot. Keys expire at
/// the end of their day plus a margin. Commit and release are idempotent:
/// a reservation id is removed once, and a second commit or release finds
/// nothing and changes nothing.
///
/// The connection is opened on first use and kept (one server: redis'
/// `ConnectionManager`; a Cluster: its cluster connection, which follows
/// the slot map through failovers). An operation that fails because the
/// connection dropped or could not be made is tried once more on a fresh
/// connection; when that fails too it returns a [`QuotaError`] of kind
/// [`QuotaErrorKind::Unavailable`] within the configured timeouts, and the
/// gateway answers without search. Nothing is asked at construction, so a
/// gateway starts while Redis is down and uses it once it is up.
///
/// Dropping an unfinished [`citestream::quota::Reservation`] cannot release it without
/// awaiting, so the slot is freed when its lease ends
/// ([`RedisConfig::lease`]); release explicitly to free it at once.
///
/// Needs a tokio runtime.
///
/// # Example
/// ```no_run
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use citestream::quota::reserve;
/// use citestream_host::store::RedisStore;
///
/// let store = RedisStore::open("redis://127.0.0.1:6379/").expect("valid URL");
/// match reserve(&store, "acct-1", 100).await {
///     Ok(Some(r)) => { /* search, then */ r.commit().await.ok(); }
///     Ok(None) => { /* used up: answer without search */ }
///     Err(e) => eprintln!("quota store: {e}"), // answer without search
/// }
/// # });
/// ```
#[derive(Clone)]
pub struct RedisStore {
    target: Arc<Target>,
    config: Arc<RedisConfig>,
    clock: Arc<dyn Clock>,
    conn: Arc<Mutex<Option<Conn>>>,
    reserve: Arc<Script>,
    commit: Arc<Script>,
}

/// Where the store connects: one server, or the seed nodes of a Cluster.
#[derive(Clone)]
enum Target {
    Single(Client),
    Cluster(ClusterClient),
}

/// An open connection of either kind (both are cheap clones of one
/// multiplexed connection).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RedisStore");
        match &*self.target {
            Target::Single(c) => d.field("server", &c.get_connection_info().addr),
            Target::Cluster(_) => d.field("server", &"cluster"),
        };
        d.field("config", &self.config)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on `client` with the default [`RedisConfig`] and the system
    /// clock. Does not connect yet.
    #[must_use]
    pub fn new(client: Client) -> Self {
        RedisStore::with_config(client, RedisConfig::default(), SystemClock)
    }

    /// A store on the server at `url` (`redis://host:port/db`). Does not
    /// connect yet.
    ///
    /// # Errors
    /// A [`QuotaError`] of kind [`QuotaErrorKind::Backend`] when `url` is
    /// not a valid Redis URL.
    pub fn open(url: &str) -> Result<Self, QuotaError> {
        Client::open(url)
            .map(RedisStore::new)
            .map_err(|e| QuotaError::new(QuotaErrorKind::Backend, e.to_string()))
    }

    /// A store with explicit settings and clock. Does not connect yet.
    #[must_use]
    pub fn with_config(client: Client, config: RedisConfig, clock: impl Clock + 'static) -> Self {
        RedisStore::on(Target::Single(client), config, clock)
    }

    /// A store on the Redis Cluster whose seed nodes are `nodes`
    /// (`redis://host:port` each; any reachable one tells the client the
    /// rest), with explicit settings and clock. Does not connect yet.
    ///
    /// # Errors
    /// A [`QuotaError`] of kind [`QuotaErrorKind::Backend`] when `nodes` is
    /// empty or a node is not a valid Redis URL.
    pub fn cluster(
        nodes: &[String],
        config: RedisConfig,
        clock: impl Clock + 'static,
    ) -> Result<Self, QuotaError> {
        let client = ClusterClient::builder(nodes.iter().map(String::as_str))
            .connection_timeout(config.connection_timeout)
            .response_timeout(config.response_timeout)
            // Moves, "try again" and a reconnect while a failover settles;
            // the store's own retry-once comes on top.
            .retries(u32::try_from(config.retries.max(1)).unwrap_or(1) + 1)
            .min_retry_wait(20)
            .max_retry_wait(200)
            .build()
            .map_err(|e| QuotaError::new(QuotaErrorKind::Backend, e.to_string()))?;
        Ok(RedisStore::on(Target::Cluster(client), config, clock))
    }

    fn on(target: Target, config: RedisConfig, clock: impl Clock + 'static) -> Self {
        RedisStore {
            target: Arc::new(target),
            config: Arc::new(config),
            clock: Arc::new(clock),
            conn: Arc::new(Mutex::new(None)),
            reserve: Arc::new(Script::new(RESERVE)),
            commit: Arc::new(Script::new(COMMIT)),
        }
    }

    /// Whether the store is on a Redis Cluster.
    #[must_use]
    pub fn is_cluster(&self) -> bool {
        matches!(*self.target, Target::Cluster(_))
    }

    /// The key of `account` on UTC day `day`.
    #[must_use]
    pub fn key(&self, account: &str, day: u64) -> String {
        let (y, m, d) = civil_date(day);
        format!("{}{y:04}-{m:02}-{d:02}:{account}", self.config.prefix)
    }

    /// The open connection, or a new one.
    async fn conn(&self) -> RedisResult<Conn> {
        let cached = self
            .conn
            .lock()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        if let Some(c) = cached {
            return Ok(c);
        }
        let c = match &*self.target {
            Target::Single(client) => {
                let cfg = ConnectionManagerConfig::new()
                    .set_connection_timeout(self.config.connection_timeout)
                    .set_response_timeout(self.config.response_timeout)
                    // `run`'s retry on a fresh connection is the first.
                    .set_number_of_retries(self.config.retries.saturating_sub(1))
                    .set_factor(10)
                    .set_max_delay(200);
                Conn::Single(ConnectionManager::new_with_config(client.clone(), cfg).await?)
            }
            Target::Cluster(client) => Conn::Cluster(client.get_async_connection().await?),
        };
        let mut g = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        Ok(g.get_or_insert(c).clone())
    }

    /// Runs `op` on the connection; when the connection dropped or could
    /// not be made, once more on a fresh one.
    async fn run<T, F, Fut>(&self, op: F) -> RedisResult<T>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let first = match self.conn().await {
            Ok(c) => op(c).await,
            Err(e) => Err(e),
        };
        match first {
            Err(e) if is_unavailable(&e) => {
                // Forget the connection: the next one is made afresh.
                *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
                op(self.conn().await?).await
            }
            r => r,
        }
    }

    async fn reserve_impl(&self, account: &str, limit: u32) -> Result<Option<Ticket>, QuotaError> {
        let now = self.clock.unix_secs();
        let day = utc_day(now);
        if limit == 0 {
            return Ok(None);
        }
        let id = new_id();
        let expire_at = (day + 1)
            .saturating_mul(SECS_PER_DAY)
            .saturating_add(self.config.expiry_margin.as_secs());
        let lease_end = now.saturating_add(self.config.lease.as_secs().max(1));
        let key = self.key(account, day);
        // A retried reserve whose first reply was lost may leave one extra
        // reservation behind: it holds a slot until its lease ends, and
        // never lets more than the limit through.
        let ok: i64 = self
            .run(|mut c| {
                let mut inv = self.reserve.key(&key);
                inv.arg(limit)
                    .arg(&id)
                    .arg(now)
                    .arg(lease_end)
                    .arg(expire_at);
                async move { inv.invoke_async(&mut c).await }
            })
            .await
            .map_err(map_err)?;
        Ok((ok == 1).then(|| Ticket::new(account, day, id)))
    }

    async fn commit_impl(&self, t: &Ticket) -> Result<bool, QuotaError> {
        let key = self.key(t.account(), t.day());
        let n: i64 = self
            .run(|mut c| {
                let mut inv = self.commit.key(&key);
                inv.arg(t.id());
                async move { inv.invoke_async(&mut c).await }
            })
            .await
            .map_err(map_err)?;
        Ok(n == 1)
    }

    async fn release_impl(&self, t: &Ticket) -> Result<bool, QuotaError> {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(self.key(t.account(), t.day()))
            .arg(format!("r:{}", t.id()));
        let n: i64 = self.query(&cmd).await.map_err(map_err)?;
        Ok(n == 1)
    }

    async fn usage_impl(&self, account: &str, day: u64) -> Result<Usage, QuotaError> {
        let now = self.clock.unix_secs();
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.key(account, day));
        let all: Vec<(String, String)> = self.query(&cmd).await.map_err(map_err)?;
        let mut u = Usage::default();
        for (f, v) in all {
            if f == "committed" {
                u.committed = v.parse().unwrap_or(0);
            } else if f.starts_with("r:") && v.parse::<u64>().is_ok_and(|end| end > now) {
                u.reserved = u.reserved.saturating_add(1);
            }
        }
        Ok(u)
    }

    /// Asks the server (every node of a Cluster) for a `PONG`.
    ///
    /// # Errors
    /// A [`QuotaError`] when it cannot be reached.
    pub async fn ping(&self) -> Result<(), QuotaError> {
        self.query::<String>(&redis::cmd("PING"))
            .await
            .map(drop)
            .map_err(map_err)
    }

    /// Runs one command (with the retry of [`RedisStore::run`]).
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        self.run(|mut c| async move { cmd.query_async(&mut c).await })
            .await
    }
}

/// The connection is gone or could not be made (also: the Cluster is
/// electing a new master): try again later, or answer without search.
fn is_unavailable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_cluster_error()
        || e.is_unrecoverable_error()
        || e.kind() == ErrorKind::ClusterConnectionNotFound
}

fn map_err(e: RedisError) -> QuotaError {
    let kind = if is_unavailable(&e) {
        QuotaErrorKind::Unavailable
    } else {
        QuotaErrorKind::Backend
    };
    QuotaError::new(kind, e.to_string())
}

impl QuotaStore for RedisStore {
    fn try_reserve(
        &self,
        account: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Option<Ticket>, QuotaError>> + Send {
        self.reserve_impl(account, limit)
    }

    fn commit(&self, ticket: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send {
        self.commit_impl(ticket)
    }

    fn release(&self, ticket: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send {
        self.release_impl(ticket)
    }

    fn usage(
        &self,
        account: &str,
        day: u64,
    ) -> impl Future<Output = Result<Usage, QuotaError>> + Send {
        self.usage_impl(account, day)
    }
}

/// A process-unique, hard-to-guess reservation id (128 bits, hex), also
/// unique across processes with overwhelming probability: it mixes a
/// per-process random seed (std's `RandomState`), the time, the process id
/// and a counter.
fn new_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut parts = [0u64; 2];
    for (i, p) in parts.iter_mut().enumerate() {
        let mut h = std::hash::RandomState::new().build_hasher();
        h.write_u64(c);
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_usize(i);
        *p = h.finish();
    }
    format!("{:016x}{:016x}", parts[0], parts[1])
}

#[cfg(test)]
mod tests {
    use super::new_id;

    #[test]
    fn ids_differ() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
    }
}

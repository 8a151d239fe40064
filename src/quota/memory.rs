//! The in-process quota store.

use std::collections::{HashMap, HashSet};
use std::future::{Future, ready};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Clock, QuotaError, QuotaStore, SystemClock, Ticket, Usage, utc_day};

#[derive(Debug, Default)]
struct Day {
    committed: u32,
    reserved: HashSet<u64>,
}

#[derive(Debug, Default)]
struct State {
    /// (account, UTC day) → counts.
    days: HashMap<(String, u64), Day>,
    /// The newest day seen; entries older than the day before it are gone.
    today: u64,
}

/// An in-process quota store: one mutex-protected map, thread-safe, for a
/// single gateway process (counts are lost on restart and not shared with
/// other replicas; `citestream-host`'s Redis store is shared).
///
/// Entries of days before yesterday are dropped as soon as the clock shows
/// a new day, so memory stays bounded by the accounts active in the last
/// two days. A reservation made just before midnight can still be committed
/// or released after it (it counts on its own day).
///
/// Besides the async [`QuotaStore`] methods (whose futures are always
/// ready), sync code can call [`MemoryStore::reserve_now`],
/// [`MemoryStore::commit_now`] and [`MemoryStore::release_now`].
///
/// # Example
/// ```
/// use citestream::quota::{ManualClock, MemoryStore};
///
/// let clock = ManualClock::new(1_796_083_199); // 23:59:59 UTC
/// let store = MemoryStore::with_clock(clock.clone());
/// let t = store.reserve_now("a", 1).expect("first search of the day");
/// assert!(store.reserve_now("a", 1).is_none()); // used up
/// assert!(store.commit_now(&t));
/// clock.advance(1); // 00:00:00 UTC: a new day
/// assert!(store.reserve_now("a", 1).is_some());
/// ```
#[derive(Debug, Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    next_id: Arc<AtomicU64>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// A store on the system clock.
    #[must_use]
    pub fn new() -> Self {
        MemoryStore::with_clock(SystemClock)
    }

    /// A store on `clock` (e.g. a [`super::ManualClock`] in tests).
    /// Clones of a store share its counts.
    #[must_use]
    pub fn with_clock(clock: impl Clock + 'static) -> Self {
        MemoryStore {
            state: Arc::new(Mutex::new(State::default())),
            clock: Arc::new(clock),
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (every update is a single insert/remove), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sync [`QuotaStore::try_reserve`]: reserves one search of `account`
    /// today if fewer than `limit` are reserved or committed.
    #[must_use]
    pub fn reserve_now(&self, account: &str, limit: u32) -> Option<Ticket> {
        let day = utc_day(self.clock.unix_secs());
        let mut st = self.lock();
        if day > st.today {
            st.today = day;
            st.days.retain(|(_, d), _| d.saturating_add(1) >= day);
        }
        let e = st.days.entry((account.to_owned(), day)).or_default();
        let used = u64::from(e.committed) + e.reserved.len() as u64;
        if used >= u64::from(limit) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        e.reserved.insert(id);
        Some(Ticket::new(account, day, id.to_string()))
    }

    fn finish(&self, t: &Ticket, commit: bool) -> bool {
        let Ok(id) = t.id().parse::<u64>() else {
            return false;
        };
        let mut st = self.lock();
        let key = (t.account().to_owned(), t.day());
        let Some(e) = st.days.get_mut(&key) else {
            return false;
        };
        if !e.reserved.remove(&id) {
            return false;
        }
        if commit {
            e.committed = e.committed.saturating_add(1);
        }
        true
    }

    /// Sync [`QuotaStore::commit`]: `false` for an unknown or finished
    /// ticket.
    pub fn commit_now(&self, ticket: &Ticket) -> bool {
        self.finish(ticket, true)
    }

    /// Sync [`QuotaStore::release`]: `false` for an unknown or finished
    /// ticket.
    pub fn release_now(&self, ticket: &Ticket) -> bool {
        self.finish(ticket, false)
    }

    /// Sync [`QuotaStore::usage`].
    #[must_use]
    pub fn usage_now(&self, account: &str, day: u64) -> Usage {
        let st = self.lock();
        st.days
            .get(&(account.to_owned(), day))
            .map_or(Usage::default(), |e| Usage {
                committed: e.committed,
                reserved: u32::try_from(e.reserved.len()).unwrap_or(u32::MAX),
            })
    }

    /// The number of (account, day) entries held; old days are dropped.
    #[must_use]
    pub fn entries(&self) -> usize {
        self.lock().days.len()
    }
}

impl QuotaStore for MemoryStore {
    fn try_reserve(
        &self,
        account: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Option<Ticket>, QuotaError>> + Send {
        ready(Ok(self.reserve_now(account, limit)))
    }

    fn commit(&self, ticket: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send {
        ready(Ok(self.commit_now(ticket)))
    }

    fn release(&self, ticket: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send {
        ready(Ok(self.release_now(ticket)))
    }

    fn usage(
        &self,
        account: &str,
        day: u64,
    ) -> impl Future<Output = Result<Usage, QuotaError>> + Send {
        ready(Ok(self.usage_now(account, day)))
    }

    fn release_on_drop(&self, ticket: &Ticket) {
        self.release_now(ticket);
    }
}

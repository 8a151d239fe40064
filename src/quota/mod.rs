//! The daily per-account search quota (docs/reference/request.md, "Quota").
//!
//! Every account may run a number of searches per UTC day (its plan's
//! limit). The protocol is reserve → search → commit or release:
//!
//! 1. [`reserve`] before searching. `Ok(None)` means the day's searches are
//!    used up: answer the request without search (never refuse it).
//! 2. [`Reservation::commit`] when the search found at least one result.
//! 3. [`Reservation::release`] when it found nothing or failed; dropping a
//!    [`Reservation`] that was neither committed nor released releases it
//!    too (immediately for [`MemoryStore`]; see the store for others).
//!
//! Reserved plus committed never exceeds the limit, so under any
//! concurrency the committed count never does either. The count restarts at
//! 00:00 UTC; the day is taken from the store's [`Clock`] at reservation
//! time, and a reservation commits into the day it was made on.
//!
//! Stores implement [`QuotaStore`]: [`MemoryStore`] (in-process, usable
//! from sync code too) here; stores that talk to a server (the Redis store
//! shared by gateway replicas) live in the hosts (`citestream-host`'s
//! `store` module), so the core opens no connection.
//!
//! # Example
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use citestream::quota::{reserve, MemoryStore};
//!
//! let store = MemoryStore::new();
//! match reserve(&store, "acct-1", 10).await {
//!     Ok(Some(r)) => {
//!         let found = 3; // run the search here
//!         if found > 0 { r.commit().await.ok(); } else { r.release().await.ok(); }
//!     }
//!     Ok(None) => { /* used up: answer without search */ }
//!     Err(_e) => { /* store unreachable: answer without search, log `_e` */ }
//! }
//! # });
//! ```

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

mod memory;

pub use memory::MemoryStore;

/// Seconds in a day.
pub const SECS_PER_DAY: u64 = 86_400;

/// The UTC day number (days since 1970-01-01) of a Unix time in seconds.
#[must_use]
pub fn utc_day(unix_secs: u64) -> u64 {
    unix_secs / SECS_PER_DAY
}

/// The UTC calendar date `(year, month, day)` of a day number, e.g.
/// `(2026, 11, 29)`. Used for readable store keys.
#[must_use]
pub fn civil_date(day: u64) -> (i64, u32, u32) {
    // Howard Hinnant's days-to-civil algorithm, for days >= 0.
    let z = day as i64 + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A source of the current time, so tests can move across midnight.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Seconds since the Unix epoch, UTC.
    fn unix_secs(&self) -> u64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_secs(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }
}

/// A clock that only moves when told to. Clones share one time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock showing `unix_secs`.
    #[must_use]
    pub fn new(unix_secs: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(unix_secs)))
    }

    /// Sets the time.
    pub fn set(&self, unix_secs: u64) {
        self.0.store(unix_secs, Ordering::SeqCst);
    }

    /// Moves the time forward by `secs` (saturating).
    pub fn advance(&self, secs: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(secs))
            });
    }
}

impl Clock for ManualClock {
    fn unix_secs(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The record of one reserved search: which account, which UTC day, and an
/// id unique within the store. Commit and release take it by reference; a
/// second commit or release of the same ticket is a no-op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    account: String,
    day: u64,
    id: String,
}

impl Ticket {
    /// Builds a ticket; stores call this from `try_reserve`.
    #[must_use]
    pub fn new(account: impl Into<String>, day: u64, id: impl Into<String>) -> Self {
        Ticket {
            account: account.into(),
            day,
            id: id.into(),
        }
    }

    /// The account the search is counted against.
    #[must_use]
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The UTC day number ([`utc_day`]) the search counts on.
    #[must_use]
    pub fn day(&self) -> u64 {
        self.day
    }

    /// The reservation id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Counts for one account and day.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Searches that found something.
    pub committed: u32,
    /// Searches reserved and not yet committed or released.
    pub reserved: u32,
}

/// What went wrong talking to a quota store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaErrorKind {
    /// The store could not be reached (connection refused, timeout, …).
    Unavailable,
    /// The store answered with an error or an unexpected reply.
    Backend,
}

/// An error of a quota store. The gateway answers without search and
/// reports it (logs, metrics); it is never a reason to refuse a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaError {
    kind: QuotaErrorKind,
    message: String,
}

impl QuotaError {
    /// A new error.
    #[must_use]
    pub fn new(kind: QuotaErrorKind, message: impl Into<String>) -> Self {
        QuotaError {
            kind,
            message: message.into(),
        }
    }

    /// The kind of failure.
    #[must_use]
    pub fn kind(&self) -> QuotaErrorKind {
        self.kind
    }
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            QuotaErrorKind::Unavailable => write!(f, "quota store unavailable: {}", self.message),
            QuotaErrorKind::Backend => write!(f, "quota store error: {}", self.message),
        }
    }
}

impl std::error::Error for QuotaError {}

/// A daily search quota store.
///
/// Methods return `Send` futures so a multi-threaded tokio gateway can
/// await them; stores that never block (like [`MemoryStore`]) return ready
/// futures and offer sync methods as well. Implementations must guarantee
/// that `committed + reserved <= limit` at all times for each account and
/// day, also under concurrent callers (and, for shared stores, across
/// processes).
pub trait QuotaStore: Send + Sync {
    /// Reserves one search for `account` on the current UTC day if fewer
    /// than `limit` are reserved or committed. `Ok(None)` when used up.
    ///
    /// # Errors
    /// A [`QuotaError`] when the store cannot be asked; treat it as "no
    /// search" (not as "used up", and never refuse the request).
    fn try_reserve(
        &self,
        account: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Option<Ticket>, QuotaError>> + Send;

    /// Turns a reservation into a used search. Returns `Ok(false)` (and
    /// changes nothing) for a ticket that is unknown or already committed
    /// or released.
    ///
    /// # Errors
    /// A [`QuotaError`] when the store cannot be asked.
    fn commit(&self, ticket: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send;

    /// Frees a reservation. Returns `Ok(false)` (and changes nothing) for a
    /// ticket that is unknown or already committed or released.
    ///
    /// # Errors
    /// A [`QuotaError`] when the store cannot be asked.
    fn release(&self, ticket: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send;

    /// The counts of `account` on UTC day `day`.
    ///
    /// # Errors
    /// A [`QuotaError`] when the store cannot be asked.
    fn usage(
        &self,
        account: &str,
        day: u64,
    ) -> impl Future<Output = Result<Usage, QuotaError>> + Send;

    /// Called synchronously when a [`Reservation`] is dropped unfinished:
    /// release `ticket` now if that can be done without blocking. The
    /// default does nothing (the store must then free it some other way,
    /// e.g. a lease).
    fn release_on_drop(&self, ticket: &Ticket) {
        let _ = ticket;
    }
}

/// A store reached through a reference is a store: a [`Reservation`] of
/// `&S` borrows the store, one of an owned handle (a `Clone` of a shared
/// store) can outlive the code that reserved it.
impl<S: QuotaStore + ?Sized> QuotaStore for &S {
    fn try_reserve(
        &self,
        account: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Option<Ticket>, QuotaError>> + Send {
        (**self).try_reserve(account, limit)
    }

    fn commit(&self, ticket: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send {
        (**self).commit(ticket)
    }

    fn release(&self, ticket: &Ticket) -> impl Future<Output = Result<bool, QuotaError>> + Send {
        (**self).release(ticket)
    }

    fn usage(
        &self,
        account: &str,
        day: u64,
    ) -> impl Future<Output = Result<Usage, QuotaError>> + Send {
        (**self).usage(account, day)
    }

    fn release_on_drop(&self, ticket: &Ticket) {
        (**self).release_on_drop(ticket);
    }
}

/// A reserved search that releases itself on drop unless committed or
/// released. Created by [`reserve`].
///
/// It holds the store it was reserved in: `&store` for a guard that lives
/// within the caller's scope, or an owned handle (the hosts' `Store`, a
/// `Clone` sharing one store) for a reservation handed on until the
/// upstream answers.
#[derive(Debug)]
#[must_use = "dropping a reservation releases it"]
pub struct Reservation<S: QuotaStore> {
    store: S,
    ticket: Option<Ticket>,
}

impl<S: QuotaStore> Reservation<S> {
    /// The reservation's ticket (`None` only after [`Reservation::into_ticket`]).
    #[must_use]
    pub fn ticket(&self) -> Option<&Ticket> {
        self.ticket.as_ref()
    }

    /// Wraps a ticket from `store.try_reserve` in a guard.
    pub fn new(store: S, ticket: Ticket) -> Self {
        Reservation {
            store,
            ticket: Some(ticket),
        }
    }

    /// Counts the search (it found at least one result).
    ///
    /// # Errors
    /// A [`QuotaError`] when the store cannot be asked; the reservation is
    /// then left to the store to expire (it is not released).
    pub async fn commit(mut self) -> Result<bool, QuotaError> {
        match self.ticket.take() {
            Some(t) => self.store.commit(&t).await,
            None => Ok(false),
        }
    }

    /// Frees the reservation (the search found nothing or failed).
    ///
    /// # Errors
    /// A [`QuotaError`] when the store cannot be asked.
    pub async fn release(mut self) -> Result<bool, QuotaError> {
        match self.ticket.take() {
            Some(t) => self.store.release(&t).await,
            None => Ok(false),
        }
    }

    /// Gives up the guard without releasing: the ticket must then be
    /// committed or released by hand.
    #[must_use]
    pub fn into_ticket(mut self) -> Option<Ticket> {
        self.ticket.take()
    }
}

impl<S: QuotaStore> Drop for Reservation<S> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.store.release_on_drop(&t);
        }
    }
}

/// Reserves one search of `account` (daily `limit`) in `store` (`&store`,
/// or an owned handle the guard keeps), returning a guard that releases on
/// drop. `Ok(None)`: the day's searches are used up.
///
/// # Errors
/// A [`QuotaError`] when the store cannot be asked: answer without search.
pub async fn reserve<S: QuotaStore>(
    store: S,
    account: &str,
    limit: u32,
) -> Result<Option<Reservation<S>>, QuotaError> {
    Ok(store
        .try_reserve(account, limit)
        .await?
        .map(|t| Reservation::new(store, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(utc_day(951_782_400)), (2000, 2, 29));
        assert_eq!(civil_date(utc_day(1_796_083_199)), (2026, 11, 30));
        assert_eq!(civil_date(utc_day(1_796_083_200)), (2026, 12, 1));
    }
}

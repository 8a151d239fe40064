//! The quota store contract (`tests/common/quota_contract.rs`) on the
//! in-memory store. The Redis store runs the same clauses in
//! `crates/host/tests/quota_contract.rs`; what only the memory store does
//! (release on drop, pruning old days) is in `tests/quota.rs`.

use std::sync::Arc;

use citestream::quota::{ManualClock, MemoryStore};

#[path = "common/quota_contract.rs"]
#[macro_use]
mod clauses;

use clauses::LAST_SECOND;

contract!(memory, {
    let clock = ManualClock::new(LAST_SECOND - 3600);
    let store = MemoryStore::with_clock(clock.clone());
    (Arc::new(store), clock, ())
});

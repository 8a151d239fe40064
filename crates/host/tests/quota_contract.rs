//! The quota store contract (`tests/common/quota_contract.rs` at the
//! workspace root, which runs it on the core's memory store too) on the
//! Redis store: on a real `redis-server` that each test starts on a free
//! loopback port, and on a local Redis Cluster each test builds (3 masters,
//! 3 replicas). What only the Redis store does (leases, key expiry,
//! Redis going away) is in `quota_redis.rs`.

mod common;

use std::sync::Arc;

use citestream::quota::ManualClock;

#[path = "../../../tests/common/quota_contract.rs"]
#[macro_use]
mod clauses;

use clauses::LAST_SECOND;

contract!(redis, {
    let server = common::RedisServer::start();
    let clock = ManualClock::new(LAST_SECOND - 3600);
    (Arc::new(server.store(clock.clone())), clock, server)
});

contract!(redis_cluster, {
    let cluster = common::RedisCluster::start();
    let clock = ManualClock::new(LAST_SECOND - 3600);
    (Arc::new(cluster.store(clock.clone())), clock, cluster)
});

//! Helpers shared by the host's integration tests: a real `redis-server`
//! on a free loopback port, killed on drop. Without `redis-server` on PATH
//! (Debian package `redis-server`; `scripts/test.sh` installs it) the tests
//! that need it FAIL: they are never skipped.
#![allow(dead_code, unreachable_pub)]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use citestream::quota::ManualClock;
use citestream_host::store::{RedisConfig, RedisStore};

/// A free loopback port (bound, then closed again).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    l.local_addr().unwrap().port()
}

/// Starts `redis-server` on 127.0.0.1:`port` with no persistence and the
/// extra `args`, and waits until it listens.
pub fn spawn_redis(port: u16, args: &[&str]) -> Child {
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start `redis-server` ({e}): these tests need it on PATH \
                 (Debian/Ubuntu: apt-get install -y redis-server); they are not skipped"
            )
        });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("redis-server on port {port} exited at startup with {status}");
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return child;
        }
        assert!(
            Instant::now() < deadline,
            "redis-server did not listen on port {port} within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One `redis-server`, killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    /// A fresh server on a free port.
    pub fn start() -> RedisServer {
        let port = free_port();
        RedisServer {
            child: spawn_redis(port, &[]),
            port,
        }
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A store of its own (own client, own connection: one gateway).
    pub fn store(&self, clock: ManualClock) -> RedisStore {
        self.store_with(clock, RedisConfig::default())
    }

    /// A store with explicit settings.
    pub fn store_with(&self, clock: ManualClock, config: RedisConfig) -> RedisStore {
        let client = redis::Client::open(self.url()).unwrap();
        RedisStore::with_config(client, config, clock)
    }

    /// Runs one command on a fresh blocking connection.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        let mut c = redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap();
        cmd.query(&mut c).unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

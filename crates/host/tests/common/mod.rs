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

/// Fails the test: `program` (Debian package `package`) could not be run.
fn missing(program: &str, package: &str, e: &std::io::Error) -> ! {
    panic!(
        "cannot run `{program}` ({e}): these tests need it on PATH \
         (Debian/Ubuntu: apt-get install -y {package}); they are not skipped"
    )
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
        .unwrap_or_else(|e| missing("redis-server", "redis-server", &e));
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
        RedisServer::start_on(free_port())
    }

    /// A fresh server on `port` (e.g. a restart of one that was dropped).
    pub fn start_on(port: u16) -> RedisServer {
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

/// A local Redis Cluster: 3 masters and 3 replicas on loopback ports
/// (`redis-server --cluster-enabled yes`, then `redis-cli --cluster
/// create … --cluster-replicas 1`), every node killed on drop. Needs
/// `redis-cli` too (Debian package `redis-tools`).
pub struct RedisCluster {
    nodes: Vec<(u16, Child)>,
    dir: std::path::PathBuf,
}

impl RedisCluster {
    /// Starts the six nodes, creates the cluster and waits until every
    /// slot is served.
    pub fn start() -> RedisCluster {
        let dir = std::env::temp_dir().join(format!(
            "citestream-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut nodes = Vec::new();
        while nodes.len() < 6 {
            let port = free_port();
            if port > 55_535 {
                continue; // the cluster bus listens on port + 10000
            }
            let conf = dir.join(format!("nodes-{port}.conf"));
            let child = spawn_redis(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    conf.to_str().unwrap(),
                    "--cluster-node-timeout",
                    "1000",
                    // A replica takes over however long its master was quiet.
                    "--cluster-replica-validity-factor",
                    "0",
                    "--dir",
                    dir.to_str().unwrap(),
                ],
            );
            nodes.push((port, child));
        }
        let cluster = RedisCluster { nodes, dir };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|(p, _)| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| missing("redis-cli", "redis-tools", &e));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.is_ok() {
            assert!(Instant::now() < deadline, "the cluster never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// Every node reports `cluster_state:ok`.
    pub fn is_ok(&self) -> bool {
        self.nodes.iter().all(|(p, _)| {
            redis::Client::open(format!("redis://127.0.0.1:{p}/"))
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        })
    }

    /// The seed nodes, `redis://127.0.0.1:<port>` each.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(p, _)| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// A store of its own on the cluster.
    pub fn store(&self, clock: ManualClock) -> RedisStore {
        RedisStore::cluster(&self.seeds(), RedisConfig::default(), clock).unwrap()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

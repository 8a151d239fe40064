"""A local Redis Cluster for the end-to-end tests: 3 masters and 3 replicas.

Contract: `RedisCluster.start()` runs six `redis-server --cluster-enabled yes`
processes on free loopback ports (no persistence, node timeout 1 s, a
replica always allowed to take over), joins
them with `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`
and waits until every node reports `cluster_state:ok`. `seeds` are the
`redis://127.0.0.1:PORT` URLs (`quota.redis_cluster`); `master_of(key)` is
the port of the master serving `key`'s slot; `kill(port)` ends one node by
pid (SIGKILL: a crash); `stop()` ends them all. redis-server and redis-cli
come from Debian's `redis-server` and `redis-tools` (installed when missing
and we are root); nothing skips.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import redis

from .procs import ensure_debian, free_port, stop_pid


class RedisCluster:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.nodes: dict[int, subprocess.Popen] = {}

    @classmethod
    def start(cls, timeout: float = 60.0) -> "RedisCluster":
        exe = ensure_debian("redis-server", "redis-server")
        cli = ensure_debian("redis-cli", "redis-tools")
        c = cls(Path(tempfile.mkdtemp(prefix="citestream-cluster-")))
        try:
            while len(c.nodes) < 6:
                port = free_port()
                if port > 55535:  # the cluster bus listens on port + 10000
                    continue
                c.nodes[port] = subprocess.Popen(
                    [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                     "--dir", str(c.tmp), "--cluster-enabled", "yes",
                     "--cluster-config-file", str(c.tmp / f"nodes-{port}.conf"),
                     "--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0",
                     "--daemonize", "no"],
                    stdin=subprocess.DEVNULL, stdout=open(c.tmp / f"log-{port}", "wb"), stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + timeout
            for port in c.nodes:
                while not c._pong(port):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server on {port} did not answer PING")
                    time.sleep(0.05)
            addrs = [f"127.0.0.1:{p}" for p in c.nodes]
            subprocess.run([cli, "--cluster", "create", *addrs, "--cluster-replicas", "1", "--cluster-yes"],
                           check=True, capture_output=True, timeout=60)
            while not c.is_ok():
                if time.monotonic() > deadline:
                    raise RuntimeError("the Redis Cluster never reported cluster_state:ok")
                time.sleep(0.1)
        except BaseException:
            c.stop()
            raise
        return c

    def _pong(self, port: int) -> bool:
        try:
            return redis.Redis(port=port, socket_timeout=0.5).ping()
        except redis.RedisError:
            return False

    def is_ok(self) -> bool:
        """Every live node reports `cluster_state:ok`."""
        try:
            return all(redis.Redis(port=p, socket_timeout=0.5).cluster("info")["cluster_state"] == "ok"
                       for p, proc in self.nodes.items() if proc.poll() is None)
        except redis.RedisError:
            return False

    @property
    def seeds(self) -> list[str]:
        return [f"redis://127.0.0.1:{p}" for p in self.nodes]

    def client(self) -> redis.RedisCluster:
        live = next(p for p, proc in self.nodes.items() if proc.poll() is None)
        return redis.RedisCluster(host="127.0.0.1", port=live)

    def master_of(self, key: str) -> int:
        live = next(p for p, proc in self.nodes.items() if proc.poll() is None)
        r = redis.Redis(port=live)
        slot = r.cluster("keyslot", key)
        for start, end, master, *_ in r.execute_command("CLUSTER SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise RuntimeError(f"no master serves slot {slot}")

    def kill(self, port: int) -> None:
        self.nodes[port].kill()
        self.nodes[port].wait(10)

    def stop(self) -> None:
        for proc in self.nodes.values():
            stop_pid(proc, 5.0)

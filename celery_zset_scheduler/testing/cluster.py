"""A real Redis Cluster on free loopback ports: plain ``redis-server --cluster-enabled yes``
processes joined by ``redis-cli --cluster create``, for tests and the benchmarks.

Three masters and one replica each by default, AOF on every node, and
``cluster-require-full-coverage no`` (as the README recommends for the store: while a master is
being replaced, the others go on serving their shards). Nodes are stopped by PID;
``kill(node)`` is a ``kill -9`` and ``restore()`` brings every stopped node back (a killed master
rejoins as a replica of the one that replaced it) and waits until the cluster is whole again.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from . import RedisServer, find_redis_server


def cluster_support() -> str | None:
    """Why a local cluster cannot be started here, or None when it can."""
    try:
        server = find_redis_server()
    except RuntimeError as exc:
        return str(exc)
    cli = shutil.which("redis-cli") or shutil.which("valkey-cli")
    if cli is None:
        return "no redis-cli on PATH (it creates the cluster)"
    try:
        out = subprocess.run([cli, "--cluster", "help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cli} --cluster help failed: {exc}"
    if "create" not in out.stdout + out.stderr:
        return f"{cli} has no --cluster create (Redis >= 5 is needed)"
    version = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=10).stdout
    if " v=" in version and int(version.split(" v=")[1].split(".")[0]) < 5:
        return f"{server} is older than Redis 5 (no cluster create)"
    return None


def _command(node: RedisServer, *args: Any) -> Any:
    client: Any = node.client()
    try:
        return client.execute_command(*args)
    finally:
        client.close()


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(count: int) -> list[int]:
    """``count`` free ports whose cluster bus port (port + 10000) is free too."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 < 65536 and port not in ports and _port_free(port + 10000) and port != 6379:
            ports.append(port)
        elif port > 55535:
            # The kernel hands out high ports; walk a lower range instead.
            for candidate in range(20000 + 37 * len(ports), 55535, 97):
                if candidate not in ports and _port_free(candidate) and _port_free(candidate + 10000):
                    ports.append(candidate)
                    break
    return ports


class RedisClusterServer:
    """``masters`` masters with ``replicas`` replicas each, AOF on, on 127.0.0.1."""

    def __init__(self, masters: int = 3, replicas: int = 1, *, node_timeout_ms: int = 2000,
                 appendfsync: str = "always") -> None:
        self.masters, self.replicas = masters, replicas
        self.dir = Path(tempfile.mkdtemp(prefix="zset-cluster-"))
        ports = cluster_ports(masters * (1 + replicas))
        self.nodes = [
            RedisServer(
                port=port, appendonly=True, data_dir=str(self.dir / str(port)),
                extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                       "--cluster-node-timeout", str(node_timeout_ms),
                       # The other masters go on serving their slots while one is replaced.
                       "--cluster-require-full-coverage", "no", "--appendfsync", appendfsync],
            )
            for port in ports
        ]
        self.stopped: list[RedisServer] = []

    @property
    def url(self) -> str:
        """Any node names the cluster: the first one."""
        return self.nodes[0].url

    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port)

    def start(self, timeout: float = 60.0) -> RedisClusterServer:
        for node in self.nodes:
            Path(node.dir).mkdir(parents=True, exist_ok=True)
            node.start()
        cli = shutil.which("redis-cli") or shutil.which("valkey-cli") or "redis-cli"
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        out = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=timeout,
        )
        if out.returncode != 0:
            self.close()
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")
        self.wait_healthy(timeout)
        return self

    def _live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n not in self.stopped]

    def health(self) -> str | None:
        """What is wrong with the cluster, or None when every node agrees it is whole: state ok,
        every slot served, ``masters`` masters with ``replicas`` replicas each."""
        for node in self.nodes:
            if node in self.stopped:
                return f"node {node.port} is stopped"
            try:
                info = _command(node, "CLUSTER", "INFO").decode()
                nodes = _command(node, "CLUSTER", "NODES").decode()
            except redis.RedisError as exc:
                return f"node {node.port}: {exc}"
            fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
            if fields.get("cluster_state") != "ok" or fields.get("cluster_slots_ok") != "16384":
                state, slots = fields.get("cluster_state"), fields.get("cluster_slots_ok")
                return f"node {node.port}: state {state}, slots ok {slots}"
            lines = [line.split() for line in nodes.splitlines() if line.strip()]
            if any("fail" in line[2] or "fail?" in line[2] or line[7] != "connected" for line in lines):
                return f"node {node.port} sees a failed or disconnected node"
            masters = [line for line in lines if "master" in line[2] and len(line) > 8]
            if len(masters) != self.masters:
                return f"node {node.port} sees {len(masters)} masters serving slots"
            for master in masters:
                replicas = [line for line in lines if line[3] == master[0]]
                if len(replicas) < self.replicas:
                    return f"master {master[1]} has {len(replicas)} replicas"
        for node in self.nodes:
            role = node.client().info("replication")
            if role.get("role") == "slave" and role.get("master_link_status") != "up":
                return f"replica {node.port} is not in sync with its master"
        return None

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        problem = self.health()
        while problem is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not become whole within {timeout}s: {problem}")
            time.sleep(0.1)
            problem = self.health()

    def master_ports(self) -> list[int]:
        """Ports of the nodes that are masters now (a failover changes them)."""
        found = []
        for node in self._live():
            try:
                if node.client().info("replication").get("role") == "master":
                    found.append(node.port)
            except redis.RedisError:
                continue
        return found

    def master_of(self, key: str) -> RedisServer:
        client: Any = self.client()
        try:
            node = client.get_node_from_key(key)
            return self.node(int(node.port))
        finally:
            client.close()

    def replica_of(self, master: RedisServer) -> RedisServer:
        for node in self._live():
            info = node.client().info("replication")
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == master.port:
                return node
        raise RuntimeError(f"master {master.port} has no live replica")

    def kill(self, node: RedisServer) -> None:
        """``kill -9`` a node (by PID); ``restore()`` starts it again."""
        node.stop(kill=True)
        self.stopped.append(node)

    def wait_promoted(self, replica: RedisServer, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while replica.client().info("replication").get("role") != "master":
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {replica.port} was not promoted within {timeout}s")
            time.sleep(0.05)

    def failover(self, master: RedisServer, timeout: float = 30.0) -> RedisServer:
        """``CLUSTER FAILOVER`` on the replica of ``master``; returns the new master once it is one."""
        replica = self.replica_of(master)
        _command(replica, "CLUSTER", "FAILOVER")
        self.wait_promoted(replica, timeout)
        return replica

    def restore(self, timeout: float = 60.0) -> None:
        """Start every stopped node (it rejoins from its nodes.conf) and wait until all is whole."""
        for node in list(self.stopped):
            node.start()
            self.stopped.remove(node)
        self.wait_healthy(timeout)

    def flushall(self) -> None:
        for port in self.master_ports():
            self.node(port).client().flushall()

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisClusterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

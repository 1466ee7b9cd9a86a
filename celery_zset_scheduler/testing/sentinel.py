"""A real Sentinel-managed Redis on free loopback ports: a master, its replicas and sentinels,
each a ``redis-server`` process (``--sentinel`` for the sentinels), for tests and the benchmarks.

AOF on every data node, short ``down-after-milliseconds`` so that a ``kill -9`` of the master is
noticed within a second. Processes are stopped by PID; ``kill_master()`` is a ``kill -9``,
``failover()`` a graceful ``SENTINEL FAILOVER``, and ``restore()`` starts every stopped node again
(a killed master rejoins as a replica: the sentinels reconfigure it) and waits until the set is
whole.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from . import RedisServer, find_redis_server, free_port

MASTER_NAME = "mymaster"


class SentinelProcess:
    """One ``redis-server --sentinel`` watching ``master_name`` at ``master_port``."""

    def __init__(self, binary: str, directory: Path, master_port: int, master_name: str, quorum: int,
                 down_after_ms: int, password: str | None = None) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "sentinel.conf"
        lines = [
            f"port {self.port}", "bind 127.0.0.1", f"dir {self.dir}", f"logfile {self.dir / 'sentinel.log'}",
            f"sentinel monitor {master_name} 127.0.0.1 {master_port} {quorum}",
            f"sentinel down-after-milliseconds {master_name} {down_after_ms}",
            f"sentinel failover-timeout {master_name} 10000",
            f"sentinel parallel-syncs {master_name} 1",
        ]
        if password is not None:  # the same password for the data nodes and the sentinels
            lines += [f"sentinel auth-pass {master_name} {password}", f"requirepass {password}"]
        self.password = password
        self.config.write_text("\n".join(lines) + "\n")
        self.process: subprocess.Popen[bytes] | None = None

    def client(self) -> Any:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, password=self.password)

    def start(self, timeout: float = 10.0) -> None:
        self.process = subprocess.Popen([self.binary, str(self.config), "--sentinel"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.dir / "sentinel.log").read_text() if (self.dir / "sentinel.log").exists() else ""
                raise RuntimeError(f"sentinel on port {self.port} exited at start: {log[-2000:]}")
            try:
                if self.client().ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError(f"sentinel did not answer on port {self.port} within {timeout}s")

    def stop(self, kill: bool = False) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill() if kill else self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class RedisSentinelSet:
    """``replicas`` replicas of one master and ``sentinels`` sentinels (quorum: a majority)."""

    def __init__(self, replicas: int = 1, sentinels: int = 3, *, master_name: str = MASTER_NAME,
                 down_after_ms: int = 1000, password: str | None = None, appendonly: bool = True,
                 server_args: list[str] | None = None) -> None:
        self.binary = find_redis_server()
        self.master_name = master_name
        self.password = password
        self.dir = Path(tempfile.mkdtemp(prefix="zset-sentinel-"))
        auth = ["--requirepass", password, "--masterauth", password] if password else []
        self.nodes = [
            RedisServer(appendonly=appendonly, data_dir=str(self.dir / f"node{i}"), password=password,
                        extra=[*auth, *(server_args or [])])
            for i in range(1 + replicas)
        ]
        for node in self.nodes:
            Path(node.dir).mkdir(parents=True, exist_ok=True)
        first = self.nodes[0].port
        quorum = sentinels // 2 + 1
        self.sentinels = [
            SentinelProcess(self.binary, self.dir / f"sentinel{i}", first, master_name, quorum,
                            down_after_ms, password)
            for i in range(sentinels)
        ]
        self.stopped: list[RedisServer] = []

    # -- addresses -------------------------------------------------------------------------
    def url(self, db: int = 0) -> str:
        """Kombu's form: every sentinel, ``;``-separated, the master's password in the first."""
        auth = f":{self.password}@" if self.password else ""
        return ";".join(f"sentinel://{auth if i == 0 else ''}127.0.0.1:{s.port}/{db}"
                        for i, s in enumerate(self.sentinels))

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.sentinels]

    def master_port(self) -> int:
        """The master's port as a running sentinel reports it now."""
        for sentinel in self.sentinels:
            if not sentinel.running:
                continue
            try:
                _host, port = sentinel.client().sentinel_get_master_addr_by_name(self.master_name)
                return int(port)
            except (redis.RedisError, TypeError):
                continue
        raise RuntimeError("no sentinel answered with the master's address")

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def master(self) -> RedisServer:
        return self.node(self.master_port())

    def client(self) -> redis.Redis:
        """A plain client of today's master (for checks by the tests, not a Sentinel client)."""
        return self.master().client()

    # -- life ------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> RedisSentinelSet:
        master = self.nodes[0]
        master.start()
        for node in self.nodes[1:]:
            node.extra += ["--replicaof", "127.0.0.1", str(master.port)]
            node.start()
        for sentinel in self.sentinels:
            sentinel.start()
        self.wait_healthy(timeout)
        return self

    def health(self) -> str | None:
        """What is not whole yet, or None: every sentinel agrees on one master, knows every
        replica and the other sentinels, and every replica is in sync with that master."""
        ports = set()
        for sentinel in self.sentinels:
            if not sentinel.running:
                return f"sentinel {sentinel.port} is stopped"
            try:
                client = sentinel.client()
                state = client.sentinel_master(self.master_name)
                ports.add(int(state["port"]))
                flags = set(state["flags"])
                if flags & {"s_down", "o_down", "failover_in_progress"}:
                    return f"sentinel {sentinel.port} sees the master as {','.join(sorted(flags))}"
                if int(state["num-slaves"]) < len(self.nodes) - 1:
                    return f"sentinel {sentinel.port} knows {state['num-slaves']} replicas"
                if int(state["num-other-sentinels"]) < len(self.sentinels) - 1:
                    return f"sentinel {sentinel.port} knows {state['num-other-sentinels']} other sentinels"
                for replica in client.sentinel_slaves(self.master_name):
                    bad = set(replica["flags"]) & {"s_down", "o_down", "disconnected"}
                    if bad:
                        return f"sentinel {sentinel.port} sees replica {replica['port']} as {','.join(sorted(bad))}"
            except (redis.RedisError, KeyError, ValueError) as exc:
                return f"sentinel {sentinel.port}: {exc}"
        if len(ports) != 1:
            return f"the sentinels disagree on the master: {sorted(ports)}"
        (master_port,) = ports
        for node in self.nodes:
            if node in self.stopped:
                return f"node {node.port} is stopped"
            try:
                info = node.client().info("replication")
            except redis.RedisError as exc:
                return f"node {node.port}: {exc}"
            if node.port == master_port:
                if info.get("role") != "master":
                    return f"node {node.port} is not the master yet"
            elif info.get("role") != "slave" or int(info.get("master_port", 0)) != master_port \
                    or info.get("master_link_status") != "up":
                return f"node {node.port} is not an in-sync replica of {master_port} yet"
        return None

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        problem = self.health()
        while problem is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinel set did not become whole within {timeout}s: {problem}")
            time.sleep(0.1)
            problem = self.health()

    def kill_master(self) -> RedisServer:
        """``kill -9`` today's master; returns it (``restore()`` starts it again)."""
        master = self.master()
        master.stop(kill=True)
        self.stopped.append(master)
        return master

    def wait_new_master(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until the sentinels report a master other than ``old_port`` and it is a master."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                port = self.master_port()
                if port != old_port and self.node(port).client().info("replication").get("role") == "master":
                    return port
            except (RuntimeError, redis.RedisError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"no replica of {old_port} was promoted within {timeout}s")

    def failover(self, timeout: float = 30.0) -> int:
        """A graceful ``SENTINEL FAILOVER``; returns the new master's port once it is one."""
        old = self.master_port()
        running = next(s for s in self.sentinels if s.running)
        running.client().execute_command("SENTINEL", "FAILOVER", self.master_name)
        return self.wait_new_master(old, timeout)

    def restore(self, timeout: float = 60.0) -> None:
        """Start every stopped node and sentinel, and wait until the set is whole again. A node
        starts with no ``--replicaof``: the sentinels make it a replica of today's master (a
        master killed and restarted comes back as one, and is reconfigured some seconds later)."""
        for sentinel in self.sentinels:
            if not sentinel.running:
                sentinel.start()
        for node in list(self.stopped):
            node.extra = _without_replicaof(node.extra)
            node.start()
            self.stopped.remove(node)
        self.wait_healthy(timeout)

    def reset(self) -> None:
        """Whole again and empty: for a test that shares the set."""
        self.restore()
        client = self.client()
        try:
            client.flushall()
            if len(self.nodes) > 1:
                client.wait(len(self.nodes) - 1, 5000)
        finally:
            client.close()

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisSentinelSet:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _without_replicaof(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = 0
    for arg in args:
        if skip:
            skip -= 1
            continue
        if arg == "--replicaof":
            skip = 2
            continue
        out.append(arg)
    return out

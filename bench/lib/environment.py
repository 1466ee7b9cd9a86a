"""Where a benchmark runs: the Redis servers, and two Celery apps on them (ours and plain Celery).

Both apps use a queue and a store prefix of their own (random names), so a run against a Redis in use
neither feeds the user's workers nor touches the user's keys, and :meth:`cleanup` removes only those.
"""

from __future__ import annotations

import os
import platform
import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import redis
from celery import Celery

from celery_zset_scheduler.celery.core.state import broker_redis_url, ensure_installation
from celery_zset_scheduler.celery.install import install
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.testing import RedisServer

TASK_NAME = "zbench.add"
STAMP_NAME = "zbench.stamp"  # (tag, due, pad=""): records its start (bench.lib.worker_app)


@dataclass
class BenchEnv:
    """The two apps, their clients and the names that belong to this run."""

    ours: Celery  # installed: countdown/ETA tasks go to the store
    plain: Celery  # not installed: plain Celery, same broker and queue
    store_url: str
    broker_url: str
    queue: str
    prefix: str
    shards: int
    topology: str

    @property
    def store(self) -> Store:
        return ensure_installation(self.ours).store

    @cached_property
    def store_client(self) -> Any:
        s = ensure_installation(self.ours).settings
        return make_client(self.store_url, master_name=s.master_name, sentinel_kwargs=s.sentinel_kwargs)

    @cached_property
    def broker_client(self) -> redis.Redis | None:
        """A client of the broker when it is Redis (None otherwise: broker-side figures are skipped)."""
        url = broker_redis_url(self.plain)
        options = self.plain.conf.broker_transport_options or {}
        return make_client(url, master_name=options.get("master_name")) if url else None

    def task(self, app: Celery) -> Any:
        return app.tasks[TASK_NAME]

    def used_memory(self) -> int:
        return int(self.store_client.info("memory")["used_memory"])

    def queue_bytes(self) -> int:
        """``MEMORY USAGE`` (every element counted) of the benchmark queue's lists."""
        client = self.broker_client
        if client is None:
            return 0
        return sum(int(client.memory_usage(name, samples=0) or 0) for name in _queue_keys(self.queue))

    def purge_queue(self, bindings: bool = False) -> None:
        client = self.broker_client
        if client is not None:
            names = _queue_keys(self.queue)
            if bindings:  # Kombu's routing table of the queue's exchange (named like the queue)
                names += [f"_kombu.binding.{self.queue}", f"_kombu.binding_permanent.{self.queue}"]
            client.unlink(*names)

    def cleanup(self) -> None:
        """Delete this run's store keys, queue and bindings (UNLINK: freed in the background).
        Leader records (``{prefix:s}:leader:<token>``) expire with their lease."""
        client = self.store_client
        keys = self.store.keys
        names = [keys.meta, keys.members, keys.dlq_index, keys.dlq_data]
        for s in range(keys.shards):
            sk = keys.shard(s)
            names += [sk.shared_old, sk.shared_grave, sk.shared_gc]
            names += [sk.due, sk.msg, sk.big, sk.shared, sk.inflight, sk.lock, sk.epoch, sk.wake, sk.pending_keys,
                      sk.id_keys]
            names += [sk.periodic_names, sk.periodic_defs, sk.periodic_plan, sk.periodic_state, sk.periodic_tpl,
                      sk.periodic_next, sk.periodic_run, sk.periodic_wake]
        names += [keys.periodic_config, keys.periodic_sync]
        client.unlink(*names)
        self.purge_queue(bindings=True)


def _queue_keys(queue: str) -> list[str]:
    # Kombu's priority sub-queues are "<queue>\x06\x16<n>"; their names are fixed, so no SCAN.
    return [queue] + [f"{queue}\x06\x16{n}" for n in range(1, 10)]


def _make_app(name: str, broker_url: str, queue: str, conf: dict[str, Any]) -> Celery:
    app = Celery(name, set_as_current=False)
    app.conf.update({
        "broker_url": broker_url,
        "task_default_queue": queue,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        **conf,
    })

    @app.task(name=TASK_NAME, shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name=STAMP_NAME, shared=False)
    def stamp(tag: str, due: float, pad: str = "") -> None:  # run by bench.lib.worker_app's workers
        raise NotImplementedError

    return app


def make_env(store_url: str, broker_url: str, *, shards: int = 8, topology: str = "",
             conf: dict[str, Any] | None = None, both: dict[str, Any] | None = None,
             token: str | None = None) -> BenchEnv:
    """``conf`` is for our app only, ``both`` for both apps (their queue's declaration, say).
    Envs made with the same ``token`` share the queue name and the store prefix (one store, two
    brokers, or apps of the same run in other processes)."""
    token = token or secrets.token_hex(3)
    queue, prefix = f"zbench.{token}", f"zbench-{token}"
    settings = {
        "zset_scheduler_url": store_url, "zset_scheduler_prefix": prefix,
        "zset_scheduler_shards": shards, **(both or {}), **(conf or {}),
    }
    ours = _make_app("zbench-ours", broker_url, queue, settings)
    install(ours)
    plain = _make_app("zbench-plain", broker_url, queue, dict(both or {}))
    return BenchEnv(ours, plain, store_url, broker_url, queue, prefix, shards, topology)


@contextmanager
def local_env(*, servers: int = 1, shards: int = 8) -> Iterator[BenchEnv]:
    """Start our own redis-server(s): one server (store on db 0, broker on db 1) or two."""
    with ExitStack() as stack:
        store_server = stack.enter_context(RedisServer())
        if servers == 1:
            broker_url, topology = store_server.url_db(1), "one redis-server: store db 0, broker db 1"
        else:
            broker_server = stack.enter_context(RedisServer())
            broker_url, topology = broker_server.url, "two redis-servers: store, broker"
        env = make_env(store_server.url, broker_url, shards=shards, topology=topology)
        try:
            yield env
        finally:
            env.cleanup()


def describe_machine(env: BenchEnv) -> dict[str, Any]:
    info = env.store_client.info("server")
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            ram_kb = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        ram_kb = 0
    return {
        "redis": info.get("redis_version", "?"),
        "cpus": os.cpu_count(),
        "ram_gb": round(ram_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "topology": env.topology,
        "shards": env.shards,
    }

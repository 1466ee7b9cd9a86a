"""Redis bytes per pending task: ours, and Kombu's envelope stored as-is for comparison.

Bytes are ``used_memory`` deltas of the store's server around a fill, divided by the tasks added:
the real cost including Redis' per-entry overhead (dict entries, skiplist nodes, allocator size
classes), not just the payload length. ``MEMORY USAGE`` splits it between the ZSET and the HASH.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import redis

from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry

from .environment import BenchEnv

RAW_CHUNK = 10_000


@dataclass(frozen=True)
class Footprint:
    tasks: int
    used_bytes: int

    @property
    def per_task(self) -> float:
        return self.used_bytes / self.tasks if self.tasks else 0.0


def envelope(env: BenchEnv) -> bytes | None:
    """The newest raw message Kombu's Redis transport wrote to the benchmark queue, if any."""
    client = env.broker_client
    if client is None:
        return None
    raw: Any = client.lindex(env.queue, 0)
    return bytes(raw) if raw is not None else None


def envelope_as_is(env: BenchEnv, raw: bytes, count: int) -> Footprint:
    """Store ``count`` copies of the raw envelope in our layout (what the issue calls ~1,280 B)."""
    client = env.store_client
    store = Store(client, KeySpace(f"{env.prefix}-raw", env.shards))
    before = int(client.info("memory")["used_memory"])
    for start in range(0, count, RAW_CHUNK):
        n = min(RAW_CHUNK, count - start)
        store.schedule_many([NewEntry(str(uuid.uuid4()), 4_102_444_800_000, raw) for _ in range(n)])
    after = int(client.info("memory")["used_memory"])
    _drop(client, store.keys)
    return Footprint(count, after - before)


def breakdown(env: BenchEnv) -> dict[str, Any]:
    """Exact bytes of the ZSETs and HASHes (``MEMORY USAGE ... SAMPLES 0``) and a sample entry."""
    client = env.store_client
    keys = env.store.keys
    due = msg = shared = pending = 0
    for s in range(keys.shards):
        sk = keys.shard(s)
        due += int(client.memory_usage(sk.due, samples=0) or 0)
        msg += int(client.memory_usage(sk.msg, samples=0) or 0)
        for name in (sk.shared, sk.shared_old, sk.shared_grave):  # the last two: while a collection runs
            shared += int(client.memory_usage(name, samples=0) or 0)
        pending += int(client.zcard(sk.due))
    page = env.store.page(0, limit=100, with_payloads=True)
    payloads = [len(e.payload or b"") for e in page.entries]
    ids = [len(e.task_id) for e in page.entries]
    members = [len(e.member) for e in page.entries]  # as stored: a canonical UUID packed (model/ids.py)
    return {
        "pending": pending,
        "zset_bytes_per_task": round(due / pending, 1) if pending else None,
        "hash_bytes_per_task": round(msg / pending, 1) if pending else None,
        "shared_prefix_bytes": shared,  # every shard's shared prefixes together (store/shared.py)
        "mean_payload_len": round(sum(payloads) / len(payloads), 1) if payloads else None,
        "mean_id_len": round(sum(ids) / len(ids), 1) if ids else None,
        "mean_member_len": round(sum(members) / len(members), 1) if members else None,
    }


def _drop(client: redis.Redis, keys: KeySpace) -> None:
    names = [keys.meta]
    for s in range(keys.shards):
        sk = keys.shard(s)
        names += [sk.due, sk.msg, sk.shared, sk.shared_old, sk.shared_grave, sk.shared_gc]
    client.delete(*names)  # DEL, not UNLINK: freed before the next used_memory reading

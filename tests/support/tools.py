"""Reading the store the way tests want to (whole shards, totals): never needed by the product,
which only ever reads bounded pages (I4)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from redis.cluster import RedisCluster

from celery_zset_scheduler.model.letters import DeadLetter
from celery_zset_scheduler.store.claims import ClaimResult, Claims, Fence
from celery_zset_scheduler.store.deadletters import DeadLetters
from celery_zset_scheduler.store.entries import PageEntry
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.snapshot import read_shards


def command_stats(client: Any) -> dict[str, dict[str, Any]]:
    """``INFO commandstats`` of the server, or summed over every master of a cluster."""
    if not isinstance(client, RedisCluster):
        return dict(client.info("commandstats"))
    total: dict[str, dict[str, Any]] = {}
    for stats in client.info("commandstats", target_nodes=RedisCluster.PRIMARIES).values():
        for name, values in stats.items():
            calls = total.setdefault(name, {"calls": 0})
            calls["calls"] += int(values["calls"])
    return total


def reset_stats(client: Any) -> None:
    """``CONFIG RESETSTAT`` on the server, or on every master of a cluster."""
    if isinstance(client, RedisCluster):
        client.config_resetstat(target_nodes=RedisCluster.PRIMARIES)
    else:
        client.config_resetstat()


@dataclass(frozen=True)
class ShardCount:
    shard: int
    pending: int
    inflight: int


def counts(store: Store) -> list[ShardCount]:
    """Pending and in-flight entries of every shard."""
    _, states = read_shards(store, range(store.shards), leaders=False)
    return [ShardCount(s.shard, s.pending, s.inflight) for s in states]


def pending(store: Store) -> int:
    return sum(c.pending for c in counts(store))


def earliest(store: Store) -> int | None:
    """The earliest due time (ms) over all shards, or None when nothing is pending."""
    _, states = read_shards(store, range(store.shards), leaders=False)
    found = [s.oldest_due_ms for s in states if s.oldest_due_ms is not None]
    return min(found) if found else None


def iter_shard(store: Store, shard: int, *, page_size: int = 1000, **kwargs: Any) -> Iterator[PageEntry]:
    """Every pending entry of a shard, in due order, a page at a time."""
    after = None
    while True:
        page = store.page(shard, after=after, limit=page_size, **kwargs)
        yield from page.entries
        if page.cursor is None:
            return
        after = page.cursor


def claim(claims: Claims, fence: Fence, limit: int, lease_ms: int, max_wait_ms: int = 5000,
          wake_ttl_ms: int = 15000) -> ClaimResult:
    result = claims.claim_many([fence], limit, lease_ms, max_wait_ms, wake_ttl_ms).results[fence.shard]
    if isinstance(result, Exception):
        raise result
    return result


def iter_letters(letters: DeadLetters, page_size: int = 500) -> Iterator[DeadLetter]:
    """Every dead letter, newest first."""
    after = None
    while True:
        page = letters.page(after=after, limit=page_size)
        yield from page.letters
        if page.cursor is None:
            return
        after = page.cursor

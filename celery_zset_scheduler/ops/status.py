"""What ``celery zset status`` (and the admin's overview) shows: per-shard counts, lag and leaders,
the live dispatchers, the dead letters and the shared prefixes, read in a bounded number of round
trips (I4)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..store.pending import Store
from ..store.periodic import PeriodicStore, ShardCounts
from ..store.shared_gc import SharedUsage, usage
from ..store.snapshot import ShardState, read_shards
from .cluster import ClusterView, read_cluster

MAX_MEMBERS_LISTED = 1000


@dataclass(frozen=True)
class DispatcherInfo:
    id: str
    shards: list[int]  # shards it leads
    member: bool  # in the membership (False: pinned with --shards, seen only as a leader)
    expires_ms: int | None  # membership deadline


@dataclass(frozen=True)
class StoreStatus:
    now_ms: int
    shards: list[ShardState]
    dispatchers: list[DispatcherInfo] = field(default_factory=list)
    dead_letters: int = 0
    #: the ``{prefix}:stats`` counters workers keep (e.g. idempotency_lease_lost_completions)
    stats: dict[str, int] = field(default_factory=dict)
    periodic: list[ShardCounts] = field(default_factory=list)  # periodic entries per shard
    cluster: ClusterView | None = None  # the Redis Cluster behind the store (None: standalone)
    shared: list[SharedUsage] = field(default_factory=list)  # shared prefixes and their collection, per shard

    @property
    def pending(self) -> int:
        return sum(s.pending for s in self.shards)

    @property
    def inflight(self) -> int:
        return sum(s.inflight for s in self.shards)

    @property
    def oldest_due_ms(self) -> int | None:
        found = [s.oldest_due_ms for s in self.shards if s.oldest_due_ms is not None]
        return min(found) if found else None

    @property
    def lag_ms(self) -> int:
        return max((s.lag_ms(self.now_ms) for s in self.shards), default=0)

    @property
    def shared_totals(self) -> tuple[int, int, int]:
        """Shared prefixes in use, set aside by a collection under way, waiting to be deleted."""
        return (sum(u.live for u in self.shared), sum(u.old for u in self.shared),
                sum(u.grave for u in self.shared))

    @property
    def rate(self) -> float:
        return float(round(sum(s.leader.rate for s in self.shards if s.leader), 3))


def read_status(store: Store) -> StoreStatus:
    """Every shard's state, the live dispatchers and the number of dead letters."""
    now_ms, shards = read_shards(store, range(store.shards))
    pipe = store.client.pipeline(transaction=False)
    pipe.zrangebyscore(store.keys.members, f"({now_ms}", "+inf", start=0, num=MAX_MEMBERS_LISTED, withscores=True)
    pipe.zcard(store.keys.dlq_index)
    pipe.hgetall(store.keys.stats)
    members, dead, stats = pipe.execute()
    led: dict[str, list[int]] = {}
    for state in shards:
        if state.leader is not None:
            led.setdefault(state.leader.member, []).append(state.shard)
    dispatchers = [DispatcherInfo(m.decode(), led.pop(m.decode(), []), True, int(score)) for m, score in members]
    dispatchers += [DispatcherInfo(member, owned, False, None) for member, owned in led.items()]
    dispatchers.sort(key=lambda d: d.id)
    counters = {k.decode(): int(v) for k, v in sorted(stats.items())}
    return StoreStatus(now_ms, shards, dispatchers, int(dead), stats=counters, periodic=PeriodicStore(store).counts(),
                       cluster=read_cluster(store), shared=usage(store.client, store.keys, range(store.shards)))

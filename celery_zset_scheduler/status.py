"""A read-only snapshot of the store for people and metrics: per-shard counts, lag and leaders.

Every read is O(1) or O(log n) per shard (ZCARD, the first entry of ``due``, GET of the lease),
pipelined in two round trips whatever the number of pending tasks (I4). Time is Redis time (I5).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ShardCountMismatch
from .keys import FORMAT_VERSION
from .leaderinfo import LeaderRecord
from .store import Store

MAX_MEMBERS_LISTED = 1000


@dataclass(frozen=True)
class ShardState:
    shard: int
    pending: int
    inflight: int
    oldest_due_ms: int | None  # earliest due time still pending
    locked: bool = False  # a lease is held
    epoch: int = 0  # the fencing epoch (increments on every new leader)
    leader: LeaderRecord | None = None  # who holds the lease, when it announced itself

    def lag_ms(self, now_ms: int) -> int:
        """How long the oldest overdue entry has waited past its due time (0 when none is)."""
        if self.oldest_due_ms is None:
            return 0
        return max(0, now_ms - self.oldest_due_ms)


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
    def rate(self) -> float:
        return float(round(sum(s.leader.rate for s in self.shards if s.leader), 3))


def redis_ms(reply: Sequence[Any]) -> int:
    """Milliseconds from a ``TIME`` reply."""
    return int(reply[0]) * 1000 + int(reply[1]) // 1000


def read_shards(store: Store, shards: Iterable[int], *, leaders: bool = True) -> tuple[int, list[ShardState]]:
    """Redis time and the state of ``shards``; ``leaders=False`` skips the lease reads."""
    wanted = list(shards)
    pipe = store.client.pipeline(transaction=False)
    pipe.time()
    for shard in wanted:
        sk = store.keys.shard(shard)
        pipe.zcard(sk.due)
        pipe.zcard(sk.inflight)
        pipe.zrange(sk.due, 0, 0, withscores=True)
        if leaders:
            pipe.get(sk.lock)
            pipe.get(sk.epoch)
    replies = pipe.execute()
    now_ms = redis_ms(replies[0])
    per = 5 if leaders else 3
    rows = [replies[1 + i * per: 1 + (i + 1) * per] for i in range(len(wanted))]
    records: list[LeaderRecord | None] = [None] * len(wanted)
    if leaders:
        records = _leader_records(store, wanted, [row[3] for row in rows])
    states = []
    for i, shard in enumerate(wanted):
        pending, inflight, first = rows[i][0], rows[i][1], rows[i][2]
        states.append(ShardState(
            shard=shard, pending=int(pending), inflight=int(inflight),
            oldest_due_ms=int(first[0][1]) if first else None,
            locked=leaders and rows[i][3] is not None,
            epoch=int(rows[i][4] or 0) if leaders else 0,
            leader=records[i],
        ))
    return now_ms, states


def _leader_records(store: Store, shards: list[int], tokens: list[bytes | None]) -> list[LeaderRecord | None]:
    held = [(i, t) for i, t in enumerate(tokens) if t is not None]
    records: list[LeaderRecord | None] = [None] * len(shards)
    if not held:
        return records
    pipe = store.client.pipeline(transaction=False)
    for i, token in held:
        pipe.get(store.keys.shard(shards[i]).leader_info(token.decode()))
    for (i, _), raw in zip(held, pipe.execute(), strict=True):
        records[i] = LeaderRecord.from_json(raw) if raw is not None else None
    return records


def read_status(store: Store) -> StoreStatus:
    """Everything ``celery zset status`` shows."""
    now_ms, shards = read_shards(store, range(store.shards))
    pipe = store.client.pipeline(transaction=False)
    pipe.zrangebyscore(store.keys.members, f"({now_ms}", "+inf", start=0, num=MAX_MEMBERS_LISTED, withscores=True)
    pipe.zcard(store.keys.dlq_index)
    members, dead = pipe.execute()
    led: dict[str, list[int]] = {}
    for state in shards:
        if state.leader is not None:
            led.setdefault(state.leader.member, []).append(state.shard)
    dispatchers = [DispatcherInfo(m.decode(), led.pop(m.decode(), []), True, int(score)) for m, score in members]
    dispatchers += [DispatcherInfo(member, owned, False, None) for member, owned in led.items()]
    dispatchers.sort(key=lambda d: d.id)
    return StoreStatus(now_ms, shards, dispatchers, int(dead))


def check_shard_count(store: Store) -> None:
    """Refuse a store created with another shard count, without writing anything (unlike
    :meth:`Store.check_meta`, which records the count on first use)."""
    shards, version = store.client.hmget(store.keys.meta, ["shards", "version"])
    if shards is not None and int(shards) != store.shards:
        raise ShardCountMismatch(
            f"the store at prefix {store.keys.prefix!r} has {int(shards)} shards but this client is "
            f"configured with zset_scheduler_shards={store.shards}; set it to {int(shards)}"
        )
    if version is not None and int(version) != FORMAT_VERSION:
        raise ShardCountMismatch(
            f"the store at prefix {store.keys.prefix!r} uses format version {int(version)}, "
            f"this version of celery-zset-scheduler reads version {FORMAT_VERSION}"
        )

"""A read-only snapshot of shards for people and metrics: counts, oldest due entry and leaders.

Every read is O(1) or O(log n) per shard (ZCARD, the first entry of ``due``, GET of the lease),
pipelined in at most two round trips whatever the number of pending tasks (I4). Time is Redis time (I5).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..model.clock import time_ms
from ..model.leaders import LeaderRecord
from .client import is_cluster
from .pending import Store


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


def redis_now_ms(store: Store) -> int:
    """The Redis server's clock (I5), in ms."""
    return time_ms(store.client.time())


def read_shards(store: Store, shards: Iterable[int], *, leaders: bool = True) -> tuple[int, list[ShardState]]:
    """Redis time and the state of ``shards``; ``leaders=False`` skips the lease reads."""
    wanted = list(shards)
    pipe = store.client.pipeline(transaction=False)
    # A cluster pipeline takes keyed commands only: TIME (of any node) is its own round trip there.
    clock = store.client.time() if is_cluster(store.client) else None
    if clock is None:
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
    if clock is not None:
        replies.insert(0, clock)
    now_ms = time_ms(replies[0])
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


def count_due(store: Store, shards: Iterable[int], low: int | None, high: int | None) -> int:
    """Pending entries due in ``[low, high]`` over ``shards``: ZCOUNT is O(log n) per shard."""
    pipe = store.client.pipeline(transaction=False)
    for shard in shards:
        pipe.zcount(store.keys.shard(shard).due, "-inf" if low is None else low, "+inf" if high is None else high)
    return sum(int(n) for n in pipe.execute())

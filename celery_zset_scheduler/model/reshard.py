"""The layout math of a reshard: where an entry lives under a shard count, which shards exist
while a move is under way, and what a move would change (pure: no Redis).

Shard keys are named by number, so the old and the new layout share the shards both have: an
entry stays where it is when its routing key hashes to the same number under both counts, and
otherwise moves from its old shard to its new one. While a move from ``N`` to ``M`` shards is
under way entries live in shards ``0 .. max(N, M) - 1`` (the *span*) and every write is routed
with ``M``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field


def shard_for(routing: str, shards: int) -> int:
    """The shard of a routing key (task id, idempotency key or periodic entry name) under ``shards``.

    The same function as ``KeySpace.shard_of``: stable across hosts and Python versions."""
    return zlib.crc32(routing.encode("utf-8")) % shards


@dataclass(frozen=True)
class Layout:
    """What the meta hash says about the shard count: the count, and a move under way (or None)."""

    shards: int
    moving_to: int | None = None

    @property
    def moving(self) -> bool:
        return self.moving_to is not None

    @property
    def routing(self) -> int:
        """The count writes are routed with: the target's as soon as a move begins."""
        return self.shards if self.moving_to is None else self.moving_to

    @property
    def span(self) -> int:
        """How many shards may hold entries: both layouts' while a move is under way."""
        return self.shards if self.moving_to is None else max(self.shards, self.moving_to)

    def accepts(self, configured: int) -> bool:
        """Whether a client configured with ``configured`` shards may use the store now: the
        recorded count, or either end of a move under way (it follows the move)."""
        return configured == self.shards or configured == self.moving_to


def routing_key(task_id: str, idempotency_key: str | None, periodic_name: str | None) -> str:
    """What an entry's shard is computed from: its idempotency key, else the periodic entry it is
    an occurrence of (occurrences live with their entry), else its id."""
    return idempotency_key or periodic_name or task_id


@dataclass
class ShardPlan:
    """What moving one shard would do: entries kept, and how many go to each new shard."""

    shard: int
    kept: int = 0
    out: dict[int, int] = field(default_factory=dict)

    @property
    def moving(self) -> int:
        return sum(self.out.values())

    def count(self, target: int) -> None:
        if target == self.shard:
            self.kept += 1
        else:
            self.out[target] = self.out.get(target, 0) + 1


def plan_shard(shard: int, routing_keys: Iterable[str], to: int) -> ShardPlan:
    """Count where the entries of ``shard`` (given by routing key) go under ``to`` shards."""
    plan = ShardPlan(shard)
    for key in routing_keys:
        plan.count(shard_for(key, to))
    return plan


def check_target(current: int, to: int, most: int) -> str | None:
    """Why a move from ``current`` to ``to`` shards cannot be made, or None."""
    if to < 1:
        return f"--to {to}: the shard count must be at least 1"
    if to > most:
        return f"--to {to}: at most {most} shards"
    if to == current:
        return f"the store already has {current} shards"
    return None

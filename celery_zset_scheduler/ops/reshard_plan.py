"""What a reshard would move: where each entry goes under the new count, and the dry run.

:func:`plan` (``celery zset reshard --dry-run``) and the run itself (:mod:`.reshard`) route with
the same :class:`Router`, so the dry run counts exactly what the run moves. Reads only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import PoisonMessage, ZSetSchedulerError
from ..model.codec import decode
from ..model.headers import PERIODIC
from ..model.ids import task_id_of
from ..model.keys import KeySpace
from ..model.reshard import Layout, ShardPlan, check_target, routing_key, shard_for
from ..store import meta
from ..store.entries import Page, page_call
from ..store.pending import Store
from ..store.reshard import held_call
from ..store.scripts import Call
from ..store.shared import Shared
from ..store.values import payload as stored_payload

#: Most shards a store may have (the setting's bound).
MOST_SHARDS = 16384
class ReshardError(ZSetSchedulerError):
    """A reshard that cannot be made (bad target, another move under way, the lease held)."""


@dataclass
class ShardMoves:
    """What one shard sent elsewhere (or, in a dry run, would send)."""

    shard: int
    entries: ShardPlan
    periodic: ShardPlan
    revokes: ShardPlan
    inflight: int = 0


@dataclass
class Report:
    """What a reshard did (or, with ``dry_run``, would do)."""

    shards_from: int
    shards_to: int
    dry_run: bool
    resumed: bool = False
    passes: int = 0
    moved: dict[str, int] = field(default_factory=lambda: {"entries": 0, "periodic": 0, "revokes": 0})
    shards: list[ShardMoves] = field(default_factory=list)


class Router:
    """Where an entry of a shard goes under the new count (the same for the move and the dry run)."""

    def __init__(self, client: Any, keys: KeySpace, old: int, new: int) -> None:
        self.client, self.keys, self.old, self.new = client, keys, old, new
        self.shared = Shared(client, keys)

    def targets(self, shard: int, members: Sequence[bytes | str]) -> dict[bytes | str, int]:
        """The new shard of each entry pending in ``shard``, by member as stored (model/ids.py)."""
        if not members:
            return {}
        sk = self.keys.shard(shard)
        ikeys = self.client.hmget(sk.id_keys, list(members))
        routing: dict[bytes | str, str] = {}
        foreign: list[bytes | str] = []
        for stored, ikey in zip(members, ikeys, strict=True):
            task_id = task_id_of(stored)
            if ikey:
                routing[stored] = ikey.decode()
            elif shard_for(task_id, self.old) == shard or shard_for(task_id, self.new) == shard:
                routing[stored] = task_id
            else:
                foreign.append(stored)  # placed by something else: a periodic entry's occurrence
        if foreign:
            for stored, value in zip(foreign, self.client.hmget(sk.msg, foreign), strict=True):
                whole = None if value is None else self.shared.inline(shard, bytes(value))
                task_id = task_id_of(stored)
                routing[stored] = routing_key(task_id, None, periodic_name(task_id, whole))
        return {stored: shard_for(routing[stored], self.new) for stored in members}


def periodic_name(task_id: str, value: bytes | None) -> str | None:
    raw = stored_payload(value)
    if not raw:
        return None
    try:
        name = decode(task_id, raw).headers.get(PERIODIC)
    except PoisonMessage:
        return None
    return name if isinstance(name, str) and name else None


def read_layout(store: Store) -> Layout:
    recorded = meta.read(store.client, store.keys)
    if recorded.layout is None:
        raise ReshardError(f"the store at prefix {store.keys.prefix!r} is not created yet: "
                           "set zset_scheduler_shards instead")
    return recorded.layout


def check_move(layout: Layout, to: int) -> None:
    if layout.moving_to is not None and layout.moving_to != to:
        raise ReshardError(
            f"a reshard from {layout.shards} to {layout.moving_to} shards is under way: "
            f"finish it first with `celery zset reshard --to {layout.moving_to}`"
        )
    if layout.moving_to is None:
        why = check_target(layout.shards, to, MOST_SHARDS)
        if why:
            raise ReshardError(why)


def plan(store: Store, to: int, *, batch: int = 500) -> Report:
    """What ``reshard(store, to)`` would move, shard by shard; reads only."""
    layout = read_layout(store)
    check_move(layout, to)
    span = max(layout.span, to)
    keys = KeySpace(store.keys.prefix, to, span)
    router = Router(store.client, keys, layout.shards, to)
    report = Report(layout.shards, to, dry_run=True, resumed=layout.moving)
    for shard in range(span):
        moves = ShardMoves(shard, ShardPlan(shard), ShardPlan(shard), ShardPlan(shard))
        after: tuple[int, str] | None = None
        while True:
            page = store.scripts.run(ids_page(keys, shard, after, batch))
            targets = router.targets(shard, [e.member for e in page.entries])
            for target in targets.values():
                moves.entries.count(target)
            if page.cursor is None:
                break
            after = page.cursor
        for held in store.scripts.run(held_call(keys, shard, 1_000_000)):
            moves.entries.count(shard_for(routing_key(held.task_id, held.idempotency_key, None), to))
        for name in periodic_names(store.client, keys, shard):
            moves.periodic.count(shard_for(name, to))
        for stored, _ in revoke_records(store.client, keys, shard):
            moves.revokes.count(shard_for(task_id_of(stored), to))
        moves.inflight = int(store.client.zcard(keys.shard(shard).inflight))
        report.shards.append(moves)
    return report


def ids_page(keys: KeySpace, shard: int, after: tuple[int, str] | None, batch: int) -> Call[Page]:
    """A page of a shard's pending ids (no messages), after the cursor ``after``."""
    return page_call(keys, shard, after=after, min_due=None, max_due=None, limit=batch, with_payloads=False)


def periodic_names(client: Any, keys: KeySpace, shard: int, batch: int = 1000) -> list[str]:
    found: list[str] = []
    start = "-"
    while True:
        names = [n.decode() for n in client.zrangebylex(keys.shard(shard).periodic_names, start, "+", 0, batch)]
        found += names
        if len(names) < batch:
            return found
        start = "(" + names[-1]


def revoke_records(client: Any, keys: KeySpace, shard: int) -> list[tuple[bytes, int]]:
    """The shard's revoke records: (member as stored, expiry ms); a move carries the member."""
    rows = client.zrange(keys.shard(shard).revoked, 0, -1, withscores=True)
    return [(bytes(i), int(s)) for i, s in rows]

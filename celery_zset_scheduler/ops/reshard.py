"""Changing the shard count of a live store (``celery zset reshard --to N``, the Django admin).

The procedure (``docs/design.md``, *Resharding*):

1. take the reshard lease (one run at a time; a killed run's lease lapses after ``lock_ttl``);
2. record the move in the meta hash (``moving_to``), then write the new count into every shard's
   ``layout`` key: from then on the schedule script refuses writes routed with the old count, and
   the refused client reads the layout and routes with the new one, so nothing is written behind
   the move; running dispatchers read the layout at every heartbeat and deal the shards of both
   layouts between them;
3. move, shard by shard, every entry, periodic entry and revoke record whose routing key hashes
   elsewhere under the new count, with the three single-shard steps of :mod:`..store.reshard`;
   repeat passes until one moves nothing and the shards beyond the new count are empty (an entry
   in flight there is acked or reaped back, then moved);
4. record the new count in the meta hash, clear the move's marks, release the lease.

Each step is idempotent, so running the command again after a crash (even ``kill -9``) resumes:
entries a killed run had taken are put and dropped first, then the passes go on.
"""

from __future__ import annotations

import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import PoisonMessage, ZSetSchedulerError
from ..model.codec import decode
from ..model.headers import PERIODIC
from ..model.ids import task_id_of
from ..model.keys import KeySpace
from ..model.reshard import Layout, ShardPlan, check_target, routing_key, shard_for
from ..store import meta
from ..store.leases import UNLOCK
from ..store.pending import Page, Store, page_call
from ..store.reshard import (
    Held,
    drop_call,
    held_call,
    lock_call,
    periodic_put_call,
    periodic_take_call,
    put_call,
    revokes_put_call,
    take_call,
)
from ..store.scripts import Call
from ..store.shared import Shared
from ..store.values import payload as stored_payload

#: Most shards a store may have (the setting's bound).
MOST_SHARDS = 16384
LOCK_TTL = 10.0

Progress = Callable[..., None]


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


def _quiet(event: str, **fields: Any) -> None:
    pass


class _Router:
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
                routing[stored] = routing_key(task_id, None, _periodic_name(task_id, whole))
        return {stored: shard_for(routing[stored], self.new) for stored in members}


def _periodic_name(task_id: str, value: bytes | None) -> str | None:
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


def _target(layout: Layout, to: int) -> None:
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
    _target(layout, to)
    span = max(layout.span, to)
    keys = KeySpace(store.keys.prefix, to, span)
    router = _Router(store.client, keys, layout.shards, to)
    report = Report(layout.shards, to, dry_run=True, resumed=layout.moving)
    for shard in range(span):
        moves = ShardMoves(shard, ShardPlan(shard), ShardPlan(shard), ShardPlan(shard))
        after: tuple[int, str] | None = None
        while True:
            page = store.scripts.run(_page(keys, shard, after, batch))
            targets = router.targets(shard, [e.member for e in page.entries])
            for target in targets.values():
                moves.entries.count(target)
            if page.cursor is None:
                break
            after = page.cursor
        for held in store.scripts.run(held_call(keys, shard, 1_000_000)):
            moves.entries.count(shard_for(routing_key(held.task_id, held.idempotency_key, None), to))
        for name in _names(store.client, keys, shard):
            moves.periodic.count(shard_for(name, to))
        for stored, _ in _revoke_records(store.client, keys, shard):
            moves.revokes.count(shard_for(task_id_of(stored), to))
        moves.inflight = int(store.client.zcard(keys.shard(shard).inflight))
        report.shards.append(moves)
    return report


def _page(keys: KeySpace, shard: int, after: tuple[int, str] | None, batch: int) -> Call[Page]:
    """A page of a shard's pending ids (no messages), after the cursor ``after``."""
    return page_call(keys, shard, after=after, min_due=None, max_due=None, limit=batch, with_payloads=False)


def _names(client: Any, keys: KeySpace, shard: int, batch: int = 1000) -> list[str]:
    found: list[str] = []
    start = "-"
    while True:
        names = [n.decode() for n in client.zrangebylex(keys.shard(shard).periodic_names, start, "+", 0, batch)]
        found += names
        if len(names) < batch:
            return found
        start = "(" + names[-1]


def _revoke_records(client: Any, keys: KeySpace, shard: int) -> list[tuple[bytes, int]]:
    """The shard's revoke records: (member as stored, expiry ms); a move carries the member."""
    rows = client.zrange(keys.shard(shard).revoked, 0, -1, withscores=True)
    return [(bytes(i), int(s)) for i, s in rows]


class _Run:
    """One run of the procedure (holds the lease while it runs)."""

    def __init__(self, store: Store, layout: Layout, to: int, batch: int, progress: Progress,
                 lock_ttl: float) -> None:
        self.store, self.client, self.scripts = store, store.client, store.scripts
        self.old, self.new = layout.shards, to
        self.span = max(layout.shards, to)
        self.keys = KeySpace(store.keys.prefix, to, self.span)
        self.batch = max(1, batch)
        self.progress = progress
        self.lock_ttl_ms = max(1000, int(lock_ttl * 1000))
        self.token = secrets.token_hex(16)
        self.router = _Router(self.client, self.keys, self.old, self.new)
        self.shared = Shared(self.client, self.keys)  # every shard of both layouts
        self._renewed = 0.0

    # -- the lease --------------------------------------------------------------------------------

    def lock(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        told = False
        while not self.scripts.run(lock_call(self.keys, self.token, self.lock_ttl_ms)):
            if time.monotonic() > deadline:
                raise ReshardError("another reshard run holds the lease (a killed run's lease lapses "
                                   f"after {self.lock_ttl_ms / 1000:g} s): try again later")
            if not told:
                self.progress("waiting", reason="another run's lease", seconds=self.lock_ttl_ms / 1000)
                told = True
            time.sleep(0.2)
        self._renewed = time.monotonic()

    def renew(self) -> None:
        if time.monotonic() - self._renewed < self.lock_ttl_ms / 3000:
            return
        if not self.scripts.run(lock_call(self.keys, self.token, self.lock_ttl_ms)):
            raise ReshardError("the reshard lease was lost to another run (this one was paused past it)")
        self._renewed = time.monotonic()

    def unlock(self) -> None:
        self.scripts.run(UNLOCK.call_with([self.keys.reshard_lock], [self.token], bool))

    # -- the move ---------------------------------------------------------------------------------

    def begin(self) -> None:
        layout = self.scripts.run(meta.begin_call(self.keys, self.old, self.new))
        if layout != Layout(self.old, self.new):
            raise ReshardError(f"the store's layout changed meanwhile ({layout}): run the command again")
        for shard in range(self.span):
            self.client.set(self.keys.shard(shard).layout, self.new)
        self.store.refresh_layout()

    def move_shard(self, shard: int, moves: ShardMoves) -> int:
        """Move what ``shard`` holds for other shards; how many things moved."""
        moved = self._resume(shard, moves)
        moved += self._move_periodic(shard, moves)
        moved += self._move_entries(shard, moves)
        moved += self._move_revokes(shard, moves)
        return moved

    def _resume(self, shard: int, moves: ShardMoves) -> int:
        """Finish what a killed run had taken out of ``shard``."""
        moved = 0
        sk = self.keys.shard(shard)
        while True:
            held = self.scripts.run(held_call(self.keys, shard, self.batch))
            if not held:
                break
            targets: dict[bytes | str, int] = {
                h.member: shard_for(routing_key(h.task_id, h.idempotency_key, _periodic_name(
                    h.task_id, None if h.value is None else self.shared.inline(shard, h.value))), self.new)
                for h in held}
            moved += self._put_and_drop(shard, held, targets, moves)
        packed = {n.decode(): p for n, p in self.client.hgetall(sk.moving_periodic).items()}
        if packed:
            moved += self._put_periodic(shard, list(packed.items()), moves)
        return moved

    def _put_and_drop(self, shard: int, held: list[Held], targets: dict[bytes | str, int], moves: ShardMoves) -> int:
        by_target: dict[int, list[Held]] = defaultdict(list)
        orphans: list[str] = []
        for h in held:
            if h.value is None:
                orphans.append(h.task_id)  # in `due` without its message: the dispatcher would drop it
            else:
                by_target[targets[h.member]].append(h)
        # A value may refer to a shared prefix of its old shard: the prefix is written to the new
        # shard first, so the value moves byte for byte.
        prefixes: set[tuple[str, bytes, bytes]] = set()
        for target, entries in by_target.items():
            for h in entries:
                found = None if h.value is None else self.shared.prefix_of(shard, h.value)
                if found is not None:
                    prefixes.add((self.keys.shard(target).shared, *found))
        for key, sid, prefix in prefixes:
            self.client.hsetnx(key, sid, prefix)
        calls = [put_call(self.keys, target, entries) for target, entries in by_target.items()]
        self.scripts.run_many(calls)
        for target, entries in by_target.items():
            for _ in entries:
                moves.entries.count(target)
        self.scripts.run(drop_call(self.keys, shard, [h.member for h in held]))
        if orphans:
            self.progress("orphans", shard=shard, count=len(orphans))
        return len(held)

    def _move_entries(self, shard: int, moves: ShardMoves) -> int:
        moved = 0
        after: tuple[int, str] | None = None
        while True:
            self.renew()
            page = self.scripts.run(_page(self.keys, shard, after, self.batch))
            targets = self.router.targets(shard, [e.member for e in page.entries])
            leaving = [i for i, t in targets.items() if t != shard]
            if leaving:
                held = self.scripts.run(take_call(self.keys, shard, leaving))
                if held:
                    moved += self._put_and_drop(shard, held, targets, moves)
                    self.progress("moved", shard=shard, entries=moves.entries.moving)
            if page.cursor is None:
                return moved
            after = page.cursor

    def _move_periodic(self, shard: int, moves: ShardMoves) -> int:
        leaving = [n for n in _names(self.client, self.keys, shard) if shard_for(n, self.new) != shard]
        moved = 0
        for start in range(0, len(leaving), self.batch):
            self.renew()
            taken = self.scripts.run(periodic_take_call(self.keys, shard, leaving[start:start + self.batch]))
            if taken:
                moved += self._put_periodic(shard, taken, moves)
        return moved

    def _put_periodic(self, shard: int, taken: list[tuple[str, bytes]], moves: ShardMoves) -> int:
        by_target: dict[int, list[tuple[str, bytes]]] = defaultdict(list)
        for name, packed in taken:
            by_target[shard_for(name, self.new)].append((name, packed))
        self.scripts.run_many([periodic_put_call(self.keys, t, items) for t, items in by_target.items()])
        for target, items in by_target.items():
            for _ in items:
                moves.periodic.count(target)
        self.client.hdel(self.keys.shard(shard).moving_periodic, *[n for n, _ in taken])
        return len(taken)

    def _move_revokes(self, shard: int, moves: ShardMoves) -> int:
        leaving = [(i, e) for i, e in _revoke_records(self.client, self.keys, shard)
                   if shard_for(task_id_of(i), self.new) != shard]
        if not leaving:
            return 0
        by_target: dict[int, list[tuple[bytes | str, int]]] = defaultdict(list)
        for stored, expiry in leaving:
            by_target[shard_for(task_id_of(stored), self.new)].append((stored, expiry))
        self.scripts.run_many([revokes_put_call(self.keys, t, records) for t, records in by_target.items()])
        for target, records in by_target.items():
            for _ in records:
                moves.revokes.count(target)
        self.client.zrem(self.keys.shard(shard).revoked, *[i for i, _ in leaving])
        return len(leaving)

    def leftovers(self) -> dict[int, int]:
        """Shards that still hold something they must not keep: in flight beyond the new count
        (acked or reaped back soon), or a moving area not yet emptied."""
        left: dict[int, int] = {}
        for shard in range(self.span):
            sk = self.keys.shard(shard)
            pipe = self.client.pipeline(transaction=False)
            pipe.zcard(sk.moving)
            pipe.hlen(sk.moving_periodic)
            if shard >= self.new:
                pipe.zcard(sk.due)
                pipe.zcard(sk.inflight)
                pipe.zcard(sk.periodic_names)
                pipe.zcard(sk.revoked)
            count = sum(int(n) for n in pipe.execute())
            if count:
                left[shard] = count
        return left

    def finish(self) -> None:
        layout = self.scripts.run(meta.finish_call(self.keys, self.old, self.new))
        if layout != Layout(self.new):
            raise ReshardError(f"the store's layout changed meanwhile ({layout}): run the command again")
        for shard in range(self.span):
            sk = self.keys.shard(shard)
            self.client.delete(sk.moved_in)
            if shard >= self.new:
                # A retired shard holds no entry any more (checked before finishing, and writes
                # routed to it are refused by its layout), and no leader collects its prefixes.
                self.client.delete(sk.shared, sk.shared_old, sk.shared_grave, sk.shared_gc)
        self.store.refresh_layout()


def reshard(store: Store, to: int, *, batch: int = 500, progress: Progress | None = None,
            lock_ttl: float = LOCK_TTL, wait: float | None = None, settle: float = 0.2) -> Report:
    """Change the store's shard count to ``to`` while producers and dispatchers run; resumes a
    move to ``to`` that a killed run left under way. ``progress(event, **fields)`` hears of each step."""
    say = progress or _quiet
    layout = read_layout(store)
    _target(layout, to)
    run = _Run(store, Layout(layout.shards), to, batch, say, lock_ttl)
    run.lock(lock_ttl * 1.5 if wait is None else wait)
    try:
        report = Report(run.old, to, dry_run=False, resumed=layout.moving)
        say("begun", shards_from=run.old, shards_to=to, resumed=layout.moving)
        run.begin()
        moves = {s: ShardMoves(s, ShardPlan(s), ShardPlan(s), ShardPlan(s)) for s in range(run.span)}
        while True:
            report.passes += 1
            moved = 0
            for shard in range(run.span):
                moved += run.move_shard(shard, moves[shard])
            left = run.leftovers()
            say("pass", number=report.passes, moved=moved, waiting=sum(left.values()))
            if not moved and not left:
                break
            if not moved:
                time.sleep(settle)  # entries in flight beyond the new count: acked or reaped soon
        run.finish()
        report.shards = [moves[s] for s in range(run.span)]
        for m in report.shards:
            report.moved["entries"] += m.entries.moving
            report.moved["periodic"] += m.periodic.moving
            report.moved["revokes"] += m.revokes.moving
        say("finished", shards=to, **report.moved)
        return report
    finally:
        run.unlock()


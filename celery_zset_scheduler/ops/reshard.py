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
entries a killed run had taken are put and dropped first, then the passes go on. What a run would
move (the routing under the new count, ``--dry-run``) is :mod:`.reshard_plan`.
"""

from __future__ import annotations

import secrets
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ..model.ids import task_id_of
from ..model.keys import KeySpace
from ..model.reshard import Layout, ShardPlan, routing_key, shard_for
from ..store import meta
from ..store.leases import UNLOCK
from ..store.pending import Store
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
from ..store.shared import Shared
from .reshard_plan import (
    MOST_SHARDS,
    Report,
    ReshardError,
    Router,
    ShardMoves,
    check_move,
    ids_page,
    periodic_name,
    periodic_names,
    plan,
    read_layout,
    revoke_records,
)

LOCK_TTL = 10.0

Progress = Callable[..., None]


def _quiet(event: str, **fields: Any) -> None:
    pass


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
        self.router = Router(self.client, self.keys, self.old, self.new)
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
                h.member: shard_for(routing_key(h.task_id, h.idempotency_key, periodic_name(
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
            page = self.scripts.run(ids_page(self.keys, shard, after, self.batch))
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
        leaving = [n for n in periodic_names(self.client, self.keys, shard) if shard_for(n, self.new) != shard]
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
        leaving = [(i, e) for i, e in revoke_records(self.client, self.keys, shard)
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
    check_move(layout, to)
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


__all__ = ["LOCK_TTL", "MOST_SHARDS", "Report", "ReshardError", "ShardMoves", "plan", "read_layout", "reshard"]

"""The same-Redis fast path: one script per shard moves due entries into the broker's queue lists.

When the broker is the store's own standalone Redis server and database, there is nothing to
publish from Python: the ``fast_push`` script (:mod:`..store.fastpath`) takes each due entry out
of the store and LPUSHes the envelope Kombu would write, in one atomic step fenced by the shard's
token and epoch. No Python round trip per task, and no window in which a crash, a pause or a
lapsed lease could leave an entry in both places or in neither (I2: no duplicate on this path).

Entries the script cannot rebuild exactly (see its header: ``expires``, compression, a fanout or
unknown exchange, a queue the route table does not name...) come back claimed, as from the claim
script, and take the generic path of :class:`~.generic.GenericHandOff` in the same pass: decode,
check, publish, ack. This class is that generic hand-off with the claim step replaced (and, when the broker is a
Redis elsewhere, :mod:`.built`'s claim).

Order: each shard's entries go in due order; entries of different shards taken in one pass go
shard after shard (a pass covers a few milliseconds while the dispatcher keeps up).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..store.claims import Fence
from ..store.fastpath import FastResult, Routes, fast_push_many
from .built import BuiltHandOff, Lane
from .handoff import Env, HandOffFactory, Pass, Publisher, ShardPass
from .items import Check, Claim, Revoked

#: The route table to push with, or None to take the generic path for this pass (the broker is
#: not the store's Redis, or the fast path is turned off). The Celery layer builds it from Kombu.
RouteSource = Callable[[], "Routes | None"]


def fast(publisher: Publisher, routes: RouteSource, check: Check | None = None,
         revoked: Revoked | None = None, lane: Lane | None = None) -> HandOffFactory:
    """The factory a dispatcher calls with its environment; ``lane``: envelopes built by the
    claim (:mod:`.built`) when the broker is a Redis elsewhere, else the plain generic claim."""
    return lambda env: FastHandOff(env, publisher, routes, check, revoked, lane)


class FastHandOff(BuiltHandOff):
    def __init__(self, env: Env, publisher: Publisher, routes: RouteSource, check: Check | None = None,
                 revoked: Revoked | None = None, lane: Lane | None = None) -> None:
        super().__init__(env, publisher, lane, check, revoked)
        self.routes = routes
        self.pushed = 0  # entries the script moved into the queue lists
        self.left = 0  # entries it left to the generic path

    def _claim(self, fences: Sequence[Fence]) -> tuple[Pass, list[Claim], list[tuple[int, int]]]:
        table = self.routes()
        if table is None:
            return super()._claim(fences)
        self._collect_acks()  # those sent between the publish calls of the generic part: read now
        self._drop_ahead()  # sent while the broker was another Redis: the fast path takes over
        config = self.env.config
        sent_at = time.monotonic()
        results, unacked = fast_push_many(
            self.env.claims, fences, table, limit=config.batch_size, lease_ms=int(config.inflight_timeout * 1000),
            max_wait_ms=int(config.max_interval * 1000),
            wake_ttl_ms=int((config.max_interval + config.lock_timeout) * 1000), ack=self._to_ack,
        )
        self._to_ack = list(unacked)
        answered_at = time.monotonic()
        shards: dict[int, ShardPass] = {}
        entries: list[Claim] = []
        cutoffs: list[tuple[int, int]] = []
        pushed: dict[int, int] = {}
        lateness: list[int] = []
        for fence in fences:
            result = results[fence.shard]
            if isinstance(result, Exception):
                shards[fence.shard] = ShardPass(False, 0, None, 0, error=result)
                continue
            claim = result.claim
            shards[fence.shard] = ShardPass(claim.fenced, claim.now_ms, claim.next_due_ms, result.taken)
            if claim.fenced:
                continue
            self.env.clock.observe(claim.now_ms, (sent_at + answered_at) / 2)
            self.env.observer.claimed(fence.shard, result.taken, answered_at - sent_at)
            if claim.orphans:
                self._orphans(fence.shard, claim.orphans)
            if claim.revoked:
                self._revoked(fence.shard, claim.revoked, "claim")
            self.left += len(claim.entries)
            if result.pushed_due_ms:
                pushed[fence.shard] = len(result.pushed_due_ms)
                self.pushed += len(result.pushed_due_ms)
                lateness += [claim.now_ms - d for d in result.pushed_due_ms]
            entries.append((claim.entries, fence))
            cutoffs.append((self._fast_covered(result), fence.shard))
        if pushed:
            self.env.meter.add(pushed)
            self.env.observer.published(pushed, lateness, answered_at - sent_at)
        return Pass(shards, sent_at, answered_at), entries, cutoffs

    def _fast_covered(self, result: FastResult) -> int:
        """As the generic claim's cover, over everything the script took (pushed or claimed)."""
        claim = result.claim
        if result.taken < self.env.config.batch_size or result.first_due_ms is None or result.last_due_ms is None:
            return claim.now_ms
        first, last = result.first_due_ms, result.last_due_ms
        return last if first == last else last - 1

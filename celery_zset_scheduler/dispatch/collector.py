"""The leader's share of collecting unused shared prefixes (:mod:`..store.shared_gc`).

At each heartbeat the loop calls :meth:`Collector.beat` with the shards it leads. While a cycle is
under way: one step per shard (``collect_values`` values scanned, ~0.7 ms of Redis time; one call
each, so no other client waits for more than one step). Between cycles: nothing until the
earliest shard may begin its next one. A step is safe from any process (each is one atomic
script), so a change of leader mid-cycle only hands the next step to the new one. A failed step
(an outage, a full store) is tried at the next heartbeat; it never holds up the heartbeat's
leases or the claims.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

import redis

from ..model.logs import describe, log_event
from ..store.pending import Store
from ..store.permissions import report_refused
from ..store.shared_gc import Step, steps
from .config import DispatcherConfig


class Collector:
    def __init__(self, store: Store, config: DispatcherConfig) -> None:
        self.store = store
        interval = config.collect_interval
        self.period_ms = max(1, round(interval * 1000)) if interval > 0 else 0
        self.values = config.collect_values
        self._next = 0.0  # monotonic time of the next step worth taking
        self._owned: frozenset[int] = frozenset()
        self.deleted = 0  # prefixes this process's steps deleted (for people and tests)

    def beat(self, owned: Collection[int]) -> None:
        if self.period_ms <= 0 or not owned:
            return
        now = time.monotonic()
        shards = frozenset(owned)
        if now < self._next and shards <= self._owned:  # a shard just taken over may be mid-cycle
            return
        self._owned = shards
        try:
            results = steps(self.store.scripts, self.store.keys, sorted(shards), self.period_ms, self.values)
        except redis.RedisError as exc:
            log_event(logging.DEBUG, "collect.failed", error=describe(exc))
            return
        waits = []
        for result in results:
            if not isinstance(result, Step):
                log_event(logging.DEBUG, "collect.failed", error=describe(result))
                continue
            if result.phase == "refused":
                report_refused("the INFO command (collecting the shared prefixes)", "+info", None,
                               "leaves the shared prefixes uncollected (they only take memory)")
                waits.append(self.period_ms / 1000.0)
            elif result.phase == "wait":
                waits.append(result.first / 1000.0)
            elif result.phase == "ended":
                self.deleted += result.first
                if result.first:
                    log_event(logging.INFO, "collect.ended", shard=result.shard, deleted=result.first,
                              unused=result.second)
        # Every shard between cycles: nothing to do until the first may begin again.
        self._next = now + min(waits) if len(waits) == len(results) else 0.0

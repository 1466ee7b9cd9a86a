"""The generic path with envelopes built by the store: for a Redis broker elsewhere.

When the broker is Kombu's Redis transport on another server or database than the store, the
claim (``claim_built``, :mod:`..store.built`) is the claim script's, plus Kombu's envelope of each
entry the fast path's Lua builder can rebuild exactly. Those entries are not decoded, checked
(the builder refuses what a worker would discard) or templated here: their bytes are LPUSHed in
the publisher's transaction, after the same lease and revoke checks (I10), and acked with the next
claim, as every generic entry. The claim, publish and ack order is the generic path's, so are its
guarantees (I1, the duplicate bound). What the builder leaves comes back as stored and takes the
Python path of :class:`~.generic.GenericHandOff` in the same pass and transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..errors import ZSetSchedulerError
from ..store.built import BuiltTable, claim_built_many
from ..store.claims import Claimed, ClaimPass, Fence
from .generic import Check, GenericHandOff, Item, Revoked
from .handoff import Built, BuiltPublisher, Env, Outgoing, Publisher

#: The table to build envelopes for, or None for the plain generic claim this pass (the broker is
#: not Kombu's Redis transport, or could not be reached). The Celery layer builds it from Kombu.
TableSource = Callable[[], "BuiltTable | None"]


#: The publisher of built envelopes and the source of tables; the fast path's hand-off takes one
#: (:func:`.fastpath.fast`), as its fallback when the broker is not the store's database.
Lane = tuple[BuiltPublisher, TableSource]


class BuiltHandOff(GenericHandOff):
    def __init__(self, env: Env, publisher: Publisher, lane: Lane | None,
                 check: Check | None = None, revoked: Revoked | None = None) -> None:
        super().__init__(env, publisher, check, revoked)
        self.lane = lane
        self._table: BuiltTable | None = None  # the table of this pass's claim
        self.prebuilt = 0  # entries claimed with their envelope built

    def _claim_round(self, fences: Sequence[Fence]) -> ClaimPass:
        self._table = self.lane[1]() if self.lane is not None else None
        if self._table is None:
            return super()._claim_round(fences)
        config = self.env.config
        return claim_built_many(
            self.env.claims, fences, self._table, limit=config.batch_size,
            lease_ms=int(config.inflight_timeout * 1000), max_wait_ms=int(config.max_interval * 1000),
            wake_ttl_ms=int((config.max_interval + config.lock_timeout) * 1000), ack=self._to_ack,
        )

    def _decode(self, entries: list[tuple[Claimed, Fence]], claimed_at: float) -> list[Item]:
        """The built entries as they are (not decoded: their envelope is ready), the rest decoded."""
        table = self._table
        if table is None:
            return super()._decode(entries, claimed_at)
        lists = table.lists
        items: list[Item] = []
        stored: list[tuple[Claimed, Fence]] = []
        for entry, fence in entries:
            number = entry.built_for
            if not number:
                stored.append((entry, fence))
            elif 0 < number <= len(lists):
                built = Built(entry.task_id, entry.shard, entry.payload, lists[number - 1])
                items.append(Item(entry, None, fence, claimed_at, built))
            else:
                raise ZSetSchedulerError(f"claim_built named list {number}, not in the table it was given")
        self.prebuilt += len(items)
        return items + super()._decode(stored, claimed_at) if stored else items

    def _hand_over(self, ready: list[Item]) -> BaseException | None:
        if self.lane is None or all(i.built is None for i in ready):
            return super()._hand_over(ready)
        publisher = self.lane[0]
        started = time.monotonic()
        report = publisher.publish_built(handed(ready), self._guard(ready))
        if report is None:  # messages that cannot share the write (a fanout): the envelopes first
            envelopes = [i for i in ready if i.built is not None]
            rest = [i for i in ready if i.built is None]
            report = publisher.publish_built(handed(envelopes), self._guard(envelopes))
            if report is None:
                self._release([i.entry for i in ready])
                return ZSetSchedulerError("the broker took no envelopes built by the store")
            self._settle_report(envelopes, report, started)
            if report.error is not None:
                self._release([i.entry for i in rest])
                return report.error
            return super()._hand_over(rest)
        self._settle_report(ready, report, started)
        return report.error


def handed(items: Sequence[Item]) -> list[Outgoing | Built]:
    """What the publisher gets for each item: its built envelope, else its message."""
    batch: list[Outgoing | Built] = []
    for i in items:
        if i.built is not None:
            batch.append(i.built)
        elif i.message is not None:
            batch.append(Outgoing(i.message, i.entry.shard))
    return batch

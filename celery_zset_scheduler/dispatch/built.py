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
from functools import partial
from itertools import repeat
from operator import attrgetter
from typing import cast

from ..errors import ZSetSchedulerError
from ..store.built import BuiltTable, claim_built_many
from ..store.claims import ClaimPass, Fence
from .generic import Check, Claim, GenericHandOff, Item, Revoked
from .handoff import Built, BuiltPublisher, Env, Outgoing, Publisher

#: The table to build envelopes for, or None for the plain generic claim this pass (the broker is
#: not Kombu's Redis transport, or could not be reached). The Celery layer builds it from Kombu.
TableSource = Callable[[], "BuiltTable | None"]

#: Fields of every built entry read in C, and its Built and Item made in C (their generated
#: ``__new__`` is a Python call: one an entry, at up to a batch of entries a claim).
_BUILT_FOR, _TASK_ID, _PAYLOAD = attrgetter("built_for"), attrgetter("task_id"), attrgetter("payload")
_BUILT = attrgetter("built")
_new_built = partial(tuple.__new__, Built)
_new_item = partial(tuple.__new__, Item)

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

    def _decode(self, claims: list[Claim], claimed_at: float) -> list[Item]:
        """The built entries as they are (not decoded: their envelope is ready), the rest decoded.
        Each built entry's Built and Item are made in C, a claim at a time (no Python call an entry)."""
        table = self._table
        if table is None:
            return super()._decode(claims, claimed_at)
        lists = table.lists
        items: list[Item] = []
        stored: list[Claim] = []
        for entries, fence in claims:
            numbers = list(map(_BUILT_FOR, entries))
            if 0 in numbers:
                stored.append(([e for e in entries if not e.built_for], fence))
                entries = [e for e in entries if e.built_for]
                numbers = [n for n in numbers if n]
            if not entries:
                continue
            if min(numbers) < 1 or max(numbers) > len(lists):
                wrong = next(n for n in numbers if not 0 < n <= len(lists))
                raise ZSetSchedulerError(f"claim_built named list {wrong}, not in the table it was given")
            built = map(_new_built, zip(map(_TASK_ID, entries), repeat(fence.shard), map(_PAYLOAD, entries),
                                        [lists[n - 1] for n in numbers]))
            items += map(_new_item, zip(entries, repeat(None), repeat(fence), repeat(claimed_at), built))
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
    batch: list[Built | None] = list(map(_BUILT, items))
    if None not in batch:  # all built (read in C)
        return cast("list[Outgoing | Built]", batch)
    mixed: list[Outgoing | Built] = []
    for i in items:
        if i.built is not None:
            mixed.append(i.built)
        elif i.message is not None:
            mixed.append(Outgoing(i.message, i.entry.shard))
    return mixed

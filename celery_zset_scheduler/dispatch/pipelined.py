"""The generic hand-off with the broker's confirms of one batch overlapping the next claim.

With a publisher that waits for the broker's confirms (RabbitMQ), a pass of the generic hand-off
is claim, decode, write, wait: the broker is idle while the dispatcher claims and decodes, and the
dispatcher while the broker stores and confirms. Here a pass writes its batch and returns; the
next pass claims and decodes its own batch first, then collects the confirms of the one before
(most of them have arrived meanwhile), settles its report, and only then writes the new batch:

1. claim batch N+1, decode, check;
2. finish batch N: wait for its last confirms, settle its report (unconfirmed, nacked and unsent
   entries back to ``due``; returned ones dead-lettered), and send the acks of the confirmed ones;
3. if the broker failed, batch N+1 goes back to ``due`` unwritten and the pass reports the outage;
   else batch N+1 is checked (its claims still fresh, the leases ours) and written, in calls of at
   most a batch: each confirmed and acked before the next is written, the last left in flight.

So at any moment at most one call (one batch) is written and not acknowledged in the store: a
dispatcher paused past its lease has at most that batch published again by its successor.

The rules of the generic hand-off hold unchanged: an entry is acked in the store only once the
broker confirmed it, each shard's lease and the revoke records are checked right before each write,
and each entry goes out at most once per claim. What changes is when: the last call's entries stay
in flight until the pass after the one that wrote them, or until ``settle`` (before the dispatcher
sleeps, on shutdown, and at a heartbeat unless the pass that wrote it claimed a full batch: the
next pass then follows at once), which finishes the batch in flight first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from ..store.claims import Fence
from .budget import in_budget
from .generic import GenericHandOff
from .handoff import Env, HandOffFactory, InFlight, Pass, PipelinedPublisher
from .items import Check, Item, Revoked, item_bytes, outgoing


def pipelined(publisher: PipelinedPublisher, check: Check | None = None,
              revoked: Revoked | None = None) -> HandOffFactory:
    """The factory a dispatcher calls with its environment."""
    return lambda env: PipelinedHandOff(env, publisher, check, revoked)


class PipelinedHandOff(GenericHandOff):
    def __init__(self, env: Env, publisher: PipelinedPublisher, check: Check | None = None,
                 revoked: Revoked | None = None) -> None:
        super().__init__(env, publisher, check, revoked)
        self.pipelined = publisher
        self._in_flight: tuple[list[Item], InFlight, float] | None = None  # items, batch, started
        self._busy = False  # the last pass claimed a full batch: the loop passes again at once

    def dispatch(self, fences: Sequence[Fence], waiting: Mapping[int, int] | None = None) -> Pass:
        self._retry = set()
        passed, ready = self._prepare(fences, waiting)
        size = self.env.config.batch_size
        self._busy = self.holding or any(p.claimed >= size for p in passed.shards.values() if p.error is None)
        try:
            error = self._finish()
        except Exception:  # the store failed settling it: this batch waits, claimed, for the next pass
            self._held = ready + self._held
            raise
        if error is not None:  # an outage: nothing more is written into it
            if ready:
                self._release([i.entry for i in ready])
        else:
            error = self._write(self._keep_fresh(ready))
        return Pass(passed.shards, passed.sent_at, passed.answered_at, error, frozenset(self._retry))

    def _write(self, ready: list[Item]) -> BaseException | None:
        """``ready`` in calls of at most a batch (bigger-than-budget entries after the rest:
        :mod:`.budget`), each confirmed and its acks sent before the next is written; the last
        one left in flight, its confirms collected with the next pass."""
        config = self.env.config
        calls = in_budget(ready, config.batch_bytes, item_bytes, config.batch_size)
        for n, call in enumerate(calls):
            error = self._ack_now()  # the batch before (the last pass's, or this pass's call before)
            if error is not None:  # the store is down: this call and the rest go back unwritten
                self._release([i.entry for later in calls[n:] for i in later])
                return error
            started = time.monotonic()
            batch = self.pipelined.begin(outgoing(call), self._guard(call))
            self._in_flight = (call, batch, started)
            if n + 1 < len(calls) or batch.settled():  # more to write, or it failed while writing
                error = self._finish()  # its unsent part goes back with its report
                if error is not None:
                    self._release([i.entry for later in calls[n + 1:] for i in later])
                    return error
        return None

    def settle(self, *, acks: bool = True, releasing: bool = False) -> None:
        if acks:  # before sleeping, at a heartbeat, on shutdown: the batch in flight first
            if self._busy and not self.env.stopping():
                # A heartbeat between two full passes: the next pass follows at once and finishes
                # the batch (the broker goes on confirming it meanwhile); or the next settle does.
                self._busy = False
            else:
                self._finish()
        super().settle(acks=acks, releasing=releasing)

    def _finish(self) -> BaseException | None:
        """Settle the batch in flight, if any; the outage that stopped it, if any."""
        if self._in_flight is None:
            return None
        items, batch, started = self._in_flight
        self._in_flight = None
        report = batch.finish()
        self._settle_report(items, report, started)
        return report.error

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

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import attrgetter
from typing import TypeVar, cast

import redis

from ..errors import ZSetSchedulerError
from ..model.logs import describe, log_event
from ..store.built import BuiltTable, ReceiveClaim, claim_built_ahead, claim_built_many
from ..store.claims import Claimed, ClaimPass, ClaimResult, Fence
from ..store.revokes import revoke_counts
from .generic import GenericHandOff
from .handoff import Built, BuiltPublisher, Env, Outgoing, Pass, Publisher, ShardPass
from .items import Check, Claim, Item, Revoked

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

_T = TypeVar("_T")


class BuiltHandOff(GenericHandOff):
    def __init__(self, env: Env, publisher: Publisher, lane: Lane | None,
                 check: Check | None = None, revoked: Revoked | None = None) -> None:
        super().__init__(env, publisher, check, revoked)
        self.lane = lane
        self._table: BuiltTable | None = None  # the table of this pass's claim
        self._ahead: _Ahead | None = None  # the next claim, sent while this pass publishes
        self.prebuilt = 0  # entries claimed with their envelope built
        self.claimed_ahead = 0  # claims sent ahead
        self._busy = False  # the last claim took a full batch on some shard

    def dispatch(self, fences: Sequence[Fence], waiting: Mapping[int, int] | None = None) -> Pass:
        try:
            return super().dispatch(fences, waiting)
        except BaseException:
            # The pass failed: what was claimed after its batch goes back first (a release that
            # fails stays owed, sent with the next settle; the pass's own error is the one raised).
            with contextlib.suppress(Exception):
                self._drop_ahead()
            raise

    def settle(self, *, acks: bool = True, releasing: bool = False) -> None:
        # Kept at a heartbeat between two full passes (the next pass reads it at once); else, as
        # held entries, it goes back: before shards are handed to another dispatcher (which must
        # not publish what is due after it first), a sleep, or shutdown. Held entries going back
        # take it with them (``_release``).
        if acks and (releasing or not self._busy or self.env.stopping()):
            self._drop_ahead()
        super().settle(acks=acks, releasing=releasing)

    def _claim(self, fences: Sequence[Fence]) -> tuple[Pass, list[Claim], list[tuple[int, int]]]:
        self._collect_acks()
        ahead, self._ahead = self._ahead, None
        found = super()._claim(fences) if ahead is None else self._claimed_ahead(ahead, fences)
        passed = found[0]
        size = self.env.config.batch_size
        usable = {s for s, p in passed.shards.items() if p.error is None and not p.fenced}
        self._busy = any(passed.shards[s].claimed >= size for s in usable)
        if self._busy and self._ahead is None:
            self._send_ahead([f for f in self.env.fences() if f.shard in usable])
        elif self._ahead is not None and not self._busy:  # sent on the last pass's word: read it at once
            self._retry.update(f.shard for f in self._ahead.fences)
        return found

    def _claim_round(self, fences: Sequence[Fence]) -> ClaimPass:
        self._table = self.lane[1]() if self.lane is not None else None
        return self._claim_with(fences, self._table)

    def _claim_with(self, fences: Sequence[Fence], table: BuiltTable | None) -> ClaimPass:
        if table is None:
            return super()._claim_round(fences)
        return claim_built_many(self.env.claims, fences, table, ack=self._to_ack, **self._claim_args())

    def _claim_args(self) -> dict[str, int]:
        config = self.env.config
        return {"limit": config.batch_size, "lease_ms": int(config.inflight_timeout * 1000),
                "max_wait_ms": int(config.max_interval * 1000),
                "wake_ttl_ms": int((config.max_interval + config.lock_timeout) * 1000)}

    # -- the claim sent ahead ---------------------------------------------------------------------

    def _send_ahead(self, fences: list[Fence]) -> None:
        """The next claim of ``fences``, sent now with the acks so far: Redis runs it while this
        pass publishes (after a claim that took a full batch on some shard: more are due)."""
        table = self._table
        if table is None or not fences or self.env.stopping():
            return
        store = self.env.claims.store
        if store.clustered:
            return  # a claim is not sent ahead on a cluster (claim_built_ahead)
        # The counts of the hand-off's revoke check, read now: once the claim is sent, Redis
        # answers nothing else until it has run, and the claims of what this pass holds have all
        # been answered.
        shards = sorted({f.shard for f in fences} | {i.entry.shard for i in self._held})
        try:
            self._counts_read = revoke_counts(store.client, self.env.claims.keys, shards)
        except (redis.RedisError, OSError):
            self._counts_read = None  # the guard reads them itself (and meets the outage there)
        sent_at = time.monotonic()
        receive = claim_built_ahead(self.env.claims, fences, table, ack=self._to_ack, **self._claim_args())
        if receive is None:
            self._counts_read = None  # nothing runs ahead: the guard reads at the hand-off
        else:
            self._ahead = _Ahead(fences, table, self._to_ack, sent_at, receive)
            self._to_ack = []
            self.claimed_ahead += 1

    def _claimed_ahead(self, ahead: _Ahead, fences: Sequence[Fence]) -> tuple[Pass, list[Claim], list[tuple[int, int]]]:
        """This pass's claim from the one sent ahead, and of the shards it did not cover (a shard
        acquired since), claimed once its reply is read and before the next claim goes, which
        they then join (each shard's next entries come after the ones claimed now). When the last
        pass took a full batch, the next claim goes before this one's reply is parsed. Its entries
        count as claimed when it was sent (every lease deadline is later), and the Redis clock
        was read then. A shard whose lease changed since it was sent (lost, taken again) waits for
        the next pass: the old claim's entries go back (``_keep_fresh``) before anything of the new
        lease is claimed, and the loop does not judge the new lease by the old claim's outcome."""
        current = {f.shard: f for f in self.env.fences()}
        parse = self._receive(ahead)
        covered = {f.shard for f in ahead.fences}
        rest = [f for f in fences if f.shard not in covered]
        more: ClaimPass | None = None
        if rest:
            sent_at = time.monotonic()
            more = self._claim_with(rest, ahead.table)  # with the acks so far
            self._to_ack = list(more.unacked)
            answered_at = time.monotonic()
        if self._busy:
            self._table = ahead.table
            self._send_ahead([f for f in [*ahead.fences, *rest] if current.get(f.shard) == f])
        claimed = self._parsed(parse)
        self._table = ahead.table
        passed, claims, cutoffs = self._take(ahead.fences, claimed, ahead.sent_at, time.monotonic(), ahead.sent_at)
        for fence in ahead.fences:
            if current.get(fence.shard) != fence:
                passed.shards[fence.shard] = ShardPass(False, 0, None, 0)
                self._retry.add(fence.shard)
        if more is not None:
            other, more_claims, more_cutoffs = self._take(rest, more, sent_at, answered_at, (sent_at + answered_at) / 2)
            passed.shards.update(other.shards)
            claims += more_claims
            cutoffs += more_cutoffs
        return Pass(passed.shards, ahead.sent_at, ahead.sent_at), claims, cutoffs

    def _receive(self, ahead: _Ahead) -> Callable[[], ClaimPass]:
        """The claim's reply read; the function returned parses it. If either fails, the acks it
        carried go again with the next claim (an ack is idempotent)."""
        def restoring(step: Callable[[], _T]) -> _T:
            try:
                return step()
            except BaseException:
                self._to_ack = ahead.acks + self._to_ack
                raise

        parse = restoring(ahead.receive)
        return lambda: restoring(parse)

    def _parsed(self, parse: Callable[[], ClaimPass]) -> ClaimPass:
        claimed = parse()
        self._to_ack = list(claimed.unacked) + self._to_ack
        return claimed

    def _drop_ahead(self) -> None:
        """Put what the claim sent ahead took back in ``due``, unpublished: entries of a batch
        before it went back (they go first again), the pass failed, or the loop settles (see
        :meth:`settle`). If its reply cannot be read, its entries come back when their in-flight
        lease ends."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        self._counts_read = None  # once its reply is read nothing runs ahead: the guard reads at the hand-off
        try:
            claimed = self._parsed(self._receive(ahead))
        except Exception as exc:
            log_event(logging.WARNING, "claim_ahead.unread", shards=[f.shard for f in ahead.fences],
                      error=describe(exc))
            return
        taken: list[Claimed] = []
        for fence in ahead.fences:
            result = claimed.results[fence.shard]
            if isinstance(result, ClaimResult) and not result.fenced:
                if result.orphans:
                    self._orphans(fence.shard, result.orphans)
                if result.revoked:
                    self._revoked(fence.shard, result.revoked, "claim")
                taken += result.entries
        self._release(taken)

    def _release(self, entries: list[Claimed]) -> None:
        super()._release(entries)
        if entries and self._ahead is not None:  # claimed after these: they must not go out first
            self._drop_ahead()

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


@dataclass(frozen=True)
class _Ahead:
    """A claim sent before the pass that needs it: its shards, table, the acks it carries, when
    it was sent, and the function that reads its reply."""

    fences: list[Fence]
    table: BuiltTable
    acks: list[Claimed]
    sent_at: float
    receive: ReceiveClaim


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

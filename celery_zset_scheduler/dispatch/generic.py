"""The generic hand-off, for any broker: claim -> publish through Kombu -> ack.

Each step returns what the next one needs:

1. **claim**: one round trip for every due shard, carrying the acks of the previous batch; each
   shard's outcome stands alone (an error of one shard is that shard's, the others go on);
2. **decode and check**: an entry that does not decode, or that a worker would discard (a content
   type it does not accept, a body that does not decode, malformed headers), is dead-lettered;
3. **order**: entries of all shards are merged in due order, and those due after the earliest
   claim's Redis time are held for the next pass (a later claim in the same round trip may have
   read a later clock: publishing them now could put them ahead of an entry that claim missed),
   as are those due at or after the earliest pending entry of a shard left out of the pass;
4. **publish** through a :class:`~.handoff.Publisher`, in calls of at most a batch (and the byte
   budget: :mod:`.budget`), each checking each shard's lease and the revoke records of the call at
   the moment of hand-off (:class:`LeaseGuard`; in a backlog on the built lane, with the counts read
   before the next claim was sent ahead, :mod:`.built`);
5. **settle the report**: refused messages dead-lettered, published ones counted and acked,
   lapsed, unconfirmed and unpublished ones released to ``due``, revoked ones dropped. The acks of
   a call are sent to the store before the next call is written (their replies are read with the
   next claim's), and those of a pass's last call go with the next claim: a dispatcher paused at
   any moment has at most one call, one batch, published and not acknowledged.

Entries with a revoke record are dropped by the claim script itself (I10); the ``revoked`` hook
hears of every id dropped either way.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from operator import attrgetter

import redis

from ..model.logs import describe, log_event
from ..store.claims import Claimed, ClaimPass, ClaimResult, Fence, Receive
from .budget import in_budget
from .guard import LeaseGuard
from .handoff import Env, HandOffFactory, Pass, Publisher, PublishReport, ShardPass
from .items import Check, Claim, Item, Revoked, item_bytes, outgoing
from .rejects import Rejects

#: An item's hand-off order (its entry's ``order``), read in C: the sort's key for every entry.
_HAND_OFF_ORDER = attrgetter("entry.due_ms", "entry.arrival")
#: Fields read off every item or entry of a batch in C (``map``): no Python call an entry.
_ENTRY, _FENCE, _CLAIMED_AT = attrgetter("entry"), attrgetter("fence"), attrgetter("claimed_at")
_SHARD, _DUE = attrgetter("shard"), attrgetter("due_ms")
_SHARD_GEN = attrgetter("entry.shard", "entry.revoke_gen")


def generic(publisher: Publisher, check: Check | None = None, revoked: Revoked | None = None) -> HandOffFactory:
    """The factory a dispatcher calls with its environment."""
    return lambda env: GenericHandOff(env, publisher, check, revoked)


class GenericHandOff(Rejects):
    #: The revoke counts the guard compares with (shard -> count read after the pass's claims);
    #: None, or a shard left out: the guard reads its count itself, at the hand-off.
    _counts_read: Mapping[int, int] | None = None

    def __init__(self, env: Env, publisher: Publisher, check: Check | None = None,
                 revoked: Revoked | None = None) -> None:
        self.env = env
        self.publisher = publisher
        self.check = check
        self.on_revoked = revoked
        # Published, not yet acked: acked before the next publish call is written, with the next
        # claim (one round trip less per pass), or before sleeping, whichever comes first; kept
        # across a Redis outage until acked.
        self._to_ack: list[Claimed] = []
        self._acks_sent: list[tuple[Receive, list[Claimed]]] = []  # their replies not read yet
        self._unreleased: list[Claimed] = []
        self._held: list[Item] = []  # claimed, due after a pass's cutoff: published with the next one
        self._retry: set[int] = set()  # shards to claim again at once

    # -- the loop's interface -------------------------------------------------------------------

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def dispatch(self, fences: Sequence[Fence], waiting: Mapping[int, int] | None = None) -> Pass:
        self._retry = set()
        self._counts_read = None  # a read is this pass's own (its claims came before it)
        passed, ready = self._prepare(fences, waiting)
        error = self._hand_over_in_budget(self._keep_fresh(ready))
        return Pass(passed.shards, passed.sent_at, passed.answered_at, error, frozenset(self._retry))

    def _prepare(self, fences: Sequence[Fence], waiting: Mapping[int, int] | None) -> tuple[Pass, list[Item]]:
        """Claim, decode and check, and order: the pass, and what it may publish now."""
        passed, claimed, cutoffs = self._claim(fences)
        # A shard left out of the pass (not due yet by the loop's estimate) may be due by the clock
        # these claims read (a slow round trip): what is due at or after its earliest entry waits.
        cutoffs += [(due_ms - 1, shard) for shard, due_ms in (waiting or {}).items()]
        items = self._held + self._check(self._decode(claimed, passed.answered_at))
        items.sort(key=_HAND_OFF_ORDER)  # due order; ties in the order they reached the store
        cutoff = min(cutoffs)[0] if cutoffs else 2 ** 62
        ready = [i for i in items if i.entry.due_ms <= cutoff]
        self._held = [i for i in items if i.entry.due_ms > cutoff]
        if self._held:  # claim the shards that set the cutoff again at once: they free what is held
            self._retry.update(shard for covered, shard in cutoffs if covered == cutoff)
        return passed, ready

    def _guard(self, ready: list[Item]) -> LeaseGuard:
        gens: dict[int, int] = {}
        for shard, gen in set(map(_SHARD_GEN, ready)):  # a few pairs: the claims in the batch
            gens[shard] = min(gen, gens.get(shard, gen))
        fences = dict(zip(map(_SHARD, map(_ENTRY, ready)), map(_FENCE, ready), strict=True))
        # The counts read before the next claim was sent ahead serve every call of the pass: a
        # read now would wait in Redis behind that claim (a revoke since is held by the worker).
        return LeaseGuard(self.env, fences, gens, self._counts_read)

    def _hand_over_in_budget(self, ready: list[Item]) -> BaseException | None:
        """``ready`` in publish calls of at most a batch within the byte budget (:mod:`.budget`),
        the acks of each sent before the next is written; after an outage the calls not made go
        back to ``due``."""
        config = self.env.config
        calls = in_budget(ready, config.batch_bytes, item_bytes, config.batch_size)
        for n, call in enumerate(calls):
            if n:
                self.env.keep_alive()
                error = self._ack_now()
                if error is not None:  # this call and the rest go back unpublished
                    self._release([i.entry for later in calls[n:] for i in later])
                    return error
            error = self._hand_over(call)
            if error is not None:  # the call's unpublished part went back with its report
                self._release([i.entry for later in calls[n + 1:] for i in later])
                return error
        return None

    def _ack_now(self) -> BaseException | None:
        """Send the acks of what is published so far, before the next publish call is written (so
        at most one call is ever published and not acked); their replies are read with the next
        claim's. Where calls cannot be sent ahead (a cluster) they run now. The error that stops
        the pass, if any (the acks then stay owed, and go with the next claim)."""
        acks, self._to_ack = self._to_ack, []
        if not acks:
            return None
        claims = self.env.claims
        try:
            receive = claims.begin_after_acks(acks, [])
            if receive is not None:
                self._acks_sent.append((receive, acks))
            elif claims.store.clustered:
                self._to_ack = claims.ack_each(acks)
            else:
                claims.ack(acks)
        except (redis.RedisError, OSError) as exc:
            self._to_ack = acks + self._to_ack
            return exc
        return None

    def _collect_acks(self) -> None:
        """Read the replies of the acks sent ahead; those that failed go with the next claim."""
        sent, self._acks_sent = self._acks_sent, []
        for receive, acks in sent:
            try:
                _, failed = receive()()
            except (redis.RedisError, OSError):
                failed = acks  # sent again (an ack is idempotent); the claim meets the outage
            self._to_ack = failed + self._to_ack

    def _hand_over(self, ready: list[Item]) -> BaseException | None:
        """Publish ``ready`` and settle the report; the outage that stopped it, if any."""
        if not ready:
            return None
        started = time.monotonic()
        report = self.publisher.publish(outgoing(ready), self._guard(ready))
        self._settle_report(ready, report, started)
        return report.error

    def settle(self, *, acks: bool = True, releasing: bool = False) -> None:
        self._collect_acks()
        if acks and self._held:  # not published yet: back to due, to be claimed again in due order
            held, self._held = self._held, []
            self._release([i.entry for i in held])
        clustered = self.env.claims.store.clustered
        if acks and self._to_ack:
            if clustered:
                # A shard whose master is down keeps its acks for later (they may all be on that
                # master); the rest go. Every master down shows in the heartbeat's renewals.
                self._to_ack = self.env.claims.ack_each(self._to_ack)
            else:
                self.env.claims.ack(self._to_ack)
                self._to_ack = []
        if self._unreleased:
            if clustered:
                self._unreleased = self.env.claims.release_each(self._unreleased)
            else:
                self.env.claims.release(self._unreleased)
                self._unreleased = []

    # -- the steps ------------------------------------------------------------------------------

    def _claim(self, fences: Sequence[Fence]) -> tuple[Pass, list[Claim], list[tuple[int, int]]]:
        """One round trip: the held-back acks, then a claim on every shard. Returns the pass, the
        claimed entries and, per shard claimed, ``(covered, shard)``: the latest due time that
        claim took everything up to (the pass may publish up to the smallest of them)."""
        self._collect_acks()
        sent_at = time.monotonic()
        claimed = self._claim_round(fences)
        self._to_ack = list(claimed.unacked)  # acks that failed go again with the next claim
        answered_at = time.monotonic()
        return self._take(fences, claimed, sent_at, answered_at, (sent_at + answered_at) / 2)

    def _take(self, fences: Sequence[Fence], claimed: ClaimPass, sent_at: float, answered_at: float,
              read_at: float) -> tuple[Pass, list[Claim], list[tuple[int, int]]]:
        """What ``_claim`` returns, of a claim sent at ``sent_at`` and answered at ``answered_at``;
        ``read_at``: when the scripts read the Redis clock, by the dispatcher's."""
        shards: dict[int, ShardPass] = {}
        entries: list[Claim] = []
        cutoffs: list[tuple[int, int]] = []
        for fence in fences:
            result = claimed.results[fence.shard]
            if isinstance(result, Exception):
                shards[fence.shard] = ShardPass(False, 0, None, 0, error=result)
                continue
            shards[fence.shard] = ShardPass(result.fenced, result.now_ms, result.next_due_ms, len(result.entries))
            if result.fenced:
                continue
            self.env.clock.observe(result.now_ms, read_at)
            self.env.observer.claimed(fence.shard, len(result.entries), answered_at - sent_at)
            if result.orphans:
                self._orphans(fence.shard, result.orphans)
            if result.revoked:
                self._revoked(fence.shard, result.revoked, "claim")
            entries.append((result.entries, fence))
            cutoffs.append((self._covered(result), fence.shard))
        return Pass(shards, sent_at, answered_at), entries, cutoffs

    def _claim_round(self, fences: Sequence[Fence]) -> ClaimPass:
        """The acks held back and a claim on every shard, in one round trip."""
        config = self.env.config
        return self.env.claims.claim_many(
            fences, config.batch_size, int(config.inflight_timeout * 1000),
            max_wait_ms=int(config.max_interval * 1000),
            wake_ttl_ms=int((config.max_interval + config.lock_timeout) * 1000),
            ack=self._to_ack,
        )

    def _covered(self, result: ClaimResult) -> int:
        """The latest due time this claim took everything up to: its Redis time, or, for a full
        batch, just before the last due time it reached (more entries of that time may remain)."""
        if len(result.entries) < self.env.config.batch_size or not result.entries:
            return result.now_ms
        first, last = result.entries[0].due_ms, result.entries[-1].due_ms
        return last if first == last else last - 1  # a batch of one instant: nothing to wait for

    def _keep_fresh(self, items: list[Item]) -> list[Item]:
        """Hand back, before publishing anything, the entries whose claim is no longer safely
        ours: the shard's lease lapsed or changed since, or the claim is close to its in-flight
        lease (the publisher checks the shard's lease again at the moment of hand-off)."""
        now = time.monotonic()
        limit = self.env.config.inflight_timeout * 0.8
        current = {f.shard: f for f in self.env.fences()}
        # Judged once a claim (its reply's time and fence, read in C), not once an item.
        fences = list(map(_FENCE, items))
        claims = dict(zip(zip(map(_CLAIMED_AT, items), map(id, fences), strict=True), fences, strict=True))
        valid = {s: self.env.lease_valid(s, now) for s in {f.shard for f in claims.values()}}
        stale = {(at, key) for (at, key), f in claims.items()
                 if not (now - at <= limit and current.get(f.shard) == f and valid[f.shard])}
        if not stale:
            return items
        kept = [i for i in items if (i.claimed_at, id(i.fence)) not in stale]
        abandoned = [i.entry for i in items if (i.claimed_at, id(i.fence)) in stale]
        log_event(logging.WARNING, "batch.abandoned", shards=sorted({e.shard for e in abandoned}),
                  count=len(abandoned), reason="lease_lapsed")
        self._release(abandoned)
        return kept

    def _settle_report(self, items: list[Item], report: PublishReport, started: float) -> None:
        done = time.monotonic()
        handled = items[: report.published]
        refused = [(items[i], exc) for i, exc in sorted(report.unpublishable.items())]
        lapsed = [items[i].entry for i in sorted(report.lapsed)]
        revoked = [items[i].entry for i in sorted(report.revoked)]
        unconfirmed = [items[i].entry for i in sorted(report.unconfirmed)]
        held_back = report.lapsed | report.revoked | report.unconfirmed
        if held_back or report.unpublishable:
            published = [i.entry for n, i in enumerate(handled) if n not in report.unpublishable and n not in held_back]
        else:  # every one handled was published (read in C)
            published = list(map(_ENTRY, handled))
        if refused:
            self._dead_letter_unpublishable(refused)
        if lapsed:
            log_event(logging.WARNING, "batch.abandoned", shards=sorted({e.shard for e in lapsed}),
                      count=len(lapsed), reason="lease_lapsed_at_handoff")
        if unconfirmed:  # the broker may or may not have them: published again (at-least-once)
            log_event(logging.WARNING, "batch.unconfirmed", shards=sorted({e.shard for e in unconfirmed}),
                      count=len(unconfirmed), error=describe(report.error) if report.error else None)
        if revoked:  # forgotten like published ones (the revoke already removed them from flight)
            self._to_ack.extend(revoked)
            for shard in sorted({e.shard for e in revoked}):
                self._revoked(shard, [e.task_id for e in revoked if e.shard == shard], "handoff")
        if published:
            redis_now = self.env.clock.at(done)
            per_shard = dict(Counter(map(_SHARD, published)))
            self.env.meter.add(per_shard)
            self.env.observer.published(per_shard, [redis_now - due for due in map(_DUE, published)], done - started)
        self._to_ack.extend(published)
        rest = [i.entry for i in items[report.published:]] if report.error is not None else []
        self._release(lapsed + unconfirmed + rest)

    def _release(self, entries: list[Claimed]) -> None:
        if entries:
            self._unreleased.extend(entries)  # kept until Redis confirms: released at most once anyway
            self._retry.update(e.shard for e in entries)
            self.settle(acks=False)

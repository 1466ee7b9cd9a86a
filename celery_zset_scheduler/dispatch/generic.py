"""The generic hand-off, for any broker: claim -> publish through Kombu -> ack.

Each step returns what the next one needs: the claim (one round trip for every due shard, carrying
the acks of the previous batch), decoding (poison entries are dead-lettered), the lease check (a
batch of a shard whose lease lapsed is handed back, not published), publishing, then settling the
report (refused messages dead-lettered, the published counted and acked, the rest released).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import PoisonMessage
from ..model.codec import StoredMessage, decode
from ..model.letters import DeadLetter
from ..model.logs import log_event
from ..store.claims import Claimed, Fence
from .handoff import Env, HandOffFactory, Pass, Publisher, PublishReport, ShardPass


@dataclass(frozen=True)
class Batch:
    """Claimed entries that decoded, in due order, with their messages."""

    entries: list[Claimed]
    messages: list[StoredMessage]

    def without(self, shards: set[int]) -> tuple[Batch, list[Claimed]]:
        keep = [i for i, e in enumerate(self.entries) if e.shard not in shards]
        dropped = [e for e in self.entries if e.shard in shards]
        return Batch([self.entries[i] for i in keep], [self.messages[i] for i in keep]), dropped


def generic(publisher: Publisher) -> HandOffFactory:
    """The factory a dispatcher calls with its environment."""
    return lambda env: GenericHandOff(env, publisher)


class GenericHandOff:
    def __init__(self, env: Env, publisher: Publisher) -> None:
        self.env = env
        self.publisher = publisher
        # Published, not yet acked: acked with the next claim (one round trip less per pass) or
        # before sleeping, whichever comes first; kept across a Redis outage until acked.
        self._to_ack: list[Claimed] = []
        self._unreleased: list[Claimed] = []
        self._retry: set[int] = set()  # shards whose entries went back to due in this pass

    # -- the loop's interface -------------------------------------------------------------------

    def dispatch(self, fences: Sequence[Fence]) -> Pass:
        self._retry = set()
        passed, entries, claimed_at = self._claim(fences)
        error: BaseException | None = None
        batch = self._keep_fresh(self._decode(entries), claimed_at) if entries else Batch([], [])
        if batch.entries:
            started = time.monotonic()
            report = self.publisher.publish(batch.messages)
            self._settle_report(batch, report, started)
            error = report.error
        return Pass(passed.shards, passed.sent_at, passed.answered_at, error, frozenset(self._retry))

    def settle(self, *, acks: bool = True) -> None:
        if acks and self._to_ack:
            self.env.claims.ack(self._to_ack)
            self._to_ack = []
        if self._unreleased:
            self.env.claims.release(self._unreleased)
            self._unreleased = []

    # -- the steps ------------------------------------------------------------------------------

    def _claim(self, fences: Sequence[Fence]) -> tuple[Pass, list[Claimed], float]:
        """One round trip: the held-back acks, then a claim on every shard."""
        config = self.env.config
        sent_at = time.monotonic()
        results = self.env.claims.claim_many(
            fences, config.batch_size, int(config.inflight_timeout * 1000),
            max_wait_ms=int(config.max_interval * 1000),
            wake_ttl_ms=int((config.max_interval + config.lock_timeout) * 1000),
            ack=self._to_ack,
        )
        self._to_ack = []
        answered_at = time.monotonic()
        shards: dict[int, ShardPass] = {}
        entries: list[Claimed] = []
        for fence in fences:
            result = results[fence.shard]
            shards[fence.shard] = ShardPass(result.fenced, result.now_ms, result.next_due_ms, len(result.entries))
            if result.fenced:
                continue
            self.env.clock.observe(result.now_ms, (sent_at + answered_at) / 2)
            self.env.observer.claimed(fence.shard, len(result.entries), answered_at - sent_at)
            entries += result.entries
        # Due order across shards: entries of two shards due a millisecond apart stay in order.
        entries.sort(key=lambda e: e.due_ms)
        return Pass(shards, sent_at, answered_at), entries, answered_at

    def _decode(self, entries: list[Claimed]) -> Batch:
        """Messages of the entries; an entry that does not decode is dead-lettered (and acked)."""
        good: list[Claimed] = []
        messages: list[StoredMessage] = []
        poison: list[tuple[Claimed, PoisonMessage]] = []
        for entry in entries:
            try:
                messages.append(decode(entry.task_id, entry.payload))
                good.append(entry)
            except PoisonMessage as exc:
                poison.append((entry, exc))
        if poison:
            for entry, error in poison:
                self.env.dead_letters.add(DeadLetter.for_poison(entry.task_id, entry.payload, error, entry.shard))
            log_event(logging.ERROR, "poison.dead_lettered", count=len(poison),
                      ids=",".join(e.task_id for e, _ in poison[:10]))
            self.env.observer.dead_lettered("poison", len(poison))
            self._to_ack.extend(e for e, _ in poison)
        return Batch(good, messages)

    def _keep_fresh(self, batch: Batch, claimed_at: float) -> Batch:
        """Hand back the entries of shards whose lease lapsed while we were paused or slow: a
        newer leader may already be dispatching them."""
        now = time.monotonic()
        expired = (now - claimed_at) > self.env.config.inflight_timeout * 0.8
        lapsed = {e.shard for e in batch.entries if expired or not self.env.lease_valid(e.shard, now)}
        if not lapsed:
            return batch
        kept, abandoned = batch.without(lapsed)
        log_event(logging.WARNING, "batch.abandoned", shards=sorted(lapsed), count=len(abandoned),
                  reason="lease_lapsed")
        self._release(abandoned)
        return kept

    def _settle_report(self, batch: Batch, report: PublishReport, started: float) -> None:
        done = time.monotonic()
        refused = {i: exc for i, exc in report.unpublishable.items()}
        published = [e for i, e in enumerate(batch.entries[: report.published]) if i not in refused]
        if refused:
            self._dead_letter_unpublishable([(batch.entries[i], batch.messages[i], exc) for i, exc in refused.items()])
        if published:
            redis_now = self.env.clock.at(done)
            per_shard: dict[int, int] = {}
            for e in published:
                per_shard[e.shard] = per_shard.get(e.shard, 0) + 1
            self.env.meter.add(per_shard)
            self.env.observer.published(per_shard, [redis_now - e.due_ms for e in published], done - started)
        self._to_ack.extend(published)
        if report.error is not None:
            self._release(batch.entries[report.published:])

    def _dead_letter_unpublishable(self, refused: list[tuple[Claimed, StoredMessage, BaseException]]) -> None:
        """A message the broker (or Kombu) refuses for a reason of its own would block its shard
        if it went back to ``due``: it goes to the dead-letter store, and the shard goes on."""
        now = int(time.time() * 1000)
        for _, message, exc in refused:
            self.env.dead_letters.add(DeadLetter.for_message(
                message, "unpublishable", exc_type=type(exc).__name__, exc_message=str(exc),
                first_failure_ms=now, last_failure_ms=now, worker="dispatcher",
            ))
        log_event(logging.ERROR, "unpublishable.dead_lettered", count=len(refused),
                  ids=",".join(e.task_id for e, _, _ in refused[:10]), error=repr(refused[0][2]))
        self.env.observer.dead_lettered("unpublishable", len(refused))
        self._to_ack.extend(e for e, _, _ in refused)

    def _release(self, entries: list[Claimed]) -> None:
        if entries:
            self._unreleased.extend(entries)  # kept until Redis confirms: released at most once anyway
            self._retry.update(e.shard for e in entries)
            self.settle(acks=False)


"""The dispatcher: claim -> publish -> ack over the shards this process leads.

One thread does everything, in this order each pass: retry acks/releases an outage left behind,
heartbeat and rebalance (every ``heartbeat_interval``), reap expired in-flight entries, then one
batch from every owned shard that is due. It then sleeps until the earliest due time of its shards
(by Redis time, converted to a local monotonic deadline), its next heartbeat or ``max_interval``,
whichever is first; a schedule earlier than that publishes a wake-up on the store's channel.

Redis or broker outages are logged once, retried with capped exponential backoff, and never drop
a claimed entry: it is published and acked, or released to ``due``, or left in flight for the reap.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from .claims import Claimed, ClaimResult, Claims
from .codec import StoredMessage, decode
from .deadletter import DeadLetter, DeadLetters
from .errors import PoisonMessage, ZSetSchedulerError
from .events import Observer, log_event
from .leader import Leadership, new_member_id
from .store import Store

# Any Redis error is an outage to wait out, not a reason to exit: a full store (OOM), a failover
# (READONLY, MASTERDOWN), a busy script, a lost connection. Exiting would crash-loop under a
# supervisor exactly when the store needs draining.
REDIS_ERRORS = (redis.RedisError,)
OUTAGE_REMINDER_S = 60.0
SLEEP_SLICE_S = 0.25  # how promptly stop() is noticed while sleeping
# Shards due within this window are claimed in the same pass: one round trip instead of several,
# and entries of different shards due at nearly the same time are published in due order.
COALESCE_S = 0.005
# A published batch is acked with the next claim when that comes this soon, else on its own.
ACK_LINGER_S = 0.002


@dataclass(frozen=True)
class PublishReport:
    """What became of a batch: the first ``published`` messages were handled, in order; of those,
    the ``unpublishable`` indexes were refused for a reason of their own (they never will be
    published, so they are dead-lettered); ``error`` is an outage that stopped the rest."""

    published: int
    error: BaseException | None = None
    unpublishable: dict[int, BaseException] = field(default_factory=dict)


class Publisher(Protocol):
    """Hands messages to the broker in order: an outage stops the batch, a message's own error
    only skips that message (see :class:`PublishReport`)."""

    def publish(self, messages: Sequence[StoredMessage]) -> PublishReport: ...


@dataclass(frozen=True)
class DispatcherConfig:
    batch_size: int = 500
    lock_timeout: float = 10.0
    max_interval: float = 5.0
    inflight_timeout: float = 30.0
    heartbeat_interval: float = 1.0
    claim_interval: float = 0.002
    backoff_max: float = 5.0


class Backoff:
    """Capped exponential backoff with full jitter for outages."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next(self) -> float:
        self.attempt += 1
        return random.uniform(self.base, min(self.cap, self.base * 2 ** self.attempt))

    def reset(self) -> None:
        self.attempt = 0


class Dispatcher:
    """Moves due entries of the shards it leads into the broker. ``run()`` blocks; ``stop()`` ends it."""

    def __init__(
        self, store: Store, publisher: Publisher, config: DispatcherConfig | None = None, *,
        member_id: str | None = None, pinned: set[int] | None = None,
        dead_letters: DeadLetters | None = None, observer: Observer | None = None,
    ) -> None:
        self.store = store
        self.claims = Claims(store)
        self.publisher = publisher
        self.config = config or DispatcherConfig()
        self.member_id = member_id or new_member_id()
        self.observer = observer or Observer()
        self.dead_letters = dead_letters or DeadLetters(store.client, store.keys)
        self.leadership = Leadership(
            store, self.member_id, self.config.lock_timeout, pinned=pinned, observer=self.observer
        )
        self.clock = self.leadership.clock
        self._stop = threading.Event()
        self._next_due: dict[int, float] = {}  # shard -> monotonic time its next entry is due
        self._next_beat = 0.0
        self._last_claim = 0.0
        # Published, not yet acked: acked with the next claim (one round trip less per pass) or
        # before sleeping, whichever comes first; kept across a Redis outage until acked.
        self._to_ack: list[Claimed] = []
        self._unreleased: list[Claimed] = []
        self._pubsub: Any = None
        self._outage: str | None = None
        self._outage_logged = 0.0
        self._backoff = Backoff(cap=self.config.backoff_max)
        self.passes = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish the batch in hand, release its leases and return."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        log_event(logging.INFO, "dispatcher.started", dispatcher=self.member_id, shards=self.store.shards)
        self._start()
        try:
            while not self._stop.is_set():
                try:
                    busy = self.run_once()
                    self._recovered()
                    if not busy:
                        self._sleep()
                except REDIS_ERRORS as exc:
                    self._failed("redis", exc)
                except BrokerUnavailable as exc:
                    self._failed("broker", exc.__cause__ or exc)
        finally:
            self._shutdown()

    def _start(self) -> None:
        """Check the store's shard count (a mismatch raises); wait out an outage at start."""
        while not self._stop.is_set():
            try:
                self.store.check_meta()
                return
            except REDIS_ERRORS as exc:
                self._failed("redis", exc)
            except ZSetSchedulerError as exc:
                log_event(logging.ERROR, "dispatcher.refused", dispatcher=self.member_id, error=str(exc))
                raise

    def _shutdown(self) -> None:
        try:
            self._ack_now()
            self._flush_releases()
            self.leadership.release_all()
        except REDIS_ERRORS as exc:
            log_event(logging.WARNING, "dispatcher.shutdown_incomplete", error=repr(exc))
        self._close_pubsub()
        log_event(logging.INFO, "dispatcher.stopped", dispatcher=self.member_id)

    def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):  # a broken connection must not hide why we close it
                pubsub.close()

    def _failed(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        if self._outage is None:
            log_event(logging.WARNING, "outage.started", what=what, error=repr(exc))
            self.observer.outage(what, exc)
            self._outage_logged = now
        elif now - self._outage_logged > OUTAGE_REMINDER_S:
            log_event(logging.WARNING, "outage.continues", what=what, error=repr(exc))
            self._outage_logged = now
        self._outage = what
        self._close_pubsub()  # re-subscribe after the outage
        self._stop.wait(self._backoff.next())

    def _recovered(self) -> None:
        if self._outage is not None:
            log_event(logging.INFO, "outage.ended", what=self._outage)
            self._outage = None
        self._backoff.reset()

    # -- one pass -------------------------------------------------------------------------------

    def run_once(self) -> bool:
        """One pass over the owned shards; True when a shard had a full batch (no sleep wanted)."""
        self.passes += 1
        self._subscribe()  # before claiming: a claim arms the wake keys that publish to us
        self._flush_releases()
        now = time.monotonic()
        if now >= self._next_beat:
            self._beat()
            self._next_beat = now + self.config.heartbeat_interval
        return self._dispatch_due()

    def _beat(self) -> None:
        self._ack_now()
        changes = self.leadership.beat()
        for shard in changes.acquired:
            self._next_due[shard] = 0.0  # claim at once: we do not know its next due time yet
        for shard in changes.lost + changes.released:
            self._next_due.pop(shard, None)
        limit = self.config.batch_size
        for shard, lease in list(self.leadership.owned.items()):
            reaped = self.claims.reap(lease.fence, limit)
            if reaped is None:
                self._lost(shard, "reap fenced")
            elif reaped:
                log_event(logging.WARNING, "inflight.reaped", shard=shard, count=len(reaped))
                self.observer.reaped(shard, len(reaped))
                self._next_due[shard] = 0.0

    def _lost(self, shard: int, reason: str) -> None:
        self.leadership.drop(shard, reason=reason)
        self._next_due.pop(shard, None)

    def _dispatch_due(self) -> bool:
        """Claim from every due shard in one round trip, publish in due order, ack."""
        now = time.monotonic()
        fences = []
        if not any(self._next_due.get(s, 0.0) <= now for s in self.leadership.owned):
            return False
        for shard, lease in sorted(self.leadership.owned.items()):
            if self._next_due.get(shard, 0.0) > now + COALESCE_S:
                continue
            if lease.valid(now, self.config.lock_timeout):
                fences.append(lease.fence)
            else:  # not renewed lately (Redis trouble): wait for the next heartbeat to decide
                self._next_due[shard] = now + self.config.heartbeat_interval
        if not fences or self._stop.is_set():
            return False
        started = self._last_claim = time.monotonic()
        results = self.claims.claim_many(
            fences, self.config.batch_size, int(self.config.inflight_timeout * 1000),
            max_wait_ms=int(self.config.max_interval * 1000),
            wake_ttl_ms=int((self.config.max_interval + self.config.lock_timeout) * 1000),
            ack=self._to_ack,
        )
        self._to_ack = []
        claimed_at = time.monotonic()
        busy, entries = False, []
        for fence in fences:
            result = results[fence.shard]
            if result.fenced:
                self._lost(fence.shard, "claim fenced")
                continue
            self.clock.observe(result.now_ms, (started + claimed_at) / 2)
            self.observer.claimed(fence.shard, len(result.entries), claimed_at - started)
            # From when the claim was sent: an estimate that errs early only costs an empty claim,
            # one that errs late would publish entries of different shards out of due order.
            self._note_next_due(fence.shard, result, started)
            busy |= len(result.entries) >= self.config.batch_size
            entries += result.entries
        if entries:
            self._hand_over(entries, claimed_at)
        return busy

    def _note_next_due(self, shard: int, result: ClaimResult, sent_at: float) -> None:
        # The same rule as the claim script's wake key: the earliest due entry, at most
        # max_interval away. A schedule due before that wakes us; anything later is seen then.
        wait = self.config.max_interval
        if len(result.entries) >= self.config.batch_size:
            wait = 0.0
        elif result.next_due_ms is not None:
            wait = min(wait, max(0, result.next_due_ms - result.now_ms) / 1000.0)
        self._next_due[shard] = sent_at + wait

    def _hand_over(self, entries: list[Claimed], claimed_at: float) -> None:
        """Publish claimed entries of all shards in due order and ack them; drop none."""
        entries.sort(key=lambda e: e.due_ms)
        messages: list[StoredMessage] = []
        good: list[Claimed] = []
        poison: list[tuple[Claimed, PoisonMessage]] = []
        for entry in entries:
            try:
                messages.append(decode(entry.task_id, entry.payload))
                good.append(entry)
            except PoisonMessage as exc:
                poison.append((entry, exc))
        if poison:
            self._dead_letter_poison(poison)
        # A lease that lapsed while we were paused or slow means a newer leader may already be
        # dispatching the shard: hand its entries back instead of publishing them a second time.
        now = time.monotonic()
        batch_expired = (now - claimed_at) > self.config.inflight_timeout * 0.8
        lapsed = {
            e.shard for e in good
            if batch_expired or not self._lease_valid(e.shard, now)
        }
        if lapsed:
            abandoned = [e for e in good if e.shard in lapsed]
            log_event(logging.WARNING, "batch.abandoned", shards=sorted(lapsed), count=len(abandoned),
                      reason="lease_lapsed")
            self._release(abandoned)
            messages = [m for m, e in zip(messages, good, strict=True) if e.shard not in lapsed]
            good = [e for e in good if e.shard not in lapsed]
        if not good:
            return
        started = time.monotonic()
        report = self.publisher.publish(messages)
        done = time.monotonic()
        refused = {i: (good[i], messages[i], exc) for i, exc in report.unpublishable.items()}
        published = [e for i, e in enumerate(good[: report.published]) if i not in refused]
        if refused:
            self._dead_letter_unpublishable(list(refused.values()))
        if published:
            redis_now = self.clock.at(done)
            per_shard: dict[int, int] = {}
            for e in published:
                per_shard[e.shard] = per_shard.get(e.shard, 0) + 1
            self.leadership.meter.add(per_shard)
            self.observer.published(per_shard, [redis_now - e.due_ms for e in published], done - started)
        self._ack(published)
        if report.error is not None:
            self._release(good[report.published:])
            raise BrokerUnavailable(f"publishing to the broker failed: {report.error!r}") from report.error

    def _lease_valid(self, shard: int, now: float) -> bool:
        lease = self.leadership.lease(shard)
        return lease is not None and lease.valid(now, self.config.lock_timeout)

    def _dead_letter_unpublishable(self, refused: list[tuple[Claimed, StoredMessage, BaseException]]) -> None:
        """A message the broker (or Kombu) refuses for a reason of its own would block its shard
        if it went back to ``due``: it goes to the dead-letter store, and the shard goes on."""
        now = int(time.time() * 1000)
        for _, message, exc in refused:
            self.dead_letters.add(DeadLetter.for_message(
                message, "unpublishable", exc_type=type(exc).__name__, exc_message=str(exc),
                first_failure_ms=now, last_failure_ms=now, worker="dispatcher",
            ))
        log_event(logging.ERROR, "unpublishable.dead_lettered", count=len(refused),
                  ids=",".join(e.task_id for e, _, _ in refused[:10]), error=repr(refused[0][2]))
        self.observer.dead_lettered("unpublishable", len(refused))
        self._ack([e for e, _, _ in refused])

    def _dead_letter_poison(self, poison: list[tuple[Claimed, PoisonMessage]]) -> None:
        for entry, exc in poison:
            self.dead_letters.add(DeadLetter.for_poison(entry.task_id, entry.payload, exc, entry.shard))
        log_event(logging.ERROR, "poison.dead_lettered", count=len(poison),
                  ids=",".join(e.task_id for e, _ in poison[:10]))
        self.observer.dead_lettered("poison", len(poison))
        self._ack([e for e, _ in poison])

    def _ack(self, entries: list[Claimed]) -> None:
        self._to_ack.extend(entries)

    def _ack_now(self) -> None:
        if self._to_ack:
            self.claims.ack(self._to_ack)
            self._to_ack = []

    def _release(self, entries: list[Claimed]) -> None:
        if not entries:
            return
        self._unreleased.extend(entries)  # kept until Redis confirms: released at most once anyway
        self._flush_releases()
        for e in entries:
            self._next_due[e.shard] = 0.0

    def _flush_releases(self) -> None:
        if self._unreleased:
            self.claims.release(self._unreleased)
            self._unreleased = []

    # -- sleeping -------------------------------------------------------------------------------

    def _sleep(self) -> None:
        now = time.monotonic()
        deadline = min(
            [self._next_beat, now + self.config.max_interval]
            + [self._next_due.get(s, 0.0) for s in self.leadership.owned]
        )
        # While it keeps up, a dispatcher claims at most every claim_interval: a few more entries
        # per round trip (less CPU at moderate rates) for at most that much extra lateness.
        deadline = max(deadline, self._last_claim + self.config.claim_interval)
        if deadline - now > ACK_LINGER_S:
            self._ack_now()  # nothing to piggyback on soon: ack the last batch now
        if deadline - now > 0:
            self._wait_until(deadline)

    def _wait_until(self, deadline: float) -> None:
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            timeout = min(remaining, SLEEP_SLICE_S)
            if self._pubsub is None:
                self._stop.wait(timeout)
                continue
            message = self._pubsub.get_message(timeout=timeout)
            woke = False
            while message is not None:
                woke |= self._on_wake(message)
                message = self._pubsub.get_message(timeout=0)
            if woke:
                return

    def _on_wake(self, message: dict[str, Any]) -> bool:
        if message.get("type") != "message":
            return False
        try:
            shard = int(message["data"])
        except (TypeError, ValueError):
            return False
        if shard in self.leadership.owned:
            self._next_due[shard] = 0.0
            return True
        return False

    def _subscribe(self) -> None:
        if self._pubsub is None:
            pubsub = self.store.client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(self.store.keys.wake_channel)
            self._pubsub = pubsub


class BrokerUnavailable(Exception):
    """The broker refused a publish; the unpublished rest of the batch went back to ``due``."""

"""The dispatcher: hand due entries of the shards this process leads to the broker.

One thread does everything, in this order each pass: settle what an outage left behind, heartbeat
and rebalance (every ``heartbeat_interval``), reap expired in-flight entries, a step of collecting
unused shared prefixes (:mod:`.collector`), fire the due periodic
entries (:mod:`.periodic`: their occurrences become stored tasks), then one batch from every owned
shard that is due, through the :class:`~.handoff.HandOff`. It then sleeps until the
earliest due time of its shards (by Redis time, converted to a local monotonic deadline), its next
heartbeat or ``max_interval``, whichever is first; a schedule earlier than that publishes a wake-up
on the store's channel (:mod:`.wake`).

Redis or broker outages are logged once, retried with capped exponential backoff, and never drop
a claimed entry: it is published and acked, or released to ``due``, or left in flight for the reap.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..errors import ZSetSchedulerError
from ..model.backoff import OutageBackoff
from ..model.logs import describe, log_event
from ..store.claims import Claims
from ..store.client import location
from ..store.deadletters import DeadLetters
from ..store.pending import Store
from ..store.periodic import PeriodicStore
from ..store.permissions import refused
from .collector import Collector
from .config import DispatcherConfig
from .generic import generic
from .handoff import BrokerUnavailable, Env, HandOffFactory, Publisher, ShardPass
from .leadership import Leadership, new_member_id
from .observer import Observer
from .periodic import PeriodicEnv, PeriodicFactory
from .permits import Permits
from .wake import REDIS_ERRORS, WakeChannel

OUTAGE_REMINDER_S = 60.0
# Shards due within this window are claimed in the same pass: one round trip instead of several,
# and entries of different shards due at nearly the same time are published in due order.
COALESCE_S = 0.005
# A published batch is acked with the next claim when that comes this soon, else on its own.
ACK_LINGER_S = 0.002


class Dispatcher:
    """Moves due entries of the shards it leads into the broker. ``run()`` blocks; ``stop()`` ends it.

    ``publisher`` takes the generic path (claim, publish, ack); ``handoff`` builds another one.
    ``periodic`` builds the periodic step (:mod:`.periodic`), run once per pass before the claim.
    """

    def __init__(
        self, store: Store, publisher: Publisher | None = None, config: DispatcherConfig | None = None, *,
        member_id: str | None = None, pinned: set[int] | None = None,
        dead_letters: DeadLetters | None = None, observer: Observer | None = None,
        handoff: HandOffFactory | None = None, periodic: PeriodicFactory | None = None,
    ) -> None:
        if (publisher is None) == (handoff is None):
            raise TypeError("give a publisher (the generic path) or a handoff factory, not both")
        self.store = store
        self.config = config or DispatcherConfig()
        self.member_id = member_id or new_member_id()
        self.observer = observer or Observer()
        self.claims = Claims(store, self.config.batch_bytes)
        self.leadership = Leadership(
            store, self.member_id, self.config.lock_timeout, pinned=pinned, observer=self.observer
        )
        self.clock = self.leadership.clock
        env = Env(
            claims=self.claims, dead_letters=dead_letters or DeadLetters(store.client, store.keys),
            observer=self.observer, meter=self.leadership.meter, clock=self.clock, config=self.config,
            lease_valid=self._lease_valid, fences=lambda: [lease.fence for lease in self.leadership.owned.values()],
            stopping=lambda: self._stop.is_set(), keep_alive=self._keep_alive,
        )
        self.handoff = (handoff or generic(publisher))(env)  # type: ignore[arg-type]
        self._stop = threading.Event()
        self._next_due: dict[int, float] = {}  # shard -> monotonic time its next entry is due
        self._pending_ms: dict[int, int | None] = {}  # shard -> earliest pending due (Redis ms) at its last claim
        self._next_beat = 0.0
        self._renewed_at = 0.0  # the last renewal of the leases (a heartbeat or a hand-off's)
        self._last_claim = 0.0
        self._backlog = False  # the last pass took a full batch on some shard
        self.wake = WakeChannel(store, self._stop, self.config.max_interval)
        self._outage: str | None = None
        self._outage_logged = 0.0
        self._backoff = OutageBackoff(cap=self.config.backoff_max)
        self._shard_outages: dict[int, OutageBackoff] = {}  # shards whose own calls fail (the rest go on)
        self._shard_refused: set[int] = set()  # of those, the ones refused a permission (no outage logged)
        self._allowed = True  # the user may run what the scripts run (asked at start and each heartbeat)
        self.collector = Collector(store, self.config)
        self.permits = Permits(store)
        self.periodic = None if periodic is None else periodic(
            PeriodicEnv(PeriodicStore(store), self.config, self._lease_valid))

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
                if self.permits.scripts_allowed():
                    return
                self._stop.wait(self._backoff.next())
            except REDIS_ERRORS as exc:
                self._failed("redis", exc)
            except ZSetSchedulerError as exc:
                log_event(logging.ERROR, "dispatcher.refused", dispatcher=self.member_id, error=str(exc))
                raise

    def _shutdown(self) -> None:
        try:
            self.handoff.settle(releasing=True)  # run() may end by an error, not stop(): the shards go
            self.leadership.release_all()
        except REDIS_ERRORS as exc:
            log_event(logging.WARNING, "dispatcher.shutdown_incomplete", error=describe(exc))
        self.wake.close()
        log_event(logging.INFO, "dispatcher.stopped", dispatcher=self.member_id)

    def _failed(self, what: str, exc: BaseException) -> None:
        if refused(exc):
            self._refused(what, exc)
            return
        now = time.monotonic()
        # What failed, in words (redis-py's repr() is only "network:ConnectionError"), and where.
        where = {"store": location(self.store.client)} if what == "redis" else {}
        if self._outage is None:
            log_event(logging.WARNING, "outage.started", what=what, **where, error=describe(exc))
            self.observer.outage(what, exc)
            self._outage_logged = now
        elif now - self._outage_logged > OUTAGE_REMINDER_S:
            log_event(logging.WARNING, "outage.continues", what=what, **where, error=describe(exc))
            self._outage_logged = now
        self._outage = what
        self.wake.close()  # re-subscribe after the outage
        self._stop.wait(self._backoff.next())

    def _refused(self, what: str, exc: BaseException) -> None:
        """A permission the store's (or a Redis broker's) user lacks: a configuration problem, not
        an outage. Logged once a minute with the rule that grants it; the pass is tried again
        after a backoff, and what it could not hand off waits in the store."""
        self.permits.report(what, exc)
        self.wake.close()
        self._stop.wait(self._backoff.next())

    def _recovered(self) -> None:
        if self._outage is not None:
            log_event(logging.INFO, "outage.ended", what=self._outage)
            self._outage = None
        self._backoff.reset()

    # -- one pass -------------------------------------------------------------------------------

    def run_once(self) -> bool:
        """One pass over the owned shards; True when a shard had a full batch (no sleep wanted)."""
        self.wake.subscribe()  # before claiming: a claim arms the wake keys that publish to us
        self.handoff.settle(acks=False)
        now = time.monotonic()
        if now >= self._next_beat:
            self._beat()
            self._next_beat = now + self.config.heartbeat_interval
            self._renewed_at = now
            # Asked again each heartbeat: a permission taken away while it runs stops the claims
            # within a heartbeat (the leases are kept meanwhile).
            self._allowed = self.permits.scripts_allowed()
        if not self._allowed:
            return False
        if self.periodic is not None:
            self._periodic_pass()
        return self._dispatch_due()

    def _periodic_pass(self) -> None:
        """Fire the due periodic entries; the claim right after hands their occurrences over."""
        assert self.periodic is not None
        done = self.periodic.run(self.leadership.owned)
        for shard in done.fenced:
            self._lost(shard, "periodic fenced")
        for shard in done.stored:
            if shard in self.leadership.owned:
                self._next_due[shard] = 0.0

    def _beat(self) -> None:
        self.handoff.settle()
        # Follow a reshard: its new shards get leaders within a heartbeat, the fair share is dealt
        # over both layouts' shards while it runs and over the new count once it has ended.
        try:
            self.store.refresh_layout()
        except REDIS_ERRORS as exc:
            # The meta hash's node down (a cluster) must not stop the shards that are up: the
            # layout is read again at the next heartbeat, and a write routed with an old count
            # is refused by its shard's layout key meanwhile.
            log_event(logging.DEBUG, "layout.unread", dispatcher=self.member_id, error=describe(exc))
        changes = self.leadership.beat(before_release=lambda: self.handoff.settle(releasing=True))
        for shard in changes.acquired:
            self._next_due[shard] = 0.0  # claim at once: we do not know its next due time yet
        for shard in changes.lost + changes.released:
            self._next_due.pop(shard, None)
        if self._backlog:
            # In a backlog the heartbeat's settle puts back what was claimed for the next pass
            # (held entries, a claim sent ahead), of shards the last pass may have found short:
            # every shard is claimed again at once, not at its planned time.
            for shard in self.leadership.owned:
                self._next_due[shard] = 0.0
        limit = self.config.batch_size
        any_reaped = False
        for shard, lease in list(self.leadership.owned.items()):
            try:
                reaped = self.claims.reap(lease.fence, limit)
            except REDIS_ERRORS as exc:
                if not self.store.clustered:
                    raise
                self._shard_failed(shard, exc)  # its master is down: the others go on
                continue
            if reaped is None:
                self._lost(shard, "reap fenced")
            elif reaped:
                log_event(logging.WARNING, "inflight.reaped", shard=shard, count=len(reaped))
                self.observer.reaped(shard, len(reaped))
                self._next_due[shard] = 0.0
                any_reaped = True
        if any_reaped:
            self.handoff.settle(releasing=True)  # what was claimed ahead is due after the reaped ones
        self.collector.beat([s for s in self.leadership.owned if s not in self._shard_outages])

    def _keep_alive(self) -> None:
        """Renew the leases when a heartbeat is due (a hand-off of several publish calls)."""
        now = time.monotonic()
        if now - self._renewed_at >= self.config.heartbeat_interval:
            self.leadership.renew()
            self._renewed_at = now

    def _lost(self, shard: int, reason: str) -> None:
        self.leadership.drop(shard, reason=reason)
        self._next_due.pop(shard, None)
        self._pending_ms.pop(shard, None)

    def _dispatch_due(self) -> bool:
        """Hand off every due shard in one pass; plan when to look at each again."""
        now = time.monotonic()
        fences = []
        waiting: dict[int, int] = {}  # shards left out of this pass -> their earliest pending due
        holding = self.handoff.holding
        if not holding and not any(self._next_due.get(s, 0.0) <= now for s in self.leadership.owned):
            return False
        for shard, lease in sorted(self.leadership.owned.items()):
            if self._next_due.get(shard, 0.0) > now + COALESCE_S:
                pending = self._pending_ms.get(shard)
                if pending is not None and shard not in self._shard_outages:
                    waiting[shard] = pending
                continue
            if lease.valid(now, self.config.lock_timeout):
                fences.append(lease.fence)
            else:  # not renewed lately (Redis trouble): wait for the next heartbeat to decide
                self._next_due[shard] = now + self.config.heartbeat_interval
        if (not fences and not holding) or self._stop.is_set():
            return False
        self._last_claim = time.monotonic()
        report = self.handoff.dispatch(fences, waiting=waiting)
        busy = self.handoff.holding
        errors = [e for e in (report.shards[f.shard].error for f in fences) if e is not None]
        if errors and len(errors) == len(fences) and not self.store.clustered:
            # Nothing worked: an outage of the whole store. (On a cluster the shards of one
            # pass may all live on the master that is down: each waits on its own, and an
            # outage of every master shows in the heartbeat's renewals.)
            raise errors[0]
        for fence in fences:
            result = report.shards[fence.shard]
            if result.error is not None:
                self._shard_failed(fence.shard, result.error)
                continue
            self._shard_recovered(fence.shard)
            if result.fenced:
                self._lost(fence.shard, "claim fenced")
                continue
            # From when the claim was sent: an estimate that errs early only costs an empty claim,
            # one that errs late would publish entries of different shards out of due order.
            self._note_next_due(fence.shard, result, report.sent_at)
            busy |= result.claimed >= self.config.batch_size
        for shard in report.retry:
            if shard in self.leadership.owned:
                self._next_due[shard] = 0.0
        error = report.broker_error
        if error is not None:
            raise BrokerUnavailable(f"publishing to the broker failed: {error!r}") from error
        self._backlog = busy
        return busy

    def _shard_failed(self, shard: int, error: Exception) -> None:
        """One shard's call failed (its slot's master is down, a full store refused it): that
        shard waits with a backoff of its own while the others go on."""
        backoff = self._shard_outages.get(shard)
        if refused(error):
            self.permits.report("redis", error)
            self._shard_refused.add(shard)
        elif backoff is None:
            log_event(logging.WARNING, "outage.started", what="redis", shard=shard, error=str(error))
            self.observer.outage("redis", error)
        if backoff is None:
            backoff = self._shard_outages[shard] = OutageBackoff(cap=self.config.backoff_max)
        self._next_due[shard] = time.monotonic() + backoff.next()

    def _shard_recovered(self, shard: int) -> None:
        if self._shard_outages.pop(shard, None) is not None and shard not in self._shard_refused:
            log_event(logging.INFO, "outage.ended", what="redis", shard=shard)
        self._shard_refused.discard(shard)

    def _note_next_due(self, shard: int, result: ShardPass, sent_at: float) -> None:
        # The same rule as the claim script's wake key: the earliest due entry, at most
        # max_interval away. A schedule due before that wakes us; anything later is seen then.
        self._pending_ms[shard] = result.next_due_ms
        wait = self.config.max_interval
        if result.claimed >= self.config.batch_size:
            wait = 0.0
        elif result.next_due_ms is not None:
            wait = min(wait, max(0, result.next_due_ms - result.now_ms) / 1000.0)
        self._next_due[shard] = sent_at + wait

    def _lease_valid(self, shard: int, now: float) -> bool:
        lease = self.leadership.lease(shard)
        return lease is not None and lease.valid(now, self.config.lock_timeout)

    # -- sleeping -------------------------------------------------------------------------------

    def _sleep(self) -> None:
        now = time.monotonic()
        deadline = min(
            [self._next_beat, now + self.config.max_interval]
            + [self._next_due.get(s, 0.0) for s in self.leadership.owned]
            + ([] if self.periodic is None else [d for d in [self.periodic.deadline()] if d is not None])
        )
        # While it keeps up, a dispatcher claims at most every claim_interval: a few more entries
        # per round trip (less CPU at moderate rates) for at most that much extra lateness.
        deadline = max(deadline, self._last_claim + self.config.claim_interval)
        if deadline - now > ACK_LINGER_S:
            self.handoff.settle()  # nothing to piggyback on soon: ack the last batch now
        if deadline - now > 0:
            self.wake.wait_until(deadline, self._on_wake)

    def _on_wake(self, message: dict[str, Any]) -> bool:
        if message.get("type") != "message":
            return False
        if self.periodic is not None and self.periodic.on_wake(message.get("data")):
            return True
        try:
            shard = int(message["data"])
        except (TypeError, ValueError):
            return False
        if shard in self.leadership.owned:
            self._next_due[shard] = 0.0
            return True
        return False

"""The worker side of durable revokes (I10): Celery's own revoked set follows the store's records.

A Celery worker drops a task whose id is in ``celery.worker.state.revoked`` (a ``LimitedSet``)
when it arrives, and again before it runs, marking it ``REVOKED``; the set is filled by revoke
broadcasts, which only reach the workers running at that moment. ``install(app)`` adds a worker
bootstep that fills the same set from the store, in the worker's main process (where prefork
workers check it):

- at start, before the consumer takes any task: every live record of every shard (bounded: the
  records are capped), after subscribing to the revoke channel, so nothing written in between is
  missed; a worker that was down when a task was revoked drops it;
- while running: each record as the revoke script announces it on the channel, read by a thread
  of its own, so a worker that is busy (a solo worker running a long task) has the id before it
  takes its next message; and everything again every ``RESYNC_S`` and after every reconnection
  (announcements are not kept while a worker is not subscribed).

Membership stays Celery's dictionary lookup: no Redis round trip per received task. Each id is
stamped so that it leaves the worker's set when its record expires in Redis.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from celery import bootsteps
from celery.worker import state as worker_state

from ...model.backoff import OutageBackoff
from ...model.logs import log_event
from ...store.acl import store_refusal
from ...store.permissions import REPEAT_AFTER_S, glob_escape, refusal, refused, report_refused
from ...store.revokes import load, parse_announcement
from ..core.state import installation_for

LOAD_WAIT_S = 10.0  # longest a starting worker waits for the records before it consumes anyway
RESYNC_S = 300.0  # every record is read again this often (announcements lost on a half-open link)
POLL_S = 0.5  # how promptly the thread notices it should stop
REFUSED_POLL_S = 5.0  # how often the records are read when the channel is refused


class RevokeFollower:
    """Keeps ``celery.worker.state.revoked`` current with the records of one app's store."""

    def __init__(self, app: Any, revoked: Any = None) -> None:
        self.app = app
        self.revoked = worker_state.revoked if revoked is None else revoked  # Celery's, unless a test's
        self.loaded = threading.Event()
        self.applied = 0  # ids added so far (for tests and logs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._channel_refused_until = 0.0  # the revoke channel is not asked for before then

    def start(self, wait: float = LOAD_WAIT_S) -> None:
        inst = installation_for(self.app)
        if inst is None:
            return
        most = inst.settings.revoke_max
        if self.revoked.maxlen and self.revoked.maxlen < most:
            self.revoked.maxlen = most  # room for every record the store may hold
        self._thread = threading.Thread(target=self._run, name="zset-revokes", daemon=True)
        self._thread.start()
        if not self.loaded.wait(wait):
            log_event(logging.WARNING, "revokes.not_loaded", waited=wait,
                      why="the store did not answer: consuming anyway, the records load when it does")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        inst = installation_for(self.app)
        assert inst is not None
        store = inst.store
        backoff = OutageBackoff(cap=5.0)
        failing = False
        while not self._stop.is_set():
            pubsub = store.client.pubsub()
            step = "subscribe"
            try:
                if time.monotonic() < self._channel_refused_until:
                    step = "load"
                    self._load(store)  # without the channel: every record, every REFUSED_POLL_S
                    self._stop.wait(REFUSED_POLL_S)
                    continue
                pubsub.subscribe(store.keys.revoke_channel)
                self._wait_subscribed(pubsub)
                step = "load"
                self._load(store)
                if failing:
                    log_event(logging.INFO, "revokes.outage_ended")
                failing = False
                backoff.reset()
                self._follow(pubsub, store)
            except (redis.RedisError, OSError) as exc:
                if refused(exc):
                    self._refused(store, step, exc)
                    if step == "load":
                        self._stop.wait(REFUSED_POLL_S)
                    continue
                if not failing:
                    log_event(logging.WARNING, "revokes.outage_started", error=repr(exc))
                failing = True
                self._stop.wait(backoff.next())
            finally:
                pubsub.close()

    def _refused(self, store: Any, step: str, exc: BaseException) -> None:
        """A permission the worker's store user lacks: said once a minute, not an outage. Without
        the channel the records are read every ``REFUSED_POLL_S`` (asking for it again a minute
        later); without the records' keys or commands nothing can be read: asked again later."""
        channel = store.keys.revoke_channel
        if step == "subscribe":
            _, grant = refusal(exc, channels=f"&{glob_escape(channel)}")
            self._channel_refused_until = time.monotonic() + REPEAT_AFTER_S
            report_refused(f"SUBSCRIBE {channel}", grant, exc,
                           f"reads the revoke records every {REFUSED_POLL_S:g} s instead")
            return
        what, grant = store_refusal(exc, store.keys)
        report_refused(f"{what} (the revoke records)", grant, exc,
                       f"revokes recorded in the store are not applied here; asks again every {REFUSED_POLL_S:g} s")

    def _wait_subscribed(self, pubsub: Any) -> None:
        """Until the server confirms the subscription: records written after it are announced."""
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and not self._stop.is_set():
            message = pubsub.get_message(timeout=POLL_S)
            if message is not None and message["type"] == "subscribe":
                return
        raise redis.TimeoutError("no confirmation of the revoke channel subscription")

    def _follow(self, pubsub: Any, store: Any) -> None:
        next_load = time.monotonic() + RESYNC_S
        while not self._stop.is_set():
            message = pubsub.get_message(timeout=POLL_S)
            if message is not None and message["type"] == "message":
                self._announced(message["data"])
            if time.monotonic() >= next_load:
                self._load(store)
                next_load = time.monotonic() + RESYNC_S

    def _load(self, store: Any) -> None:
        records = load(store.client, store.keys)
        for task_id, expiry in records.expiries.items():
            self._add(task_id, (expiry - records.now_ms) / 1000.0)
        if not self.loaded.is_set():
            log_event(logging.INFO, "revokes.loaded", count=len(records.expiries))
        self.loaded.set()

    def _announced(self, data: bytes) -> None:
        try:
            ttl, ids = parse_announcement(data)
        except ValueError as exc:
            log_event(logging.WARNING, "revokes.bad_announcement", error=str(exc))
            return
        for task_id in ids:
            self._add(task_id, ttl)

    def _add(self, task_id: str, remaining: float) -> None:
        """Into Celery's set, stamped to leave it when the record expires: the set drops an item
        ``expires`` seconds after its stamp."""
        revoked = self.revoked
        stamp = time.monotonic() + (remaining - revoked.expires if revoked.expires else 0.0)
        revoked.add(task_id, now=stamp)
        self.applied += 1


class RevokedSet(bootsteps.StartStopStep):
    """The worker bootstep ``install(app)`` adds. It starts after the pool (so the pool's children
    are not forked with its thread running) and, like every worker step, before the consumer."""

    label = "zset revokes"
    requires = ("celery.worker.components:Pool",)

    def include_if(self, w: Any) -> bool:
        return installation_for(w.app) is not None

    def create(self, w: Any) -> RevokeFollower:
        return RevokeFollower(w.app)

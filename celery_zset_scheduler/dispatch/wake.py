"""The dispatcher's sleep: until a deadline, or until a wake-up on the store's channel.

A schedule earlier than what a dispatcher sleeps towards publishes the shard on the store's wake
channel; a periodic entry added or changed publishes there too. Without a subscription (its node
is down in a cluster, or the store's ACL user may not use the channel) the sleep goes by the clock:
``max_interval`` bounds it anyway.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from ..store.pending import Store
from ..store.permissions import REPEAT_AFTER_S, glob_escape, refusal, refused, report_refused

# Any Redis error is an outage to wait out, not a reason to exit: a full store (OOM), a failover
# (READONLY, MASTERDOWN), a busy script, a lost connection. Exiting would crash-loop under a
# supervisor exactly when the store needs draining.
REDIS_ERRORS = (redis.RedisError,)
SLEEP_SLICE_S = 0.25  # how promptly stop() is noticed while sleeping


class WakeChannel:
    """The subscription to the store's wake channel, and a sleep that it can cut short."""

    def __init__(self, store: Store, stop: threading.Event, max_interval: float = 5.0) -> None:
        self.store = store
        self.store_max_interval = max_interval  # what a sleep without wake-ups is bounded by
        self._stop = stop
        self._refused_until = 0.0  # no subscription tried before then (the channel was refused)
        self._pubsub: Any = None

    def wait_until(self, deadline: float, on_wake: Callable[[dict[str, Any]], bool]) -> None:
        """Sleep until ``deadline`` (monotonic), ``stop``, or a message ``on_wake`` says wakes us."""
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            timeout = min(remaining, SLEEP_SLICE_S)
            if self._pubsub is None:
                self._stop.wait(timeout)
                continue
            try:
                message = self._pubsub.get_message(timeout=timeout)
            except REDIS_ERRORS as exc:
                if refused(exc):  # the reply to SUBSCRIBE is read here
                    self._refused(exc)
                    continue
                if not self.store.clustered:
                    raise
                self.close()  # its node is down: sleep by the clock, subscribe again next pass
                continue
            woke = False
            while message is not None:
                woke |= on_wake(message)
                message = self._pubsub.get_message(timeout=0)
            if woke:
                return

    def subscribe(self) -> None:
        if self._pubsub is None and time.monotonic() >= self._refused_until:
            pubsub = self.store.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.store.keys.wake_channel)
            except REDIS_ERRORS as exc:
                if refused(exc):
                    self._pubsub = pubsub
                    self._refused(exc)
                    return
                if not self.store.clustered:
                    raise
                # The channel's node is down: wake-ups only shorten a sleep that max_interval
                # bounds anyway, so the shards on the other masters go on without them.
                with contextlib.suppress(Exception):
                    pubsub.close()
                return
            self._pubsub = pubsub

    def _refused(self, exc: BaseException) -> None:
        """The user may not use the channel: a configuration problem, not an outage. Poll, say
        why (once a minute at most), and ask again a minute later (a grant needs no restart)."""
        channel = self.store.keys.wake_channel
        _, grant = refusal(exc, channels=f"&{glob_escape(channel)}")  # the channel, or the command
        report_refused(f"SUBSCRIBE {channel}", grant, exc,
                       f"polling every zset_scheduler_max_interval ({self.store_max_interval:g} s)")
        self._refused_until = time.monotonic() + REPEAT_AFTER_S
        self.close()

    def close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):  # a broken connection must not hide why we close it
                pubsub.close()

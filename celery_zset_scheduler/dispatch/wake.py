"""The dispatcher's sleep: until a deadline, or until a wake-up on the store's channel.

A schedule earlier than what a dispatcher sleeps towards publishes the shard on the store's wake
channel; a periodic entry added or changed publishes there too. Without a subscription (its node
is down in a cluster) the sleep goes by the clock: ``max_interval`` bounds it anyway.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from ..store.pending import Store

# Any Redis error is an outage to wait out, not a reason to exit: a full store (OOM), a failover
# (READONLY, MASTERDOWN), a busy script, a lost connection. Exiting would crash-loop under a
# supervisor exactly when the store needs draining.
REDIS_ERRORS = (redis.RedisError,)
SLEEP_SLICE_S = 0.25  # how promptly stop() is noticed while sleeping


class WakeChannel:
    """The subscription to the store's wake channel, and a sleep that it can cut short."""

    def __init__(self, store: Store, stop: threading.Event) -> None:
        self.store = store
        self._stop = stop
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
            except REDIS_ERRORS:
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
        if self._pubsub is None:
            pubsub = self.store.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.store.keys.wake_channel)
            except REDIS_ERRORS:
                if not self.store.clustered:
                    raise
                # The channel's node is down: wake-ups only shorten a sleep that max_interval
                # bounds anyway, so the shards on the other masters go on without them.
                with contextlib.suppress(Exception):
                    pubsub.close()
                return
            self._pubsub = pubsub

    def close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):  # a broken connection must not hide why we close it
                pubsub.close()

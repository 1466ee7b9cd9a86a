"""Kombu's Redis transport, kept alive through a broker restart.

A worker whose broker connection fails closes it: Kombu clears the transport's ``client`` (the
``kombu.Connection``) and then closes the channel, whose close restores the messages the worker
holds unacknowledged. The restore needs a connection pool, built from ``transport.client``, now
``None``: an ``AttributeError``, which Celery's consumer does not treat as a connection error,
and the worker exits with ``Unrecoverable error`` (Kombu 5.4-5.7). A task that finishes after
the failure acks through the same path. Each channel keeps the connection's parameters it was
made with and builds its pool from them when the transport has let go of them: the restore and
the late acks then succeed or fail as connection errors, which Celery retries. And the worker's
loop ticks at least every ``TICK_S``, so a worker whose prefetch window was full takes messages
again as soon as acks free it.

Everything else is Kombu's (queue layout, priorities, ``global_keyprefix``, fanout, remote
control), so workers and producers with and without it share the queues.
"""

from __future__ import annotations

import weakref
from typing import Any

from kombu.transport import redis as kombu_redis

#: Longest the worker's event loop sleeps without looking whether it may take more messages.
TICK_S = 0.1
_ticks: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _tick() -> None:
    """Nothing: the loop's waking up is what this timer is for."""


class Channel(kombu_redis.Channel):
    def __init__(self, connection: Any, *args: Any, **kwargs: Any) -> None:
        self._made_with = connection.client  # the kombu.Connection, kept past its release
        super().__init__(connection, *args, **kwargs)

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = self.connection
        if transport.client is not None or self._made_with is None:
            params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)
            return params
        transport.client = self._made_with  # only while the parameters are read
        try:
            params = super()._connparams(asynchronous=asynchronous)
        finally:
            transport.client = None
        return params


class Transport(kombu_redis.Transport):
    Channel = Channel

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        super().register_with_event_loop(connection, loop)
        # The loop asks for a message (BRPOP) at each tick while the prefetch window has room; a
        # window freed by acks made between I/O events (a threads pool's tasks ending) is seen
        # only at the next tick, which Kombu 5.4's loop may put off until its 10 s restore timer:
        # with acks late it took 16 messages every 10 s after a broker restart. Tick often enough.
        # One per loop: Celery 5.4 keeps a reconnecting worker's old timers.
        previous = _ticks.get(loop)
        if previous is not None:
            previous.cancel()
        _ticks[loop] = loop.call_repeatedly(TICK_S, _tick)


#: What ``broker_transport`` is set to (by name, so the app stays picklable).
TRANSPORT = f"{__name__}:Transport"

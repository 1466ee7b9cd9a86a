"""Kombu's Redis transport, kept alive through a broker restart.

A worker whose broker connection fails closes it: Kombu clears the transport's ``client`` (the
``kombu.Connection``) and then closes the channel, whose close restores the messages the worker
holds unacknowledged. The restore needs a connection pool, built from ``transport.client``, now
``None``: an ``AttributeError``, which Celery's consumer does not treat as a connection error,
and the worker exits with ``Unrecoverable error`` (Kombu 5.4-5.7). A task that finishes after
the failure acks through the same path. Each channel keeps the connection's parameters it was
made with and builds its pool from them when the transport has let go of them: the restore and
the late acks then succeed or fail as connection errors, which Celery retries.

Everything else is Kombu's (queue layout, priorities, ``global_keyprefix``, fanout, remote
control), so workers and producers with and without it share the queues.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


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


#: What ``broker_transport`` is set to (by name, so the app stays picklable).
TRANSPORT = f"{__name__}:Transport"

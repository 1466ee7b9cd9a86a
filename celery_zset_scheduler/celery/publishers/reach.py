"""Fail fast when the broker cannot be reached.

A producer whose connection was never established (the broker was down when the dispatcher
started, or since Kombu dropped it) waits out Kombu's own connection retries (~6 s) at its
first channel. A dispatcher pass should not outlast its shards' leases (``lock_timeout``), or they
lapse and are taken again, so the pass makes two attempts with no wait between them and the
dispatcher backs off instead (a broker back within its backoff step is used at the next pass).
One attempt is bounded by the transport's own connect timeout (``broker_connection_timeout``
for AMQP; for Redis, ``socket_connect_timeout`` in ``broker_transport_options``), not by this
module; a connection that Kombu still believes up is not checked here.
"""

from __future__ import annotations

from typing import Any

#: After this long (seconds) no further attempt is made.
CONNECT_WITHIN_S = 2.0


def reachable(producer: Any) -> None:
    """Return when the producer's broker connection is up (at once when it already is); raise
    Kombu's ``OperationalError`` after two attempts with no wait between when it is not."""
    producer.connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0,
                                          timeout=CONNECT_WITHIN_S)

"""Fail fast when the broker cannot be reached.

A producer whose connection was never established (the broker was down when the dispatcher
started, or since Kombu dropped it) waits out Kombu's own connection retries (~6 s) at its
first channel. A dispatcher pass must not outlast its shards' leases (``lock_timeout``), or they
lapse and are taken again, so the pass tries once, briefly, and the dispatcher backs off instead.
"""

from __future__ import annotations

from typing import Any

#: How long one attempt to connect may take in all (seconds).
CONNECT_WITHIN_S = 2.0


def reachable(producer: Any) -> None:
    """Return when the producer's broker connection is up (at once when it already is); raise
    Kombu's ``OperationalError`` after one quick attempt when it is not."""
    producer.connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0,
                                          timeout=CONNECT_WITHIN_S)

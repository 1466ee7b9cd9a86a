"""What a stored message becomes when it is published: the only changes made at dispatch time.

- ``eta`` moves to the ``zset_eta`` header. A Celery worker holds a message with an ``eta`` in
  its memory until its own clock reaches it, and a worker whose clock lags Redis would then run
  it late; the store has already waited, by Redis time. An installed worker shows the moved value
  as ``self.request.eta`` (:mod:`..worker.hooks`), so the task sees its ETA as with plain Celery.
- ``expiration`` (the AMQP per-message TTL) is what is left until ``expires``, as Celery's
  ``send_task`` computes it at send time; one already expired is published with a TTL of 0, as
  Celery does, so that the worker marks it expired (REVOKED) instead of running it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

from ...model.codec import StoredMessage
from ...model.headers import ZSET_ETA
from ...model.times import eta_ms
from ..core.messages import publishable


def outgoing(m: StoredMessage, now: float | None = None) -> tuple[dict[str, Any], dict[str, Any], float | None]:
    """``(headers, properties, expiration seconds or None)`` to publish ``m`` with; ``properties``
    without ``expiration``, which Kombu's ``Producer.publish`` takes as an argument of its own."""
    headers = dict(m.headers)
    eta = headers.get("eta")
    if eta:
        headers[ZSET_ETA] = eta
        headers["eta"] = None
    properties = publishable(m.properties)  # entries stored by older versions may hold publish arguments
    properties.pop("expiration", None)
    return headers, properties, expiration_of(m, now)


def expiration_of(m: StoredMessage, now: float | None = None) -> float | None:
    """The TTL ``m`` is published with (seconds): what is left until its ``expires`` header, else
    its stored ``expiration`` property, else None."""
    expiration = m.properties.get("expiration")
    expires = m.headers.get("expires")
    if expires:
        left = expires_in(expires, time.time() if now is None else now)
        if left is not None:
            expiration = left
    return None if expiration is None else float(expiration)


def expires_in(expires: Any, now: float) -> float | None:
    """Seconds left until an ``expires`` header (ISO 8601 or a datetime), at least 0; None when it
    cannot be read (the worker then decides, as it would for a message Celery sent)."""
    try:
        at = eta_ms(expires) if isinstance(expires, (str, datetime)) else None
    except (TypeError, ValueError):
        return None
    return None if at is None else max(0.0, at / 1000.0 - now)


def kombu_expiration(seconds: float) -> str:
    """The ``expiration`` property as ``Producer.publish`` writes it (milliseconds, as text)."""
    return str(int(seconds * 1000))


def values_of(keys: Sequence[str]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]] | None:
    """A getter of these keys' values, as a tuple, for a template's per-message values (None for
    no keys); ``itemgetter`` alone returns a bare value for one key."""
    if not keys:
        return None
    if len(keys) == 1:
        (key,) = keys
        return lambda d: (d[key],)
    return itemgetter(*keys)

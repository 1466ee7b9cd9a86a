"""A permission the store's Redis user lacks: a configuration problem, reported as one.

An ACL user without a command, key or channel gets ``NOPERM`` for it every time: retried as an
outage it would be logged several times a second for as long as the process runs. The process
goes on with what it may do, and :func:`report_refused` logs the cause with the rule that would
grant it, at most once a minute for the same cause.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from ..model.logs import describe, log_event

#: The same cause is logged again at most this often (seconds).
REPEAT_AFTER_S = 60.0

_last: dict[str, float] = {}
_lock = threading.Lock()


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a permission (``NOPERM``)."""
    return isinstance(exc, redis.exceptions.NoPermissionError)


def report_refused(what: str, grant: str, exc: BaseException, instead: str) -> None:
    """Log that ``what`` was refused, the ACL rule that would grant it, and what the process does
    ``instead``; once a minute at most for the same ``what``."""
    now = time.monotonic()
    with _lock:
        last = _last.get(what)
        if last is not None and now - last < REPEAT_AFTER_S:
            return
        _last[what] = now
    log_event(logging.WARNING, "config.refused", what=what, grant=grant, instead=instead, error=describe(exc))

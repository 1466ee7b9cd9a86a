"""What differs between the Celery versions the plugin supports (5.4 to 5.7), read in one place.

Each function gives what the running Celery does, so a message the plugin builds is the one that
Celery's own ``apply_async`` would send on that version.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from celery.app.defaults import DEFAULTS
from celery.utils import time as celery_time

#: How deep ``argsrepr``/``kwargsrepr`` go: Celery's ``saferepr`` default, and the default of the
#: ``task_repr_maxlevels`` setting that Celery 5.7 added (older versions always use it).
REPR_LEVELS = 3
#: Whether this Celery reads ``task_repr_maxlevels`` (before 5.7 the setting does nothing).
READS_REPR_MAXLEVELS = "task_repr_maxlevels" in DEFAULTS


def repr_levels(app: Any) -> Any:
    """The nesting depth Celery's ``as_task_v2`` gives ``saferepr`` for this app's messages."""
    return levels_of(app.conf.get("task_repr_maxlevels"))


def levels_of(setting: Any) -> Any:
    """The depth a ``task_repr_maxlevels`` value gives ``saferepr`` on this Celery (unset, or a
    Celery that ignores it: the default), passed on as Celery passes it."""
    return setting if READS_REPR_MAXLEVELS and setting is not None else REPR_LEVELS


def _wall_clock_after(dt: datetime, seconds: float) -> datetime:
    return dt + timedelta(seconds=seconds)


#: ``now`` plus a countdown as this Celery's ``as_task_v2`` adds it: Celery 5.7 adds an aware time
#: in UTC (a countdown over a DST change is still that many seconds); before, on the wall clock.
seconds_after: Callable[[datetime, float], datetime] = getattr(
    celery_time, "add_seconds_to_datetime", _wall_clock_after)

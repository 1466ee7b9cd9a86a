"""What differs between the Celery versions the plugin supports (5.4 to 5.7), read in one place.

Each function gives what the running Celery does, so a message the plugin builds is the one that
Celery's own ``apply_async`` would send on that version. Where Celery or Kombu keep such a step in
a private method, a copy of it made of public names stands here; the two private tables the
``apply_async`` lane reads are checked once (:data:`LANE`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from celery.app.defaults import DEFAULTS
from celery.app.utils import Settings as CelerySettings
from celery.utils import time as celery_time
from kombu import exceptions as kombu_exceptions
from kombu.serialization import registry
from kombu.utils import json as kombu_json

from ...model.internals import Internal, register, usable

#: The smallest countdown Celery accepts (``celery.app.amqp.INT_MIN``, the same in 5.4 to 5.7).
INT_MIN = -2147483648

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


def verify_seconds(seconds: Any, what: str) -> Any:
    """Celery's check of a countdown (``AMQP._verify_seconds``): the same error for the same value."""
    if seconds < INT_MIN:
        raise ValueError(f"{what} is out of range: {seconds!r}")
    return seconds


@contextmanager
def library_errors(connection: Any) -> Iterator[None]:
    """A transport's recoverable errors re-raised as Kombu's ``OperationalError``, as
    ``send_task`` does around its publish (Kombu's ``Connection._reraise_as_library_errors``)."""
    try:
        yield
    except kombu_exceptions.OperationalError:
        raise
    except connection.recoverable_connection_errors as exc:
        raise kombu_exceptions.OperationalError(str(exc)) from exc
    except connection.recoverable_channel_errors as exc:
        raise kombu_exceptions.OperationalError(str(exc)) from exc


def json_codec(name: str | None) -> tuple[Any, ...] | None:
    """Kombu's registered codec ``(content_type, content_encoding, encoder)`` for a serializer
    name, when the :data:`LANE` check passed (else None: the caller takes Celery's path)."""
    if not usable(LANE):
        return None
    codec: tuple[Any, ...] | None = registry._encoders.get(name)
    return codec


def _lane_differs() -> str | None:
    codecs = getattr(registry, "_encoders", None)
    if not isinstance(codecs, dict):
        return "kombu.serialization.registry has no _encoders table"
    codec = codecs.get("json")
    if not (isinstance(codec, tuple) and len(codec) == 3 and codec[2] is kombu_json.dumps):
        return f"Kombu's json codec is {codec!r}, not (content_type, content_encoding, json.dumps)"
    to_keys = getattr(CelerySettings, "_to_keys", None)
    if not callable(to_keys):
        return "celery.app.utils.Settings has no _to_keys"
    keys = to_keys(CelerySettings({}, [{}]), "task_serializer")
    if "task_serializer" not in keys:
        return f"Settings._to_keys('task_serializer') gives {keys!r}"
    return None


LANE = register(Internal(
    "the apply_async lane and schedule_many's template encoder",
    ("kombu.serialization.SerializerRegistry._encoders", "celery.app.utils.Settings._to_keys"),
    "every timed apply_async and schedule_many call builds its message through Celery's send_task "
    "and Kombu's serializer (docs/design.md#private-internals)",
    _lane_differs,
))

"""Periodic entries (the highly available beat replacement): data and pure rules.

Their checks: :mod:`.periodic_checks`; their JSON form: :mod:`.periodic_json`.

Nothing here computes a schedule (that needs Celery's parsers, see
:mod:`celery_zset_scheduler.celery.periodic.schedules`); this module holds what every host must agree on
without talking to the others.

Time
    Every instant is an ``int`` of milliseconds since the Unix epoch (UTC). Datetimes inside an
    entry (``expires``, ``start_time``, ``end_time``, a clocked schedule's ``at``) are aware ISO 8601
    strings, so the JSON form never depends on a host's local time zone.

Occurrences
    The schedule spec (``entry.schedule``) defines the *fire times* of an entry. The occurrence at
    fire time ``t`` has the Celery task id ``occurrence_id(name, t)`` on every host, so two leaders
    racing over one occurrence publish one task id (the store deduplicates on it). It is due at
    ``t + jitter_ms(name, t, jitter)``; the jitter moves the dispatch, never the identity.

Bounds (:func:`within_bounds`)
    An occurrence exists only if ``start_time <= t``, ``t <= end_time`` and ``t < expires``. As in
    django-celery-beat, ``expires`` both ends the schedule and is the message's Celery ``expires``;
    ``expire_seconds`` only sets the message's ``expires`` (seconds after publishing, as Celery's
    ``apply_async(expires=<seconds>)``); ``end_time`` only ends the schedule. A ``one_off`` entry fires
    at most once: once ``total_run_count >= 1`` it has no further occurrence.

Enable / disable
    A disabled entry has no occurrences at all: its ``next_run_ms`` is ``None`` and nothing that
    fell due while it was disabled is ever caught up. Enabling it again starts after the instant it
    is enabled: ``next_run_ms`` becomes the first occurrence strictly after that instant (for an
    interval without ``start_time``, one interval after it, as Celery beat does for a new entry).
    ``last_run_ms`` and ``total_run_count`` survive a disable (django-celery-beat resets its
    ``last_run_at``; we keep history and rely on ``next_run_ms`` instead).

Pause / resume
    Pausing is an operator's "hold": the entry stays enabled, its ``next_run_ms`` is frozen, nothing
    fires, and ``pause_note`` says why. Resuming treats everything from the frozen ``next_run_ms`` up
    to now as *missed* and applies the entry's catch-up policy to it (:func:`plan_catchup`), then
    continues with the first occurrence strictly after now. So the difference between the two:
    disable forgets, pause remembers.

Catch-up (:func:`plan_catchup`)
    Occurrences missed while no dispatcher ran (an outage, a failover gap) or while paused:
    ``skip`` fires none, ``once`` fires the latest one, ``all`` fires each one (oldest first, at
    most :data:`MAX_CATCHUP`, the most recent ones). Only occurrences at or after
    ``now - catchup_window`` qualify. The default window, :data:`DEFAULT_CATCHUP_WINDOW`, is
    ``None``: no age limit, which is what Celery beat (and RedBeat, django-celery-beat) do without
    ``beat_cron_starting_deadline``, so a migrated entry behaves as before. Whatever is not caught
    up still counts as passed: the schedule continues after now and never fires it later.

Overlap (:func:`plan_overlap`)
    What to do with an occurrence while the task of an earlier occurrence is still running:
    ``allow`` fires it anyway; ``skip`` drops it; ``buffer_one`` keeps it and fires it when the
    running one finishes, keeping at most one buffered (a later one while one is buffered is
    dropped, the buffered one stays: it is the older promise).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal, get_args

from ..errors import ConfigurationError

__all__ = [
    "CATCHUP_POLICIES",
    "DEFAULT_CATCHUP_WINDOW",
    "MAX_CATCHUP",
    "MAX_NAME_LENGTH",
    "OCCURRENCE_NAMESPACE",
    "OVERLAP_POLICIES",
    "REFUSED_OPTIONS",
    "SCHEDULE_TYPES",
    "SOLAR_EVENTS",
    "CatchupPolicy",
    "OverlapDecision",
    "OverlapPolicy",
    "PeriodicEntry",
    "PeriodicEntryError",
    "PeriodicState",
    "after_fire",
    "disabled_state",
    "iso_to_ms",
    "jitter_ms",
    "ms_to_iso",
    "occurrence_id",
    "plan_catchup",
    "plan_overlap",
    "within_bounds",
]

CatchupPolicy = Literal["skip", "once", "all"]
OverlapPolicy = Literal["allow", "skip", "buffer_one"]
OverlapDecision = Literal["fire", "skip", "buffer"]

CATCHUP_POLICIES: tuple[str, ...] = get_args(CatchupPolicy)
OVERLAP_POLICIES: tuple[str, ...] = get_args(OverlapPolicy)

#: No age limit on catch-up by default: Celery beat's own behaviour without a starting deadline.
DEFAULT_CATCHUP_WINDOW: float | None = None

#: ``catchup="all"`` fires at most this many occurrences (the most recent ones), so a long outage
#: of an every-second entry cannot flood the queue.
MAX_CATCHUP = 1000

#: django-celery-beat's ``PeriodicTask.name`` is 200 characters; RedBeat names are keys, so a
#: little more room for them.
MAX_NAME_LENGTH = 1000

#: Fixed forever: changing it changes every occurrence's task id.
OCCURRENCE_NAMESPACE = uuid.UUID("6b1f1d63-2c4e-5a8e-9d3b-6f0c1f6e7a21")

SCHEDULE_TYPES = ("interval", "crontab", "solar", "clocked")

#: Celery's ``solar`` events (``celery.schedules.solar._all_events``), repeated here to stay pure.
SOLAR_EVENTS = (
    "dawn_astronomical", "dawn_nautical", "dawn_civil", "sunrise", "solar_noon",
    "sunset", "dusk_civil", "dusk_nautical", "dusk_astronomical",
)

#: ``apply_async`` options an entry cannot carry in ``options``: the timing is the schedule's,
#: the id the occurrence's, callbacks are not JSON, and the others have fields of their own.
REFUSED_OPTIONS = (
    "countdown", "eta", "task_id", "link", "link_error", "producer", "connection", "router", "add_to_parent",
    "queue", "exchange", "routing_key", "priority", "headers", "expires",
)


class PeriodicEntryError(ConfigurationError):
    """A periodic entry (or its JSON form) is invalid; ``field`` names the offending field."""

    def __init__(self, message: str, field: str | None = None, name: str | None = None) -> None:
        where = f"periodic entry {name!r}: " if name else "periodic entry: "
        where += f"field {field!r}: " if field else ""
        super().__init__(where + message)
        self.reason = message
        self.field = field
        self.name = name


@dataclass(frozen=True, kw_only=True)
class PeriodicEntry:
    """One periodic entry: django-celery-beat's ``PeriodicTask`` fields plus our policies.

    Frozen: replace fields with :func:`dataclasses.replace`. The containers (``args``, ``kwargs``,
    ``headers``, ``schedule``) are not deep-copied; do not mutate them after construction.
    """

    name: str
    task: str
    #: A schedule spec, see :func:`~.periodic_checks.normalize_schedule` for the forms.
    schedule: dict[str, Any]
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    exchange: str | None = None
    routing_key: str | None = None
    priority: int | None = None
    headers: dict[str, Any] = field(default_factory=dict)
    #: Other ``apply_async`` options (``serializer``, ``soft_time_limit``...), JSON values, given to
    #: Celery as they are when the entry's message is built; see :data:`REFUSED_OPTIONS`.
    options: dict[str, Any] = field(default_factory=dict)
    expires: str | None = None
    expire_seconds: float | None = None
    one_off: bool = False
    start_time: str | None = None
    end_time: str | None = None
    enabled: bool = True
    description: str = ""
    catchup: CatchupPolicy = "once"
    catchup_window: float | None = DEFAULT_CATCHUP_WINDOW
    overlap: OverlapPolicy = "allow"
    jitter: float = 0.0
    paused: bool = False
    pause_note: str = ""


@dataclass(frozen=True, kw_only=True)
class PeriodicState:
    """What the dispatchers know about an entry's progress (kept apart from its definition)."""

    next_run_ms: int | None = None
    last_run_ms: int | None = None
    total_run_count: int = 0
    last_task_id: str | None = None
    #: ``overlap="buffer_one"``: the fire time of the occurrence waiting for the running one to end.
    buffered_ms: int | None = None
    #: Bumped by every change of the definition, so a leader's plan made from an older definition
    #: no longer matches the stored state and is refused (compare-and-set on the state's JSON).
    revision: int = 0


# -- time -------------------------------------------------------------------------------------------

def parse_aware(value: str) -> datetime:
    # Python 3.10's fromisoformat does not take a trailing "Z".
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("has no UTC offset (naive datetimes are ambiguous across hosts)")
    return dt


def iso_to_ms(value: str) -> int:
    """Milliseconds since the epoch of an aware ISO 8601 string (a naive one raises ``ValueError``)."""
    dt = parse_aware(value)
    delta = dt.astimezone(timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def ms_to_iso(ms: int) -> str:
    """The UTC ISO 8601 form of an instant, with milliseconds only when there are any."""
    dt = datetime.fromtimestamp(ms // 1000, tz=timezone.utc).replace(microsecond=(ms % 1000) * 1000)
    return dt.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")


# -- identity and jitter ----------------------------------------------------------------------------

def _check_fire_ms(fire_ms: int) -> None:
    if isinstance(fire_ms, bool) or not isinstance(fire_ms, int):
        raise TypeError(f"fire_ms must be an int of milliseconds, not {type(fire_ms).__name__}")


def occurrence_id(name: str, fire_ms: int) -> str:
    """The Celery task id of the occurrence of ``name`` at ``fire_ms``: a UUID5, the same everywhere.

    The fire time comes first and is all digits, so no two (name, fire time) pairs share a key.
    """
    _check_fire_ms(fire_ms)
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, f"{fire_ms}:{name}"))


def jitter_ms(name: str, fire_ms: int, jitter: float) -> int:
    """A deterministic dispatch offset in ``[0, jitter)`` seconds, in ms, for this occurrence.

    Derived from SHA-256 (not ``hash()``, which is salted per process) so racing leaders agree.
    """
    _check_fire_ms(fire_ms)
    if not math.isfinite(jitter) or jitter < 0:
        raise ValueError(f"jitter must be a finite number of seconds >= 0, not {jitter!r}")
    span = int(jitter * 1000)
    if span <= 0:
        return 0
    digest = hashlib.sha256(f"jitter:{fire_ms}:{name}".encode()).digest()
    # 64 bits modulo a span of at most ~1e12 ms: the bias is below 1e-7.
    return int.from_bytes(digest[:8], "big") % span


# -- catch-up and overlap ---------------------------------------------------------------------------

def plan_catchup(missed: Sequence[int], now_ms: int, policy: CatchupPolicy,
                 window: float | None = DEFAULT_CATCHUP_WINDOW) -> list[int]:
    """Which of the ``missed`` fire times (strictly ascending ms) to fire now.

    Fire times after ``now_ms`` are not missed yet and are ignored. With a ``window`` (seconds),
    fire times before ``now_ms - window`` are too old and are not caught up (exactly at the edge
    still is). ``skip``: none; ``once``: the latest qualifying one; ``all``: every qualifying one,
    oldest first, at most :data:`MAX_CATCHUP` (the most recent).
    """
    if policy not in CATCHUP_POLICIES:
        raise ValueError(f"catch-up policy must be one of {', '.join(CATCHUP_POLICIES)}, not {policy!r}")
    if window is not None and (not math.isfinite(window) or window <= 0):
        raise ValueError(f"catch-up window must be a finite number of seconds > 0 or None, not {window!r}")
    for earlier, later in itertools.pairwise(missed):
        if later <= earlier:
            raise ValueError("missed fire times must be strictly ascending")
    if policy == "skip":
        return []
    oldest = None if window is None else now_ms - int(window * 1000)
    qualifying = [t for t in missed if t <= now_ms and (oldest is None or t >= oldest)]
    if policy == "once":
        return qualifying[-1:]
    return qualifying[-MAX_CATCHUP:]


def plan_overlap(policy: OverlapPolicy, previous_running: bool, buffered: bool) -> OverlapDecision:
    """What to do with a due occurrence given whether an earlier one still runs or is buffered."""
    if policy not in OVERLAP_POLICIES:
        raise ValueError(f"overlap policy must be one of {', '.join(OVERLAP_POLICIES)}, not {policy!r}")
    if policy == "allow" or not previous_running:
        return "fire"
    if policy == "skip" or buffered:
        return "skip"
    return "buffer"


# -- bounds and state -------------------------------------------------------------------------------

def within_bounds(entry: PeriodicEntry, fire_ms: int) -> bool:
    """Whether an occurrence at ``fire_ms`` lies within ``start_time``, ``end_time`` and ``expires``."""
    if entry.start_time is not None and fire_ms < iso_to_ms(entry.start_time):
        return False
    if entry.end_time is not None and fire_ms > iso_to_ms(entry.end_time):
        return False
    return entry.expires is None or fire_ms < iso_to_ms(entry.expires)


def disabled_state(state: PeriodicState) -> PeriodicState:
    """The state of an entry just disabled: no next run, history kept."""
    return replace(state, next_run_ms=None)


def after_fire(state: PeriodicState, name: str, fire_ms: int, next_run_ms: int | None,
               task_id: str | None = None) -> PeriodicState:
    """The state after the occurrence at ``fire_ms`` (id ``task_id``, computed when not given) was
    stored (``last_run_ms`` never goes back)."""
    last = fire_ms if state.last_run_ms is None else max(state.last_run_ms, fire_ms)
    return PeriodicState(next_run_ms=next_run_ms, last_run_ms=last, total_run_count=state.total_run_count + 1,
                         last_task_id=task_id or occurrence_id(name, fire_ms), buffered_ms=state.buffered_ms,
                         revision=state.revision)

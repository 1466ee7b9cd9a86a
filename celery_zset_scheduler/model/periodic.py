"""Periodic entries (the highly available beat replacement): data, JSON codec and pure rules.

Nothing here computes a schedule (that needs Celery's parsers, see
:mod:`celery_zset_scheduler.celery.schedules`); this module holds what every host must agree on
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
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from typing import Any, Literal, TypeGuard, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import ConfigurationError

__all__ = [
    "CATCHUP_POLICIES",
    "DEFAULT_CATCHUP_WINDOW",
    "ENTRY_FORMAT_VERSION",
    "MAX_CATCHUP",
    "MAX_NAME_LENGTH",
    "OCCURRENCE_NAMESPACE",
    "OVERLAP_POLICIES",
    "PLAN_FIELDS",
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
    "entry_from_json",
    "entry_to_json",
    "iso_to_ms",
    "jitter_ms",
    "join_entry",
    "ms_to_iso",
    "normalize_schedule",
    "occurrence_id",
    "plan_catchup",
    "plan_overlap",
    "split_entry",
    "state_from_json",
    "state_to_json",
    "validate",
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

#: Version of the JSON form written by :func:`entry_to_json` (key ``"v"``).
ENTRY_FORMAT_VERSION = 1
STATE_FORMAT_VERSION = 1

#: Fixed forever: changing it changes every occurrence's task id.
OCCURRENCE_NAMESPACE = uuid.UUID("6b1f1d63-2c4e-5a8e-9d3b-6f0c1f6e7a21")

SCHEDULE_TYPES = ("interval", "crontab", "solar", "clocked")

#: Celery's ``solar`` events (``celery.schedules.solar._all_events``), repeated here to stay pure.
SOLAR_EVENTS = (
    "dawn_astronomical", "dawn_nautical", "dawn_civil", "sunrise", "solar_noon",
    "sunset", "dusk_civil", "dusk_nautical", "dusk_astronomical",
)

_CRON_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")

#: ``apply_async`` options an entry cannot carry in ``options``: the timing is the schedule's,
#: the id the occurrence's, callbacks are not JSON, and the others have fields of their own.
REFUSED_OPTIONS = (
    "countdown", "eta", "task_id", "link", "link_error", "producer", "connection", "router", "add_to_parent",
    "queue", "exchange", "routing_key", "priority", "headers", "expires",
)

#: Smallest interval: one millisecond, the resolution of every instant here.
_MIN_EVERY = 0.001


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
    #: A schedule spec, see :func:`normalize_schedule` for the forms.
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

def _parse_aware(value: str) -> datetime:
    # Python 3.10's fromisoformat does not take a trailing "Z".
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("has no UTC offset (naive datetimes are ambiguous across hosts)")
    return dt


def iso_to_ms(value: str) -> int:
    """Milliseconds since the epoch of an aware ISO 8601 string (a naive one raises ``ValueError``)."""
    dt = _parse_aware(value)
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


# -- validation -------------------------------------------------------------------------------------

def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _require_aware_iso(value: Any, field_name: str, name: str | None) -> None:
    if not isinstance(value, str):
        raise PeriodicEntryError(f"must be an aware ISO 8601 string, not {type(value).__name__}", field_name, name)
    try:
        _parse_aware(value)
    except ValueError as exc:
        raise PeriodicEntryError(f"{value!r} is not an aware ISO 8601 datetime: {exc}", field_name, name) from None


def normalize_schedule(spec: Any, name: str | None = None) -> dict[str, Any]:
    """Check a schedule spec's shape and return it with defaults filled in. Forms:

    - ``{"type": "interval", "every": <seconds > 0>, "relative": <bool, default false>}``
    - ``{"type": "crontab", "minute": "*", "hour": "*", "day_of_week": "*", "day_of_month": "*",
      "month_of_year": "*", "timezone": <IANA name or null for the app's>}`` (fields default to ``"*"``)
    - ``{"type": "solar", "event": <one of SOLAR_EVENTS>, "latitude": <-90..90>, "longitude": <-180..180>}``
    - ``{"type": "clocked", "at": <aware ISO 8601>}``

    Only the shape: the crontab fields' syntax is Celery's and is checked by
    :func:`celery_zset_scheduler.celery.schedules.validate_spec`.
    """
    def fail(message: str, key: str | None = None) -> PeriodicEntryError:
        return PeriodicEntryError(message, "schedule" + (f".{key}" if key else ""), name)

    if not isinstance(spec, Mapping):
        raise fail(f"must be a schedule spec object, not {type(spec).__name__}")
    kind = spec.get("type")
    if kind not in SCHEDULE_TYPES:
        raise fail(f"type must be one of {', '.join(SCHEDULE_TYPES)}, not {kind!r}", "type")
    allowed = {"interval": ("every", "relative"), "crontab": (*_CRON_FIELDS, "timezone"),
               "solar": ("event", "latitude", "longitude"), "clocked": ("at",)}[kind]
    unknown = sorted(set(spec) - {"type", *allowed})
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} for a {kind} schedule (allowed: {', '.join(allowed)})", unknown[0])
    out: dict[str, Any] = {"type": kind}
    if kind == "interval":
        every = spec.get("every")
        if not _is_number(every) or not math.isfinite(every) or every < _MIN_EVERY:
            raise fail(f"must be a number of seconds >= {_MIN_EVERY}, not {every!r}", "every")
        relative = spec.get("relative", False)
        if not isinstance(relative, bool):
            raise fail(f"must be true or false, not {relative!r}", "relative")
        out.update(every=float(every), relative=relative)
    elif kind == "crontab":
        for key in _CRON_FIELDS:
            value = spec.get(key, "*")
            if not isinstance(value, str) or not value.strip():
                raise fail(f"must be a non-empty crontab field string, not {value!r}", key)
            out[key] = value
        tz = spec.get("timezone")
        if tz is not None:
            if not isinstance(tz, str):
                raise fail(f"must be an IANA time zone name or null, not {tz!r}", "timezone")
            try:
                ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError):
                raise fail(f"unknown time zone {tz!r}", "timezone") from None
        out["timezone"] = tz
    elif kind == "solar":
        event = spec.get("event")
        if event not in SOLAR_EVENTS:
            raise fail(f"must be one of {', '.join(SOLAR_EVENTS)}, not {event!r}", "event")
        for key, limit in (("latitude", 90), ("longitude", 180)):
            value = spec.get(key)
            if not _is_number(value) or not math.isfinite(value) or not -limit <= value <= limit:
                raise fail(f"must be a number in [-{limit}, {limit}], not {value!r}", key)
            out[key] = float(value)
        out["event"] = event
    else:
        at = spec.get("at")
        if not isinstance(at, str):
            raise fail(f"must be an aware ISO 8601 string, not {at!r}", "at")
        try:
            _parse_aware(at)
        except ValueError as exc:
            raise fail(f"{at!r} is not an aware ISO 8601 datetime: {exc}", "at") from None
        out["at"] = at
    return out


def _check_json_value(value: Any, field_name: str, name: str | None) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PeriodicEntryError(f"is not JSON-serializable: {exc}", field_name, name) from None


def _check_str_keys(value: dict[str, Any], field_name: str, name: str | None) -> None:
    for key in value:
        if not isinstance(key, str):
            raise PeriodicEntryError(f"keys must be strings, not {key!r}", field_name, name)


def validate(entry: PeriodicEntry) -> None:
    """Raise :class:`PeriodicEntryError` (a ``ConfigurationError``) naming the first invalid field.

    Names: non-empty, at most :data:`MAX_NAME_LENGTH` characters, no ``{``/``}`` (Redis Cluster
    hash tags: a name goes into keys, and a brace would move it to another slot) and no control
    characters (they break logs and the CLI).
    """
    name = entry.name
    if not isinstance(name, str) or not name:
        raise PeriodicEntryError(f"must be a non-empty string, not {name!r}", "name")
    if len(name) > MAX_NAME_LENGTH:
        raise PeriodicEntryError(f"is longer than {MAX_NAME_LENGTH} characters", "name", name[:40] + "...")
    if "{" in name or "}" in name:
        raise PeriodicEntryError("must not contain '{' or '}' (Redis Cluster hash tags)", "name", name)
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise PeriodicEntryError("must not contain control characters", "name", name)
    if not isinstance(entry.task, str) or not entry.task.strip():
        raise PeriodicEntryError("must be a non-empty task name", "task", name)
    normalize_schedule(entry.schedule, name)
    if not isinstance(entry.args, list):
        raise PeriodicEntryError(f"must be a list, not {type(entry.args).__name__}", "args", name)
    _check_json_value(entry.args, "args", name)
    for key in ("kwargs", "headers", "options"):
        value = getattr(entry, key)
        if not isinstance(value, dict):
            raise PeriodicEntryError(f"must be a dict, not {type(value).__name__}", key, name)
        _check_str_keys(value, key, name)
        _check_json_value(value, key, name)
    refused = sorted(set(entry.options) & set(REFUSED_OPTIONS))
    if refused:
        raise PeriodicEntryError(f"{refused[0]!r} cannot be an option of a periodic entry (its timing and id are "
                                 "the schedule's; queue, exchange, routing_key, priority, headers and expires "
                                 "are fields)", "options", name)
    for key in ("queue", "exchange", "routing_key"):
        value = getattr(entry, key)
        if value is not None and (not isinstance(value, str) or not value):
            raise PeriodicEntryError(f"must be a non-empty string or None, not {value!r}", key, name)
    if entry.priority is not None and (
            isinstance(entry.priority, bool) or not isinstance(entry.priority, int) or not 0 <= entry.priority <= 255):
        raise PeriodicEntryError(f"must be an int in [0, 255] or None, not {entry.priority!r}", "priority", name)
    for key in ("expires", "start_time", "end_time"):
        value = getattr(entry, key)
        if value is not None:
            _require_aware_iso(value, key, name)
    if entry.expire_seconds is not None and (
            not _is_number(entry.expire_seconds) or not math.isfinite(entry.expire_seconds)
            or entry.expire_seconds < 0):
        raise PeriodicEntryError(f"must be a number >= 0 or None, not {entry.expire_seconds!r}",
                                 "expire_seconds", name)
    if entry.expires is not None and entry.expire_seconds is not None:
        # django-celery-beat refuses both too: which one would win is not obvious.
        raise PeriodicEntryError("set at most one of expires and expire_seconds", "expire_seconds", name)
    if entry.start_time is not None and entry.end_time is not None and \
            iso_to_ms(entry.end_time) < iso_to_ms(entry.start_time):
        raise PeriodicEntryError("is before start_time", "end_time", name)
    for key in ("one_off", "enabled", "paused"):
        if not isinstance(getattr(entry, key), bool):
            raise PeriodicEntryError(f"must be true or false, not {getattr(entry, key)!r}", key, name)
    for key in ("description", "pause_note"):
        if not isinstance(getattr(entry, key), str):
            raise PeriodicEntryError("must be a string", key, name)
    if entry.catchup not in CATCHUP_POLICIES:
        raise PeriodicEntryError(f"must be one of {', '.join(CATCHUP_POLICIES)}, not {entry.catchup!r}",
                                 "catchup", name)
    window = entry.catchup_window
    if window is not None and (not _is_number(window) or not math.isfinite(window) or window <= 0):
        raise PeriodicEntryError(f"must be a number of seconds > 0 or None, not {window!r}", "catchup_window", name)
    if entry.overlap not in OVERLAP_POLICIES:
        raise PeriodicEntryError(f"must be one of {', '.join(OVERLAP_POLICIES)}, not {entry.overlap!r}",
                                 "overlap", name)
    if not _is_number(entry.jitter) or not math.isfinite(entry.jitter) or entry.jitter < 0:
        raise PeriodicEntryError(f"must be a number of seconds >= 0, not {entry.jitter!r}", "jitter", name)


# -- JSON codec -------------------------------------------------------------------------------------

_ENTRY_FIELDS = tuple(f.name for f in fields(PeriodicEntry))
_REQUIRED = ("name", "task", "schedule")
_FLOAT_FIELDS = ("expire_seconds", "catchup_window", "jitter")


# One encoder, made once (json.dumps with options makes a new one per call: a third of the cost).
_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)


def _dumps(obj: Any) -> str:
    # Sorted keys and no spaces: the same entry is always the same bytes (cheap change detection).
    return _ENCODER.encode(obj)


def _loads_object(data: str | bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PeriodicEntryError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise PeriodicEntryError(f"{what} must be a JSON object, not {type(obj).__name__}")
    return obj


def _check_version(obj: dict[str, Any], expected: int, what: str) -> None:
    version = obj.pop("v", None)
    if version != expected:
        raise PeriodicEntryError(f"unsupported {what} format version {version!r} (this code reads {expected})", "v")


_ENTRY_DEFAULTS = {f.name: (f.default_factory() if callable(f.default_factory) else f.default)
                   for f in fields(PeriodicEntry) if f.name not in _REQUIRED}


def entry_to_json(entry: PeriodicEntry, *, defaults: bool = True) -> str:
    """The compact, stable, versioned JSON of a valid entry. With ``defaults`` every field is
    written; without, the fields equal to their default are left out (the store's form: a third
    of the bytes; the defaults are those of format version ``v``, so changing one means a new
    version that still reads the old)."""
    validate(entry)
    obj: dict[str, Any] = {name: getattr(entry, name) for name in _ENTRY_FIELDS
                           if defaults or name in _REQUIRED or getattr(entry, name) != _ENTRY_DEFAULTS[name]}
    obj["schedule"] = normalize_schedule(entry.schedule, entry.name)
    obj["v"] = ENTRY_FORMAT_VERSION
    return _dumps(obj)


#: The fields that decide when an entry fires. The store keeps them apart from the rest of the
#: definition, so that entries sharing a schedule and policies share the same bytes and a leader
#: planning 100,000 of them parses them once.
PLAN_FIELDS = ("schedule", "start_time", "end_time", "expires", "expire_seconds", "one_off", "enabled", "paused",
               "catchup", "catchup_window", "overlap", "jitter")


def split_entry(entry: PeriodicEntry) -> tuple[str, str]:
    """``(plan, rest)``: the compact JSON of the :data:`PLAN_FIELDS` and of the other fields of a
    valid entry (fields equal to their default left out); :func:`join_entry` puts them together."""
    full = json.loads(entry_to_json(entry, defaults=False))
    plan = {key: full.pop(key) for key in PLAN_FIELDS if key in full}
    plan["v"] = full["v"]
    return _dumps(plan), _dumps(full)


def join_entry(plan: str | bytes, rest: str | bytes) -> PeriodicEntry:
    """The entry of :func:`split_entry`'s two parts, validated as :func:`entry_from_json` does."""
    plan_obj, rest_obj = _loads_object(plan, "entry plan"), _loads_object(rest, "entry")
    if plan_obj.get("v") != rest_obj.get("v"):
        raise PeriodicEntryError("the entry's plan and definition are of different format versions", "v")
    return entry_from_json(_dumps({**rest_obj, **plan_obj}))


def entry_from_json(data: str | bytes) -> PeriodicEntry:
    """Decode and validate :func:`entry_to_json`'s output; anything else raises :class:`PeriodicEntryError`."""
    obj = _loads_object(data, "entry")
    _check_version(obj, ENTRY_FORMAT_VERSION, "entry")
    raw_name = obj.get("name")
    name = raw_name if isinstance(raw_name, str) else None
    unknown = sorted(set(obj) - set(_ENTRY_FIELDS))
    if unknown:
        raise PeriodicEntryError("unknown field", unknown[0], name)
    for key in _REQUIRED:
        if key not in obj:
            raise PeriodicEntryError("is missing", key, name)
    for key in _FLOAT_FIELDS:
        # JSON has one number type: 30 and 30.0 are the same setting.
        if _is_number(obj.get(key)):
            obj[key] = float(obj[key])
    try:
        entry = PeriodicEntry(**obj)
    except TypeError as exc:  # pragma: no cover - unknown and missing keys are caught above
        raise PeriodicEntryError(str(exc), None, name) from None
    validate(entry)
    return replace(entry, schedule=normalize_schedule(entry.schedule, entry.name))


_STATE_DEFAULTS = {f.name: f.default for f in fields(PeriodicState)}


def state_to_json(state: PeriodicState, *, defaults: bool = True) -> str:
    """Without ``defaults`` (the store's form) the fields equal to their default are left out."""
    obj: dict[str, Any] = {name: getattr(state, name) for name, default in _STATE_DEFAULTS.items()
                           if defaults or getattr(state, name) != default}
    obj["v"] = STATE_FORMAT_VERSION
    return _dumps(obj)


def state_from_json(data: str | bytes) -> PeriodicState:
    obj = _loads_object(data, "state")
    _check_version(obj, STATE_FORMAT_VERSION, "state")
    known = {f.name for f in fields(PeriodicState)}
    unknown = sorted(set(obj) - known)
    if unknown:
        raise PeriodicEntryError("unknown state field", unknown[0])
    for key in ("next_run_ms", "last_run_ms", "buffered_ms"):
        value = obj.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise PeriodicEntryError(f"must be an int of ms or null, not {value!r}", key)
    for key in ("total_run_count", "revision"):
        count = obj.get(key, 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise PeriodicEntryError(f"must be an int >= 0, not {count!r}", key)
    task_id = obj.get("last_task_id")
    if task_id is not None and not isinstance(task_id, str):
        raise PeriodicEntryError(f"must be a string or null, not {task_id!r}", "last_task_id")
    return PeriodicState(**obj)

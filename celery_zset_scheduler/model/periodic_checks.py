"""The checks of a periodic entry and of its schedule spec: what every host must refuse alike."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, TypeGuard
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .periodic import (
    CATCHUP_POLICIES,
    MAX_NAME_LENGTH,
    OVERLAP_POLICIES,
    REFUSED_OPTIONS,
    SCHEDULE_TYPES,
    SOLAR_EVENTS,
    PeriodicEntry,
    PeriodicEntryError,
    iso_to_ms,
    parse_aware,
)

__all__ = ["is_number", "normalize_schedule", "validate"]

_CRON_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")

#: Smallest interval: one millisecond, the resolution of every instant here.
_MIN_EVERY = 0.001


# -- validation -------------------------------------------------------------------------------------

def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _require_aware_iso(value: Any, field_name: str, name: str | None) -> None:
    if not isinstance(value, str):
        raise PeriodicEntryError(f"must be an aware ISO 8601 string, not {type(value).__name__}", field_name, name)
    try:
        parse_aware(value)
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
    :func:`celery_zset_scheduler.celery.periodic.schedules.validate_spec`.
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
        if not is_number(every) or not math.isfinite(every) or every < _MIN_EVERY:
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
            if not is_number(value) or not math.isfinite(value) or not -limit <= value <= limit:
                raise fail(f"must be a number in [-{limit}, {limit}], not {value!r}", key)
            out[key] = float(value)
        out["event"] = event
    else:
        at = spec.get("at")
        if not isinstance(at, str):
            raise fail(f"must be an aware ISO 8601 string, not {at!r}", "at")
        try:
            parse_aware(at)
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
            not is_number(entry.expire_seconds) or not math.isfinite(entry.expire_seconds)
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
    if window is not None and (not is_number(window) or not math.isfinite(window) or window <= 0):
        raise PeriodicEntryError(f"must be a number of seconds > 0 or None, not {window!r}", "catchup_window", name)
    if entry.overlap not in OVERLAP_POLICIES:
        raise PeriodicEntryError(f"must be one of {', '.join(OVERLAP_POLICIES)}, not {entry.overlap!r}",
                                 "overlap", name)
    if not is_number(entry.jitter) or not math.isfinite(entry.jitter) or entry.jitter < 0:
        raise PeriodicEntryError(f"must be a number of seconds >= 0, not {entry.jitter!r}", "jitter", name)

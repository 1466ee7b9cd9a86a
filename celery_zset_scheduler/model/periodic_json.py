"""The JSON form of periodic entries and states: compact, stable (the same entry is the same
bytes) and versioned."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from typing import Any

from .periodic import PeriodicEntry, PeriodicEntryError, PeriodicState
from .periodic_checks import is_number, normalize_schedule, validate

__all__ = [
    "ENTRY_FORMAT_VERSION",
    "PLAN_FIELDS",
    "STATE_FORMAT_VERSION",
    "entry_from_json",
    "entry_to_json",
    "join_entry",
    "split_entry",
    "state_from_json",
    "state_to_json",
]

#: Version of the JSON form written by :func:`entry_to_json` (key ``"v"``).
ENTRY_FORMAT_VERSION = 1
STATE_FORMAT_VERSION = 1


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
        if is_number(obj.get(key)):
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

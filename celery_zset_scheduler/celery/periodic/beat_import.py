"""Read the periodic tasks of RedBeat or django-celery-beat as :class:`PeriodicEntry` + :class:`PeriodicState`.

Read only: nothing is written, neither to the source nor to our store. An entry that cannot be
mapped one to one (a schedule class we cannot express, undecodable arguments, an option without a
field) is not guessed at: it goes to :attr:`ImportReport.problems` with the reason.

``next_run_ms`` is left ``None`` in every imported state: the source's due time was computed by
Celery's crontab arithmetic (wrong across DST, see :mod:`.schedules`); ours is derived from the
schedule and ``last_run_ms`` when the entry is installed.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from ...errors import ZSetSchedulerError
from ...model.periodic import PeriodicEntry, PeriodicState, ms_to_iso
from .schedules import SUPPORTED, validate_entry

if TYPE_CHECKING:
    import redis

__all__ = ["ImportReport", "from_django_celery_beat", "from_redbeat"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: django-celery-beat's IntervalSchedule periods, in seconds.
_PERIODS = {"days": 86_400.0, "hours": 3_600.0, "minutes": 60.0, "seconds": 1.0, "microseconds": 1e-6}
_CRON_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
#: RedBeat ``options`` keys that map onto entry fields (``expires`` is handled apart).
_OPTION_FIELDS = ("queue", "exchange", "routing_key", "priority", "headers")


@dataclass
class ImportReport:
    """The entries that could be mapped, and ``(name, why)`` for those that could not."""

    entries: list[tuple[PeriodicEntry, PeriodicState]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)


class _Unmappable(Exception):
    """Why one entry cannot be imported (becomes a problem, never escapes this module)."""


def _ms(dt: datetime) -> int:
    if dt.tzinfo is None or dt.utcoffset() is None:
        dt = dt.replace(tzinfo=timezone.utc)
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else ms_to_iso(_ms(dt))


def _cron_text(value: Any) -> str:
    # RedBeat keeps crontab fields as the user passed them: a str, an int or a list of ints.
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise _Unmappable(f"crontab field {value!r} is not a cron pattern")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return ",".join(str(v) for v in sorted(value))
    raise _Unmappable(f"crontab field {value!r} is not a cron pattern")


def _finish(report: ImportReport, name: str, build: Any) -> None:
    try:
        entry, state = build()
        validate_entry(entry)
    except (_Unmappable, ZSetSchedulerError) as exc:
        report.problems.append((name, str(exc)))
    else:
        report.entries.append((entry, state))


# -- RedBeat ----------------------------------------------------------------------------------------

class _RedBeatSchedule:
    """A decoded ``__type__`` schedule marker (only meaningful as the definition's ``schedule``)."""

    def __init__(self, spec: dict[str, Any] | None, unsupported: str | None = None) -> None:
        self.spec, self.unsupported = spec, unsupported


def _redbeat_hook(obj: dict[str, Any]) -> Any:
    """RedBeat's JSON markers (``redbeat.decoder.RedBeatJSONEncoder``), decoded without importing RedBeat."""
    kind = obj.get("__type__")
    if kind is None:
        return obj
    if kind == "datetime":
        zone = obj.get("timezone", "UTC")
        tz: Any
        if isinstance(zone, (int, float)) and not isinstance(zone, bool):
            tz = timezone(timedelta(seconds=zone))  # an offset in seconds
        else:
            from zoneinfo import ZoneInfo

            tz = ZoneInfo(str(zone))
        return datetime(obj["year"], obj["month"], obj["day"], obj["hour"], obj["minute"], obj["second"],
                        obj["microsecond"], tzinfo=tz)
    if kind == "interval":
        return _RedBeatSchedule({"type": "interval", "every": float(obj["every"]), "relative": bool(obj["relative"])})
    if kind == "crontab":
        try:
            spec: dict[str, Any] = {"type": "crontab", **{key: _cron_text(obj.get(key, "*")) for key in _CRON_FIELDS}}
        except _Unmappable as exc:
            return _RedBeatSchedule(None, str(exc))
        spec["timezone"] = None  # RedBeat stores no zone: the crontab follows the app's
        return _RedBeatSchedule(spec)
    if kind == "rrule":
        return _RedBeatSchedule(None, "RedBeat's rrule schedule has no periodic-entry form; supported: "
                                      "interval, crontab")
    return _RedBeatSchedule(None, f"unknown RedBeat schedule type {kind!r}")


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _redbeat_entry(key: str, name_hint: str, definition_raw: str | None,
                   meta_raw: str | None) -> tuple[PeriodicEntry, PeriodicState]:
    if not definition_raw:
        raise _Unmappable(f"key {key!r} is in the schedule but has no definition")
    try:
        definition = json.loads(definition_raw, object_hook=_redbeat_hook)
        meta = json.loads(meta_raw, object_hook=_redbeat_hook) if meta_raw else {}
    except (ValueError, KeyError, TypeError) as exc:
        raise _Unmappable(f"undecodable RedBeat JSON: {exc}") from None
    if not isinstance(definition, dict) or not isinstance(meta, dict):
        raise _Unmappable("RedBeat definition/meta is not a JSON object")
    sched = definition.get("schedule")
    if not isinstance(sched, _RedBeatSchedule):
        raise _Unmappable(f"schedule {sched!r} is not a RedBeat schedule; supported: {SUPPORTED}")
    if sched.spec is None:
        raise _Unmappable(sched.unsupported or "unsupported schedule")
    options = definition.get("options") or {}
    if not isinstance(options, dict):
        raise _Unmappable(f"options {options!r} is not an object")
    extra = {k: v for k, v in options.items() if k not in (*_OPTION_FIELDS, "expires")}
    expires = options.get("expires")
    args = definition.get("args")
    kwargs = definition.get("kwargs")
    entry = PeriodicEntry(
        name=str(definition.get("name") or name_hint),
        task=definition.get("task") or "",
        schedule=sched.spec,
        args=[] if args is None else args,
        kwargs={} if kwargs is None else kwargs,
        queue=options.get("queue"),
        exchange=options.get("exchange"),
        routing_key=options.get("routing_key"),
        priority=options.get("priority"),
        headers=options.get("headers") or {},
        options=extra,
        expires=_iso(expires) if isinstance(expires, datetime) else None,
        expire_seconds=float(expires) if isinstance(expires, (int, float)) and not isinstance(expires, bool) else None,
        enabled=bool(definition.get("enabled", True)),
    )
    if expires is not None and entry.expires is None and entry.expire_seconds is None:
        raise _Unmappable(f"expires {expires!r} is neither a datetime nor seconds")
    last_run = meta.get("last_run_at")
    count = meta.get("total_run_count", 0)
    state = PeriodicState(last_run_ms=_ms(last_run) if isinstance(last_run, datetime) else None,
                          total_run_count=count if isinstance(count, int) else 0)
    return entry, state


def from_redbeat(client: redis.Redis, key_prefix: str = "redbeat:", page_size: int = 500) -> ImportReport:
    """Read every entry of a RedBeat store.

    ``key_prefix`` is RedBeat's ``redbeat_key_prefix`` setting exactly as configured (its default,
    ``"redbeat:"``, gives entry keys ``redbeat:<name>`` and the schedule ZSET ``redbeat::schedule``).
    The schedule ZSET is read with ZSCAN pages of ``page_size``: a running RedBeat re-scores entries
    as they fire, and an offset-paged ZRANGE over a ZSET that changes can skip members; ZSCAN returns
    every member present for the whole walk (possibly twice: duplicates are dropped). Each page's
    hashes are read in one pipeline. Entries come back sorted by name.
    """
    schedule_key = key_prefix + ":schedule"
    report = ImportReport()
    seen: set[str] = set()
    cursor = 0
    while True:
        cursor, page = client.zscan(schedule_key, cursor=cursor, count=page_size)
        members: list[Any] = [member for member, _score in page]
        keys = [k for k in (_text(member) for member in members) if k is not None and k not in seen]
        seen.update(keys)
        if keys:
            with client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hmget(key, ["definition", "meta"])
                rows = pipe.execute()
            for key, (definition, meta) in zip(keys, rows, strict=True):
                hint = key[len(key_prefix):] if key.startswith(key_prefix) else key
                _finish(report, hint, lambda k=key, h=hint, d=definition, m=meta:
                        _redbeat_entry(k, h, _text(d), _text(m)))
        if cursor == 0:
            break
    report.entries.sort(key=lambda pair: pair[0].name)
    report.problems.sort()
    return report


# -- django-celery-beat -----------------------------------------------------------------------------

def _json_text(value: str | None, default: Any, what: str, expected: type) -> Any:
    if value is None or value == "":
        return default
    try:
        decoded = json.loads(value)
    except ValueError as exc:
        raise _Unmappable(f"undecodable {what} {value!r}: {exc}") from None
    if not isinstance(decoded, expected):
        raise _Unmappable(f"{what} {value!r} is not a JSON {expected.__name__}")
    return decoded


def _aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    # USE_TZ=False: Django stores naive datetimes in its TIME_ZONE (django-celery-beat's make_aware).
    from django.utils import timezone as dj_timezone

    aware: datetime = dj_timezone.make_aware(value, dj_timezone.get_default_timezone())
    return aware


def _django_spec(task: Any) -> dict[str, Any]:
    from django.conf import settings

    chosen = [kind for kind in ("interval", "crontab", "solar", "clocked") if getattr(task, f"{kind}_id") is not None]
    if len(chosen) != 1:
        raise _Unmappable(f"needs exactly one of interval, crontab, solar, clocked; has {chosen or 'none'}")
    kind = chosen[0]
    if kind == "interval":
        interval = task.interval
        if interval.period not in _PERIODS:
            raise _Unmappable(f"unknown interval period {interval.period!r}")
        return {"type": "interval", "every": interval.every * _PERIODS[interval.period], "relative": False}
    if kind == "crontab":
        cron = task.crontab
        spec: dict[str, Any] = {"type": "crontab", **{key: str(getattr(cron, key)) for key in _CRON_FIELDS}}
        # Without DJANGO_CELERY_BEAT_TZ_AWARE the stored zone is ignored and the app's is used.
        tz_aware = getattr(settings, "DJANGO_CELERY_BEAT_TZ_AWARE", True)
        spec["timezone"] = str(getattr(cron.timezone, "key", cron.timezone)) if tz_aware else None
        return spec
    if kind == "solar":
        sol = task.solar
        return {"type": "solar", "event": sol.event, "latitude": float(sol.latitude), "longitude": float(sol.longitude)}
    at = _aware(task.clocked.clocked_time)
    assert at is not None
    return {"type": "clocked", "at": _iso(at)}


def _django_entry(task: Any) -> tuple[PeriodicEntry, PeriodicState]:
    entry = PeriodicEntry(
        name=task.name,
        task=task.task,
        schedule=_django_spec(task),
        args=_json_text(task.args, [], "args", list),
        kwargs=_json_text(task.kwargs, {}, "kwargs", dict),
        queue=task.queue or None,
        exchange=task.exchange or None,
        routing_key=task.routing_key or None,
        priority=task.priority,
        headers=_json_text(task.headers, {}, "headers", dict),
        expires=_iso(_aware(task.expires)),
        expire_seconds=float(task.expire_seconds) if task.expire_seconds is not None else None,
        one_off=bool(task.one_off),
        start_time=_iso(_aware(task.start_time)),
        enabled=bool(task.enabled),
        description=task.description or "",
    )
    last_run = _aware(task.last_run_at)
    state = PeriodicState(last_run_ms=_ms(last_run) if last_run is not None else None,
                          total_run_count=int(task.total_run_count or 0))
    return entry, state


def from_django_celery_beat(chunk_size: int = 500, queryset: Iterable[Any] | None = None) -> ImportReport:
    """Read every ``django_celery_beat.models.PeriodicTask`` (in primary-key order, ``chunk_size`` rows
    a page via ``.iterator(chunk_size=...)``, schedules joined in the same query).

    ``queryset``: a filtered ``PeriodicTask`` queryset to import part of them.
    """
    # Imported by name: django-celery-beat is optional and ships no type information.
    models = importlib.import_module("django_celery_beat.models")
    rows = queryset if queryset is not None else models.PeriodicTask.objects.all()
    if hasattr(rows, "select_related"):
        rows = rows.select_related("interval", "crontab", "solar", "clocked").order_by("pk").iterator(
            chunk_size=chunk_size)
    report = ImportReport()
    for task in rows:
        _finish(report, task.name, lambda t=task: _django_entry(t))
    return report

"""Schedule specs <-> Celery's schedule classes, and their validation.

A *spec* is the JSON form of a schedule kept in :class:`~celery_zset_scheduler.model.periodic.PeriodicEntry`
(forms in :func:`~celery_zset_scheduler.model.periodic_checks.normalize_schedule`). Instants are int ms (UTC).

The fire times of a spec: :mod:`.fire_times` (crontabs: :mod:`.cron`).
"""

from __future__ import annotations

import importlib
from datetime import datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from typing import Any

from celery.schedules import BaseSchedule, crontab, schedstate, schedule, solar

from ...errors import ConfigurationError
from ...model.periodic import PeriodicEntry, PeriodicEntryError, ms_to_iso
from ...model.periodic_checks import normalize_schedule, validate
from .cron import CRON_FIELDS, dt_ms, parse_cron, parse_iso, zone_info

__all__ = [
    "SUPPORTED",
    "ZonedCrontab",
    "clocked",
    "schedule_of",
    "solar_schedule",
    "spec_of",
    "validate_entry",
    "validate_spec",
    "zone_name",
]

Spec = dict[str, Any]

SUPPORTED = ("a number of seconds, datetime.timedelta, celery.schedules.schedule, celery.schedules.crontab "
             "(django-celery-beat's TzAwareCrontab included), celery.schedules.solar, django-celery-beat's clocked")


# -- Celery schedule classes for the two forms Celery has no class of its own for -----------------

class ZonedCrontab(crontab):
    """A ``crontab`` evaluated in its own time zone, whatever the app's (like django-celery-beat's
    ``TzAwareCrontab``, without needing Django)."""

    def __init__(self, minute: Any = "*", hour: Any = "*", day_of_week: Any = "*", day_of_month: Any = "*",
                 month_of_year: Any = "*", tz: tzinfo | None = None, **kwargs: Any) -> None:
        super().__init__(minute=minute, hour=hour, day_of_week=day_of_week, day_of_month=day_of_month,
                         month_of_year=month_of_year, **kwargs)
        if tz is None:
            raise ConfigurationError("ZonedCrontab needs a tz")
        # crontab.tz is a cached property: assigning it pins this crontab's zone.
        self.tz = tz

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self._orig_minute, self._orig_hour, self._orig_day_of_week,
                                 self._orig_day_of_month, self._orig_month_of_year, self.tz), None)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, crontab):
            return bool(super().__eq__(other)) and other.tz == self.tz
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<crontab: {self._orig_minute} {self._orig_hour} {self._orig_day_of_week} " \
               f"{self._orig_day_of_month} {self._orig_month_of_year} (m/h/dw/dM/MY), {self.tz}>"


class clocked(BaseSchedule):  # named like Celery's and django-celery-beat's schedules
    """Run once at ``clocked_time`` (an aware datetime), like django-celery-beat's ``clocked``."""

    def __init__(self, clocked_time: datetime, nowfun: Any = None, app: Any = None) -> None:
        if clocked_time.tzinfo is None or clocked_time.utcoffset() is None:
            raise ConfigurationError("clocked_time must be an aware datetime")
        self.clocked_time = clocked_time
        super().__init__(nowfun=nowfun, app=app)

    def remaining_estimate(self, last_run_at: datetime | None) -> timedelta:
        left: timedelta = self.clocked_time - self.now()
        return left

    def is_due(self, last_run_at: datetime | None) -> Any:
        if last_run_at is not None and self.maybe_make_aware(last_run_at) >= self.clocked_time:
            return schedstate(is_due=False, next=None)  # already ran: never again
        remaining_s = self.remaining_estimate(last_run_at).total_seconds()
        if remaining_s <= 0:
            return schedstate(is_due=True, next=None)
        return schedstate(is_due=False, next=remaining_s)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, clocked):
            return bool(self.clocked_time == other.clocked_time)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__class__, (self.clocked_time, self.nowfun)

    def __repr__(self) -> str:
        return f"<clocked: {self.clocked_time.isoformat()}>"


# -- spec_of / schedule_of --------------------------------------------------------------------------

def _is_class(value: Any, module: str, name: str) -> bool:
    # Recognised by name so that reading django-celery-beat's objects never imports Django.
    return type(value).__module__ == module and type(value).__name__ == name


def _cron_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise ConfigurationError(f"crontab field {value!r} is not a cron pattern")
    if isinstance(value, int):
        return str(value)
    try:
        numbers = sorted(int(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"crontab field {value!r} is not a cron pattern") from None
    return ",".join(str(n) for n in numbers)


def _zone_name(tz: Any) -> str:
    key = getattr(tz, "key", None) or getattr(tz, "zone", None)  # zoneinfo, pytz
    if isinstance(key, str):
        return key
    if tz is timezone.utc or (isinstance(tz, timezone) and tz.utcoffset(None) == timedelta(0)):
        return "UTC"
    raise ConfigurationError(f"time zone {tz!r} has no IANA name: use a zoneinfo.ZoneInfo")


def _aware_iso(dt: datetime) -> str:
    if dt.tzinfo is None or dt.utcoffset() is None:
        dt = dt.replace(tzinfo=timezone.utc)  # Celery's rule: naive means UTC
    return ms_to_iso(dt_ms(dt))


def spec_of(value: Any) -> Spec:
    """The spec of what a ``beat_schedule`` entry's ``schedule`` may be; see the module docs."""
    if isinstance(value, bool):
        raise ConfigurationError(f"schedule {value!r} is not a schedule; supported: {SUPPORTED}")
    if isinstance(value, (int, float)):
        spec: Spec = {"type": "interval", "every": float(value), "relative": False}
    elif isinstance(value, timedelta):
        spec = {"type": "interval", "every": value.total_seconds(), "relative": False}
    elif type(value) is schedule:
        spec = {"type": "interval", "every": value.run_every.total_seconds(), "relative": bool(value.relative)}
    elif type(value) is crontab or isinstance(value, ZonedCrontab) or \
            _is_class(value, "django_celery_beat.tzcrontab", "TzAwareCrontab"):
        spec = {"type": "crontab"}
        for key in CRON_FIELDS:
            spec[key] = _cron_text(getattr(value, f"_orig_{key}"))
        # A plain crontab follows the app's zone (its .tz is the app's): only these two carry their own.
        spec["timezone"] = None if type(value) is crontab else _zone_name(value.tz)
    elif type(value) is solar:
        spec = {"type": "solar", "event": value.event, "latitude": float(value.lat), "longitude": float(value.lon)}
    elif isinstance(value, clocked) or _is_class(value, "django_celery_beat.clockedschedule", "clocked"):
        spec = {"type": "clocked", "at": _aware_iso(value.clocked_time)}
    else:
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        raise ConfigurationError(f"schedule {value!r} ({kind}) cannot be stored as a periodic entry; "
                                 f"supported: {SUPPORTED}")
    return validate_spec(spec)


def solar_schedule(spec: Spec, **kwargs: Any) -> Any:
    try:
        importlib.import_module("ephem")  # Celery's solar needs it; by name, as it ships no types
    except ImportError:
        raise ConfigurationError("solar schedules need PyEphem: pip install ephem") from None
    try:
        return solar(spec["event"], spec["latitude"], spec["longitude"], **kwargs)
    except ValueError as exc:
        raise ConfigurationError(f"solar schedule: {exc}") from None


def schedule_of(spec: Spec, app: Any = None) -> Any:
    """The Celery schedule object of a spec (for display, and Celery's own checks of it)."""
    spec = normalize_schedule(spec)
    kind = spec["type"]
    if kind == "interval":
        return schedule(timedelta(seconds=spec["every"]), relative=spec["relative"], app=app)
    if kind == "crontab":
        fields = {key: spec[key] for key in CRON_FIELDS}
        try:
            if spec["timezone"] is None:
                return crontab(app=app, **fields)
            return ZonedCrontab(tz=zone_info(spec["timezone"], "crontab"), app=app, **fields)
        except (ValueError, TypeError) as exc:
            raise PeriodicEntryError(f"Celery cannot parse this crontab: {exc}", "schedule") from None
    if kind == "solar":
        return solar_schedule(spec, app=app)
    return clocked(parse_iso(spec["at"]), app=app)


def validate_spec(spec: Any, name: str | None = None) -> Spec:
    """:func:`normalize_schedule` plus Celery's parse of the crontab fields (which field is wrong).

    ``name``: the entry's, for the error message.
    """
    normal = normalize_schedule(spec, name)
    if normal["type"] == "crontab":
        problem = _cron_problem(*(normal[key] for key in CRON_FIELDS))
        if problem is not None:
            raise PeriodicEntryError(problem[0], problem[1], name)
    return normal


@lru_cache(maxsize=4096)
def _cron_problem(*fields: str) -> tuple[str, str | None] | None:
    """What Celery finds wrong with these crontab fields (reason, field), or None; cached, as
    Celery's parse costs about a millisecond and entries share their crontabs."""
    for key, value in zip(CRON_FIELDS, fields, strict=True):
        try:
            crontab(**{key: value})
        except (ValueError, TypeError) as exc:
            return f"Celery cannot parse {value!r}: {exc}", f"schedule.{key}"
    try:
        parse_cron(*fields, "UTC")  # the combination (e.g. 30 February)
    except PeriodicEntryError as exc:
        return exc.reason, exc.field
    return None


def validate_entry(entry: PeriodicEntry) -> None:
    """:func:`~celery_zset_scheduler.model.periodic_checks.validate` plus :func:`validate_spec`."""
    validate(entry)
    validate_spec(entry.schedule, entry.name)


def zone_name(tz: Any) -> str:
    """The IANA name of a time zone (Celery's ``app.timezone``), for entries and the planner."""
    return _zone_name(tz)

"""Schedule specs <-> Celery's schedule classes, and the fire times of a periodic entry.

A *spec* is the JSON form of a schedule kept in :class:`~celery_zset_scheduler.model.periodic.PeriodicEntry`
(forms in :func:`~celery_zset_scheduler.model.periodic.normalize_schedule`). Instants are int ms (UTC).

Interval ``{"type": "interval", "every": s, "relative": b}``
    ``next_fire_ms(spec, after)`` is ``after + every``: *after* is the previous **scheduled** fire
    time (not when it was dispatched), so lateness never accumulates and every host derives the same
    chain ``anchor + k * every``. Celery beat anchors on the dispatch time instead and drifts by the
    dispatch latency each run. ``relative`` is Celery's: the deadline is rounded down to the
    interval's resolution (minute, hour, day) in the app's time zone, computed by Celery's own
    :func:`celery.utils.time.remaining`, which handles DST correctly since Celery 5.5.

Crontab
    Celery parses the five fields (``crontab``'s expanded sets, Celery's AND of day of month, month
    and day of week). The fire times are computed here, from those sets, in the wall clock of the
    crontab's own ``timezone`` (null: the app's) with :mod:`zoneinfo`, because Celery's
    ``crontab.remaining_delta``/``remaining_estimate`` get DST wrong (Celery 5.7, Europe/Berlin, each
    checked in ``tests/celery/test_schedules.py``):

    * a skipped wall time is read with the pre-jump offset: ``30 2 * * *`` on 2025-03-30 fires at
      03:30 CEST, half an hour after the jump, not right after it;
    * chained from its own results (as a dispatcher anchored on scheduled fire times would, beat
      gets away with it only because it chains from the dispatch time) it goes back in time: after
      02:45 (skipped, read as 03:45 CEST) comes 03:00 CEST, so ``*/15 * * * *`` would repeat
      03:00..03:45 CEST, and ``0 * * * *`` yields 03:00 CEST twice;
    * at fall-back it always takes the first of a repeated wall time, so ``*/15 * * * *`` and
      ``0 * * * *`` skip the whole repeated hour (a 75-minute or two-hour gap), and a last run inside
      the repeated hour (02:05 CET, second pass) gets ``30 2 * * *`` "due" 35 minutes *before* it,
      so beat runs it again.

    The rules here are Vixie cron's (``man 8 cron``). An entry is a *wildcard* entry when its minute
    or its hour field starts with ``*`` (``*``, ``*/15``); the others are *fixed-time* entries.

    * Spring forward (a wall time that does not exist): a fixed-time entry fires **once, right after
      the jump** (the first instant of the new offset, 03:00 CEST in Berlin), however many of its
      wall times the gap swallowed. A wildcard entry just runs on the new wall clock: nothing is
      caught up (``*/15 * * * *`` goes 01:45 CET, 03:00 CEST: 15 real minutes).
    * Fall back (a wall time that exists twice): a fixed-time entry fires **once**, at the first
      occurrence (02:30 CEST, not again at 02:30 CET). A wildcard entry runs in both passes, so
      ``*/15 * * * *`` stays every 15 real minutes and ``0 * * * *`` hourly.

Solar
    Celery's ``solar`` (PyEphem): instants in UTC, so DST plays no part. Without ``ephem`` installed
    a :class:`~celery_zset_scheduler.errors.ConfigurationError` says to ``pip install ephem``.

Clocked ``{"type": "clocked", "at": iso}``
    One fire time; none once it is past.
"""

from __future__ import annotations

import importlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import BaseSchedule, crontab, schedstate, schedule, solar
from celery.utils.time import remaining

from ..errors import ConfigurationError
from ..model.firing import decide
from ..model.periodic import (
    MAX_CATCHUP,
    PeriodicEntry,
    PeriodicEntryError,
    PeriodicState,
    disabled_state,
    iso_to_ms,
    ms_to_iso,
    normalize_schedule,
    validate,
    within_bounds,
)

__all__ = [
    "CatchUp",
    "ZonedCrontab",
    "bounded_next",
    "catch_up",
    "clocked",
    "due_times",
    "first_run_ms",
    "following_run_ms",
    "latest_occurrences",
    "next_fire_ms",
    "occurrences",
    "schedule_of",
    "spec_of",
    "validate_entry",
    "validate_spec",
    "zone_name",
]

Spec = dict[str, Any]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MINUTE_MS = 60_000
_HOUR_MS = 3_600_000
#: The Gregorian calendar repeats after 400 years (146,097 days, a whole number of weeks): a crontab
#: with no day in that span has none at all.
_CRON_SEARCH_DAYS = 146_097 + 2
_CRON_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
#: More than any zone's clock change (2 h, historical double summer time): a wall hour this far
#: before an instant's own cannot come after it.
_SHIFT_H = 3

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
    return ms_to_iso(_dt_ms(dt))


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
        for key in _CRON_FIELDS:
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


def _zone(name: str, what: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigurationError(f"{what}: unknown time zone {name!r}") from None


def _solar(spec: Spec, **kwargs: Any) -> Any:
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
        fields = {key: spec[key] for key in _CRON_FIELDS}
        try:
            if spec["timezone"] is None:
                return crontab(app=app, **fields)
            return ZonedCrontab(tz=_zone(spec["timezone"], "crontab"), app=app, **fields)
        except (ValueError, TypeError) as exc:
            raise PeriodicEntryError(f"Celery cannot parse this crontab: {exc}", "schedule") from None
    if kind == "solar":
        return _solar(spec, app=app)
    return clocked(_parse_iso(spec["at"]), app=app)


def validate_spec(spec: Any, name: str | None = None) -> Spec:
    """:func:`normalize_schedule` plus Celery's parse of the crontab fields (which field is wrong).

    ``name``: the entry's, for the error message.
    """
    normal = normalize_schedule(spec, name)
    if normal["type"] == "crontab":
        problem = _cron_problem(*(normal[key] for key in _CRON_FIELDS))
        if problem is not None:
            raise PeriodicEntryError(problem[0], problem[1], name)
    return normal


@lru_cache(maxsize=4096)
def _cron_problem(*fields: str) -> tuple[str, str | None] | None:
    """What Celery finds wrong with these crontab fields (reason, field), or None; cached, as
    Celery's parse costs about a millisecond and entries share their crontabs."""
    for key, value in zip(_CRON_FIELDS, fields, strict=True):
        try:
            crontab(**{key: value})
        except (ValueError, TypeError) as exc:
            return f"Celery cannot parse {value!r}: {exc}", f"schedule.{key}"
    try:
        _parse_cron(*fields, "UTC")  # the combination (e.g. 30 February)
    except PeriodicEntryError as exc:
        return exc.reason, exc.field
    return None


def validate_entry(entry: PeriodicEntry) -> None:
    """:func:`~celery_zset_scheduler.model.periodic.validate` plus :func:`validate_spec`."""
    validate(entry)
    validate_spec(entry.schedule, entry.name)


# -- time helpers -----------------------------------------------------------------------------------

def _dt_ms(dt: datetime) -> int:
    # Aware subtraction across tzinfo objects goes through utcoffset(), so it honours fold.
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _ms_dt(ms: int, tz: tzinfo) -> datetime:
    return (_EPOCH + timedelta(milliseconds=ms)).astimezone(tz)


def _parse_iso(value: str) -> datetime:
    return _EPOCH + timedelta(milliseconds=iso_to_ms(value))


# -- crontab ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Cron:
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_week: frozenset[int]  # 0 is Sunday, as in Celery
    days_of_month: frozenset[int]
    months: frozenset[int]
    months_sorted: tuple[int, ...]
    wildcard: bool
    tz: ZoneInfo

    def matches(self, day: date) -> bool:
        return day.day in self.days_of_month and day.isoweekday() % 7 in self.days_of_week


@lru_cache(maxsize=512)
def _parse_cron(minute: str, hour: str, day_of_week: str, day_of_month: str, month_of_year: str,
                zone: str) -> _Cron:
    try:
        parsed = crontab(minute=minute, hour=hour, day_of_week=day_of_week, day_of_month=day_of_month,
                         month_of_year=month_of_year)
    except (ValueError, TypeError) as exc:
        raise PeriodicEntryError(f"Celery cannot parse this crontab: {exc}", "schedule") from None
    # Vixie cron's MIN_STAR/HR_STAR: set when the field's text starts with '*'.
    wildcard = minute.lstrip().startswith("*") or hour.lstrip().startswith("*")
    return _Cron(minutes=tuple(sorted(parsed.minute)), hours=tuple(sorted(parsed.hour)),
                 days_of_week=frozenset(parsed.day_of_week), days_of_month=frozenset(parsed.day_of_month),
                 months=frozenset(parsed.month_of_year), months_sorted=tuple(sorted(parsed.month_of_year)),
                 wildcard=wildcard, tz=_zone(zone, "crontab"))


def _cron_of(spec: Spec, app_timezone: str) -> _Cron:
    return _parse_cron(*(spec[key] for key in _CRON_FIELDS), spec["timezone"] or app_timezone)


def _exists(wall: datetime) -> bool:
    back = wall.astimezone(timezone.utc).astimezone(wall.tzinfo)
    return back.replace(tzinfo=None) == wall.replace(tzinfo=None)


def _jump_instant(tz: tzinfo, low_ms: int, high_ms: int) -> int:
    """The first instant of the new offset in a spring-forward gap, given two instants around it."""
    after = _ms_dt(high_ms, tz).utcoffset()
    low, high = low_ms // 1000, -(-high_ms // 1000)  # zone transitions fall on whole seconds
    while high - low > 1:
        mid = (low + high) // 2
        if _ms_dt(mid * 1000, tz).utcoffset() == after:
            high = mid
        else:
            low = mid
    return high * 1000


def _wall_instants(cron: _Cron, wall: datetime) -> list[int]:
    first, second = wall.replace(fold=0), wall.replace(fold=1)
    if first.utcoffset() == second.utcoffset():
        return [_dt_ms(first)]
    a, b = sorted((_dt_ms(first), _dt_ms(second)))
    if _exists(first):  # a repeated wall time (fall back)
        return [a, b] if cron.wildcard else [a]
    # A skipped wall time (spring forward): both readings straddle the jump.
    return [] if cron.wildcard else [_jump_instant(cron.tz, a, b)]


def _day_instants(cron: _Cron, day: date) -> list[int]:
    out: list[int] = []
    for hour in cron.hours:
        top = datetime(day.year, day.month, day.day, hour, 0, tzinfo=cron.tz)
        end = top.replace(minute=59)
        offsets = {top.utcoffset(), top.replace(fold=1).utcoffset(), end.utcoffset(), end.replace(fold=1).utcoffset()}
        if len(offsets) == 1:  # no transition in this hour: plain arithmetic
            base = _dt_ms(top)
            out.extend(base + minute * _MINUTE_MS for minute in cron.minutes)
        else:
            for minute in cron.minutes:
                out.extend(_wall_instants(cron, top.replace(minute=minute)))
    return sorted(set(out))


def _first_after(cron: _Cron, day: date, after_ms: int, after: datetime) -> int | None:
    """``min(t for t in _day_instants(cron, day) if t > after_ms)`` without building the day: the
    hours in order, each by arithmetic (or, in a transition hour, minute by minute), until an hour
    cannot start before the best found (the earliest reading of an hour's top never decreases).
    ``after`` is ``after_ms`` on the crontab's wall clock: hours more than :data:`_SHIFT_H` before
    it cannot hold a later instant (no zone shifts its clock by more) and are not looked at."""
    best: int | None = None
    local = after.date()
    floor = 0 if day > local else (after.hour - _SHIFT_H if day == local else 24 - _SHIFT_H)
    for hour in cron.hours[bisect_left(cron.hours, floor):]:
        top = datetime(day.year, day.month, day.day, hour, 0, tzinfo=cron.tz)
        second = top.replace(fold=1)
        if best is not None and best <= min(_dt_ms(top), _dt_ms(second)):
            break
        end = top.replace(minute=59)
        offsets = {top.utcoffset(), second.utcoffset(), end.utcoffset(), end.replace(fold=1).utcoffset()}
        if len(offsets) == 1:  # no transition in this hour: plain arithmetic
            base = _dt_ms(top)
            at = bisect_right(cron.minutes, (after_ms - base) // _MINUTE_MS)
            found = base + cron.minutes[at] * _MINUTE_MS if at < len(cron.minutes) else None
        else:
            later = [t for minute in cron.minutes for t in _wall_instants(cron, top.replace(minute=minute))
                     if t > after_ms]
            found = min(later) if later else None
        if found is not None and (best is None or found < best):
            best = found
    return best


def _cron_days(cron: _Cron, start: date, last: date | None = None) -> Iterator[date]:
    """The days from ``start`` (to ``last``) that the crontab's day fields match, skipping months."""
    day = start
    for _ in range(_CRON_SEARCH_DAYS):
        if last is not None and day > last:
            return
        if day.month not in cron.months:
            later = [m for m in cron.months_sorted if m > day.month]
            day = date(day.year, later[0], 1) if later else date(day.year + 1, cron.months_sorted[0], 1)
            continue
        if cron.matches(day):
            yield day
        day += timedelta(days=1)


def _cron_next(cron: _Cron, after_ms: int) -> int | None:
    # From the day before: a repeated hour can put a wall time of one day after midnight of the next.
    after = _ms_dt(after_ms, cron.tz)
    start = after.date() - timedelta(days=1)
    found: tuple[int, date] | None = None
    for day in _cron_days(cron, start):
        first = _first_after(cron, day, after_ms, after)
        if found is not None:
            adjacent = day == found[1] + timedelta(days=1)
            return min(found[0], first) if first is not None and adjacent else found[0]
        if first is not None:
            found = (first, day)
    return found[0] if found is not None else None


def _cron_between(cron: _Cron, after_ms: int, until_ms: int, limit: int) -> list[int]:
    start = _ms_dt(after_ms, cron.tz).date() - timedelta(days=1)
    last = _ms_dt(until_ms, cron.tz).date() + timedelta(days=1)
    out: list[int] = []
    full_day: date | None = None
    for day in _cron_days(cron, start, last):
        if full_day is not None and day > full_day + timedelta(days=1):
            break
        out.extend(t for t in _day_instants(cron, day) if after_ms < t <= until_ms)
        if full_day is None and len(out) >= limit:
            full_day = day  # one more day, in case a repeated hour crosses midnight
    return sorted(set(out))[:limit]


# -- next_fire_ms / occurrences ---------------------------------------------------------------------

def _every_ms(spec: Spec) -> int:
    every: float = spec["every"]
    return max(1, round(every * 1000))


def _relative_next(spec: Spec, after_ms: int, app_timezone: str) -> int:
    start = _ms_dt(after_ms, _zone(app_timezone, "app timezone"))
    left = remaining(start, timedelta(seconds=spec["every"]), now=start, relative=True)
    fire = after_ms + left // timedelta(milliseconds=1)
    # Celery promises "never at or before start"; hold it to that rather than loop.
    return fire if fire > after_ms else after_ms + _every_ms(spec)


def _solar_next(spec: Spec, after_ms: int) -> int:
    after = _ms_dt(after_ms, timezone.utc)
    event = _solar(spec, nowfun=lambda: after)
    event.tz = timezone.utc  # not the current app's zone: Celery reads it even for aware datetimes
    start = after
    for _ in range(3):
        instant = after + event.remaining_estimate(start)
        fire = _dt_ms(instant)
        if instant > _ms_dt(fire, timezone.utc):
            fire += 1  # ephem's float days: round up, never at or before what it follows
        if fire > after_ms:
            return fire
        start += timedelta(minutes=1)
    raise ConfigurationError(f"solar schedule {spec!r}: ephem returned no event after {after.isoformat()}")


def next_fire_ms(spec: Spec, after_ms: int, app_timezone: str) -> int | None:
    """The first fire time strictly after ``after_ms``, or ``None`` when there is none.

    For an interval, ``after_ms`` is the previous fire time (the chain's anchor), see the module docs.
    """
    spec = normalize_schedule(spec)
    kind = spec["type"]
    if kind == "interval":
        return _relative_next(spec, after_ms, app_timezone) if spec["relative"] else after_ms + _every_ms(spec)
    if kind == "crontab":
        return _cron_next(_cron_of(spec, app_timezone), after_ms)
    if kind == "solar":
        return _solar_next(spec, after_ms)
    at = iso_to_ms(spec["at"])
    return at if at > after_ms else None


def occurrences(spec: Spec, after_ms: int, until_ms: int, app_timezone: str, limit: int = MAX_CATCHUP) -> list[int]:
    """The first ``limit`` fire times ``t`` with ``after_ms < t <= until_ms``, ascending.

    An interval's chain is anchored on ``after_ms`` (``after + every``, ``after + 2 * every``...).
    """
    spec = normalize_schedule(spec)
    if limit <= 0 or until_ms <= after_ms:
        return []
    if spec["type"] == "crontab":
        return _cron_between(_cron_of(spec, app_timezone), after_ms, until_ms, limit)
    if spec["type"] == "interval" and not spec["relative"]:
        every = _every_ms(spec)
        count = min(limit, (until_ms - after_ms) // every)
        return [after_ms + k * every for k in range(1, count + 1)]
    out: list[int] = []
    point: int | None = after_ms
    while len(out) < limit:
        assert point is not None
        point = next_fire_ms(spec, point, app_timezone)
        if point is None or point > until_ms:
            break
        out.append(point)
    return out


def latest_occurrences(spec: Spec, after_ms: int, until_ms: int, app_timezone: str,
                       count: int = MAX_CATCHUP) -> list[int]:
    """The last ``count`` fire times in ``(after_ms, until_ms]``, ascending (catch-up wants the newest).

    Looks back from ``until_ms`` over a span that doubles until it holds ``count`` of them, so a
    frequent schedule after a long gap costs about ``count`` fire times, not the whole gap. An
    interval's chain here starts at ``after_ms`` like in :func:`occurrences`.
    """
    spec = normalize_schedule(spec)
    if count <= 0 or until_ms <= after_ms:
        return []
    if spec["type"] == "interval" and not spec["relative"]:
        every = _every_ms(spec)
        last_k = (until_ms - after_ms) // every
        return [after_ms + k * every for k in range(max(1, last_k - count + 1), last_k + 1)]
    span = _HOUR_MS
    while True:
        low = max(after_ms, until_ms - span)
        found = occurrences(spec, low, until_ms, app_timezone, limit=10**9)
        if len(found) >= count or low == after_ms:
            return found[-count:]
        span *= 2


# -- an entry's runs --------------------------------------------------------------------------------

def _upper_bound(entry: PeriodicEntry, until_ms: int) -> int:
    if entry.end_time is not None:
        until_ms = min(until_ms, iso_to_ms(entry.end_time))
    if entry.expires is not None:
        until_ms = min(until_ms, iso_to_ms(entry.expires) - 1)
    return until_ms


def _bounded(entry: PeriodicEntry, fire_ms: int | None) -> int | None:
    return fire_ms if fire_ms is not None and within_bounds(entry, fire_ms) else None


def first_run_ms(entry: PeriodicEntry, now_ms: int, app_timezone: str) -> int | None:
    """The first fire time of an entry created or enabled at ``now_ms`` (``None``: it never fires).

    The first fire time strictly after ``max(now, start_time)``; an interval without ``relative``
    that has a future ``start_time`` fires at ``start_time`` itself and then every ``every`` from it
    (django-celery-beat's rule); otherwise an interval first fires one ``every`` after ``now``.
    """
    if not entry.enabled:
        return None
    spec = normalize_schedule(entry.schedule, entry.name)
    start = iso_to_ms(entry.start_time) if entry.start_time is not None else None
    if start is not None and start > now_ms:
        if spec["type"] == "interval" and not spec["relative"]:
            return _bounded(entry, start)
        return _bounded(entry, next_fire_ms(spec, start - 1, app_timezone))
    return _bounded(entry, next_fire_ms(spec, now_ms, app_timezone))


def following_run_ms(entry: PeriodicEntry, fire_ms: int, app_timezone: str) -> int | None:
    """The fire time after the occurrence at ``fire_ms`` (``None`` for a one-off or past the end)."""
    if entry.one_off:
        return None
    return _bounded(entry, next_fire_ms(entry.schedule, fire_ms, app_timezone))


@dataclass(frozen=True)
class CatchUp:
    """What :func:`catch_up` decided: the fire times to publish now, and the state after them."""

    fire: list[int]
    state: PeriodicState


def catch_up(entry: PeriodicEntry, state: PeriodicState, now_ms: int, app_timezone: str, *,
             grace_ms: int = 0, window: float | None = None) -> CatchUp:
    """What a leader does with an entry whose ``next_run_ms`` is behind ``now_ms``: the fire times to
    store and the state after them (:func:`due_times` and :func:`~..model.firing.decide`, the
    leader's own path; overlap is not considered here: nothing is running).

    Every fire time from ``state.next_run_ms`` to ``now_ms`` is due; those at most ``grace_ms``
    old are on time, the others missed and follow the entry's catch-up policy within ``window``
    (default: the entry's). ``next_run_ms`` becomes the first fire time after ``now_ms`` (an
    interval keeps its phase). Disabled: nothing, ``next_run_ms`` cleared. Paused: nothing, state
    unchanged (frozen). No ``next_run_ms`` yet: :func:`first_run_ms`.
    """
    if not entry.enabled:
        return CatchUp([], disabled_state(state))
    if entry.paused:
        return CatchUp([], state)
    if state.next_run_ms is None:
        return CatchUp([], replace(state, next_run_ms=first_run_ms(entry, now_ms, app_timezone)))
    due, following = due_times(entry, state, now_ms, app_timezone)
    decision = decide(entry, state, due, following, now_ms, grace_ms=grace_ms,
                      window=entry.catchup_window if window is None else window, outstanding_until=None,
                      overlap_timeout_ms=0)
    return CatchUp([f.fire_ms for f in decision.fires], decision.state)


def bounded_next(entry: PeriodicEntry, after_ms: int, app_timezone: str) -> int | None:
    """The entry's first fire time after ``after_ms`` within its bounds (one-offs included)."""
    return _bounded(entry, next_fire_ms(entry.schedule, after_ms, app_timezone))


def due_times(entry: PeriodicEntry, state: PeriodicState, now_ms: int,
              app_timezone: str) -> tuple[list[int], int | None]:
    """The fire times due from ``state.next_run_ms`` up to ``now_ms`` (ascending, the newest
    :data:`MAX_CATCHUP`, within the entry's bounds) and the first fire time after ``now_ms``.

    What a leader hands to :func:`~celery_zset_scheduler.model.firing.decide`: the same arithmetic
    as :func:`catch_up` (an interval keeps its phase, anchored on ``next_run_ms``), without the
    policy. No ``next_run_ms``: nothing due, and the entry's first run after now.
    """
    first = state.next_run_ms
    if first is None:
        return [], first_run_ms(entry, now_ms, app_timezone)
    if first > now_ms:
        return [], first
    spec = normalize_schedule(entry.schedule, entry.name)
    low = first if entry.start_time is None else max(first, iso_to_ms(entry.start_time))
    high = _upper_bound(entry, now_ms)
    if spec["type"] == "interval" and not spec["relative"]:
        every = _every_ms(spec)
        k_low = max(0, -(-(low - first) // every))
        k_high = (high - first) // every if high >= first else -1
        due = [first + k * every for k in range(max(k_low, k_high - MAX_CATCHUP + 1), k_high + 1)]
        following: int | None = first + ((now_ms - first) // every + 1) * every
    else:
        due = latest_occurrences(spec, low - 1, high, app_timezone, MAX_CATCHUP) if high >= low else []
        if spec["type"] == "interval":  # relative: continue from the chain's last point, not from now
            last = latest_occurrences(spec, first, now_ms, app_timezone, 1)
            following = next_fire_ms(spec, (last or [first])[-1], app_timezone)
        else:
            following = next_fire_ms(spec, now_ms, app_timezone)
    return due, _bounded(entry, following)


def zone_name(tz: Any) -> str:
    """The IANA name of a time zone (Celery's ``app.timezone``), for entries and the planner."""
    return _zone_name(tz)

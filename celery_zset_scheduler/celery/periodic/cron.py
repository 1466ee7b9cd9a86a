"""The fire times of a crontab, in its own time zone's wall clock (Vixie cron's DST rules).

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
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab

from ...errors import ConfigurationError
from ...model.periodic import PeriodicEntryError, iso_to_ms

Spec = dict[str, Any]

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MINUTE_MS = 60_000
HOUR_MS = 3_600_000
#: The Gregorian calendar repeats after 400 years (146,097 days, a whole number of weeks): a crontab
#: with no day in that span has none at all.
_CRON_SEARCH_DAYS = 146_097 + 2
CRON_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
#: More than any zone's clock change (2 h, historical double summer time): a wall hour this far
#: before an instant's own cannot come after it.
_SHIFT_H = 3


def zone_info(name: str, what: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigurationError(f"{what}: unknown time zone {name!r}") from None


# -- time helpers -----------------------------------------------------------------------------------

def dt_ms(dt: datetime) -> int:
    # Aware subtraction across tzinfo objects goes through utcoffset(), so it honours fold.
    delta = dt - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def ms_dt(ms: int, tz: tzinfo) -> datetime:
    return (EPOCH + timedelta(milliseconds=ms)).astimezone(tz)


def parse_iso(value: str) -> datetime:
    return EPOCH + timedelta(milliseconds=iso_to_ms(value))


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
def parse_cron(minute: str, hour: str, day_of_week: str, day_of_month: str, month_of_year: str,
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
                 wildcard=wildcard, tz=zone_info(zone, "crontab"))


def cron_of(spec: Spec, app_timezone: str) -> _Cron:
    return parse_cron(*(spec[key] for key in CRON_FIELDS), spec["timezone"] or app_timezone)


def _exists(wall: datetime) -> bool:
    back = wall.astimezone(timezone.utc).astimezone(wall.tzinfo)
    return back.replace(tzinfo=None) == wall.replace(tzinfo=None)


def _jump_instant(tz: tzinfo, low_ms: int, high_ms: int) -> int:
    """The first instant of the new offset in a spring-forward gap, given two instants around it."""
    after = ms_dt(high_ms, tz).utcoffset()
    low, high = low_ms // 1000, -(-high_ms // 1000)  # zone transitions fall on whole seconds
    while high - low > 1:
        mid = (low + high) // 2
        if ms_dt(mid * 1000, tz).utcoffset() == after:
            high = mid
        else:
            low = mid
    return high * 1000


def _wall_instants(cron: _Cron, wall: datetime) -> list[int]:
    first, second = wall.replace(fold=0), wall.replace(fold=1)
    if first.utcoffset() == second.utcoffset():
        return [dt_ms(first)]
    a, b = sorted((dt_ms(first), dt_ms(second)))
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
            base = dt_ms(top)
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
        if best is not None and best <= min(dt_ms(top), dt_ms(second)):
            break
        end = top.replace(minute=59)
        offsets = {top.utcoffset(), second.utcoffset(), end.utcoffset(), end.replace(fold=1).utcoffset()}
        if len(offsets) == 1:  # no transition in this hour: plain arithmetic
            base = dt_ms(top)
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


def cron_next(cron: _Cron, after_ms: int) -> int | None:
    # From the day before: a repeated hour can put a wall time of one day after midnight of the next.
    after = ms_dt(after_ms, cron.tz)
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


def cron_between(cron: _Cron, after_ms: int, until_ms: int, limit: int) -> list[int]:
    start = ms_dt(after_ms, cron.tz).date() - timedelta(days=1)
    last = ms_dt(until_ms, cron.tz).date() + timedelta(days=1)
    out: list[int] = []
    full_day: date | None = None
    for day in _cron_days(cron, start, last):
        if full_day is not None and day > full_day + timedelta(days=1):
            break
        out.extend(t for t in _day_instants(cron, day) if after_ms < t <= until_ms)
        if full_day is None and len(out) >= limit:
            full_day = day  # one more day, in case a repeated hour crosses midnight
    return sorted(set(out))[:limit]

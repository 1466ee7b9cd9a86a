"""Schedule specs and fire times: DST rules, Celery's own behaviour across DST, round trips, catch-up."""

from __future__ import annotations

import itertools
import pickle
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import ephem
import pytest
from celery import Celery
from celery.schedules import BaseSchedule, crontab, schedule, solar
from django_celery_beat.clockedschedule import clocked as dcb_clocked
from django_celery_beat.tzcrontab import TzAwareCrontab

from celery_zset_scheduler.celery.periodic import cron as S
from celery_zset_scheduler.celery.periodic.fire_times import (
    catch_up,
    first_run_ms,
    following_run_ms,
    latest_occurrences,
    next_fire_ms,
    occurrences,
)
from celery_zset_scheduler.celery.periodic.schedules import (
    ZonedCrontab,
    clocked,
    schedule_of,
    spec_of,
    validate_entry,
    validate_spec,
)
from celery_zset_scheduler.errors import ConfigurationError
from celery_zset_scheduler.model.periodic import (
    MAX_CATCHUP,
    PeriodicEntry,
    PeriodicEntryError,
    PeriodicState,
    ms_to_iso,
    occurrence_id,
)

BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"
UTC = timezone.utc
MIN, HOUR, DAY = 60_000, 3_600_000, 86_400_000


def at(y: int, mo: int, d: int, h: int = 0, mi: int = 0, tz: str = "UTC") -> int:
    return S.dt_ms(datetime(y, mo, d, h, mi, tzinfo=ZoneInfo(tz)))


def walls(times: list[int], tz: str) -> list[str]:
    return [S.ms_dt(t, ZoneInfo(tz)).strftime("%m-%d %H:%M%z") for t in times]


def cron(minute: str = "*", hour: str = "*", tz: str | None = None, **fields: str) -> dict[str, object]:
    spec = {"type": "crontab", "minute": minute, "hour": hour, "day_of_week": "*", "day_of_month": "*",
            "month_of_year": "*", "timezone": tz}
    spec.update(fields)
    return spec


def gaps(times: list[int]) -> set[int]:
    return {b - a for a, b in itertools.pairwise(times)}


# -- what Celery 5.7 itself does across DST (the reasons we compute crontabs ourselves) -------------

@pytest.fixture
def berlin_app() -> Celery:
    app = Celery(set_as_current=False)
    app.conf.timezone = BERLIN
    return app


def celery_next(c: crontab, last: datetime) -> datetime:
    start, delta, _now = c.remaining_delta(last)
    result: datetime = (start + delta).astimezone(UTC)
    return result


def berlin(y: int, mo: int, d: int, h: int, mi: int, fold: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=ZoneInfo(BERLIN), fold=fold)


def test_celery_reads_a_skipped_wall_time_with_the_old_offset(berlin_app: Celery) -> None:
    c = crontab("30", "2", app=berlin_app)
    # 02:30 does not exist on 2025-03-30; Celery gives 01:30 UTC = 03:30 CEST, half an hour after the jump.
    assert celery_next(c, berlin(2025, 3, 29, 2, 45)) == datetime(2025, 3, 30, 1, 30, tzinfo=UTC)
    assert next_fire_ms(cron("30", "2"), at(2025, 3, 29, 2, 45, BERLIN), BERLIN) == at(2025, 3, 30, 1, 0)
    # With 02:00 in the set Celery lands on the jump too (02:00 + 1h = 03:00 CEST), as we do.
    c2 = crontab("0,30", "2", app=berlin_app)
    first = celery_next(c2, berlin(2025, 3, 29, 2, 45))
    second = celery_next(c2, first.astimezone(ZoneInfo(BERLIN)))
    assert (first, second) == (datetime(2025, 3, 30, 1, 0, tzinfo=UTC), datetime(2025, 3, 31, 0, 0, tzinfo=UTC))
    ours = occurrences(cron("0,30", "2"), at(2025, 3, 29, 12), at(2025, 3, 31, 12), BERLIN)
    assert ours == [at(2025, 3, 30, 1, 0), at(2025, 3, 31, 0, 0), at(2025, 3, 31, 0, 30)]


def test_celery_chain_goes_back_in_time_after_the_gap(berlin_app: Celery) -> None:
    c = crontab("*/15", "*", app=berlin_app)
    skipped = berlin(2025, 3, 30, 2, 45)  # Celery's own previous result: read as 01:45 UTC
    assert skipped.astimezone(UTC) == datetime(2025, 3, 30, 1, 45, tzinfo=UTC)
    assert celery_next(c, skipped) == datetime(2025, 3, 30, 1, 0, tzinfo=UTC)  # 45 minutes earlier
    hourly = crontab("0", "*", app=berlin_app)
    assert celery_next(hourly, berlin(2025, 3, 30, 2, 0)) == berlin(2025, 3, 30, 2, 0).astimezone(UTC)


def test_celery_skips_the_repeated_hour_and_is_due_before_the_last_run(berlin_app: Celery) -> None:
    every15 = crontab("*/15", "*", app=berlin_app)
    # 02:45 CEST (00:45 UTC) -> 03:00 CET (02:00 UTC): the second 02:00..02:45 never runs.
    assert celery_next(every15, berlin(2025, 10, 26, 2, 45)) == datetime(2025, 10, 26, 2, 0, tzinfo=UTC)
    # A last run in the second pass (02:05 CET = 01:05 UTC): "30 2" is due 35 minutes before it.
    now = datetime(2025, 10, 26, 1, 6, tzinfo=UTC)
    daily = crontab("30", "2", app=berlin_app, nowfun=lambda: now)
    last = berlin(2025, 10, 26, 2, 5, fold=1)
    assert last.astimezone(UTC) == datetime(2025, 10, 26, 1, 5, tzinfo=UTC)
    assert celery_next(daily, last) == datetime(2025, 10, 26, 0, 30, tzinfo=UTC)
    assert daily.is_due(last).is_due
    # Ours: the next one after that last run is the next day's.
    assert next_fire_ms(cron("30", "2"), S.dt_ms(last), BERLIN) == at(2025, 10, 27, 2, 30, BERLIN)


# -- our DST rules ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("tz", "day", "skipped_hour", "jump_utc"), [
    (BERLIN, (2025, 3, 30), "2", at(2025, 3, 30, 1, 0)),
    (NEW_YORK, (2025, 3, 9), "2", at(2025, 3, 9, 7, 0)),
])
def test_spring_forward_fixed_time_fires_once_right_after_the_jump(
        tz: str, day: tuple[int, int, int], skipped_hour: str, jump_utc: int) -> None:
    before, after = at(*day, 0, 0, tz) - DAY, at(*day, 0, 0, tz) + 2 * DAY
    for minute in ("30", "0,30", "0-59/10", "59"):
        got = [t for t in occurrences(cron(minute, skipped_hour), before, after, tz) if abs(t - jump_utc) < 12 * HOUR]
        assert got == [jump_utc], minute
        assert walls(got, tz)[0].endswith("03:00" + ("+0200" if tz == BERLIN else "-0400"))
    # A wildcard entry just follows the new wall clock: 15 real minutes across the jump.
    around = occurrences(cron("*/15", "*"), jump_utc - HOUR, jump_utc + HOUR, tz)
    assert gaps(around) == {15 * MIN} and jump_utc in around
    # A wildcard entry inside the skipped hour has nothing that day (the hour does not exist).
    in_hour = occurrences(cron("*/20", skipped_hour), before, after, tz)
    assert len(in_hour) == 6 and all(abs(t - jump_utc) > 12 * HOUR for t in in_hour)


@pytest.mark.parametrize(("tz", "day", "repeated_hour", "first_utc"), [
    (BERLIN, (2025, 10, 26), 2, at(2025, 10, 26, 0, 0)),
    (NEW_YORK, (2025, 11, 2), 1, at(2025, 11, 2, 5, 0)),
])
def test_fall_back_fixed_time_fires_once_wildcards_in_both_passes(
        tz: str, day: tuple[int, int, int], repeated_hour: int, first_utc: int) -> None:
    start, end = first_utc - 3 * HOUR, first_utc + 4 * HOUR
    assert occurrences(cron("30", str(repeated_hour)), start, end, tz) == [first_utc + 30 * MIN]
    assert occurrences(cron("0,30", str(repeated_hour)), start, end, tz) == [first_utc, first_utc + 30 * MIN]
    # Wildcards: every 15 real minutes, the repeated hour twice; hourly stays hourly.
    every15 = occurrences(cron("*/15", "*"), start, end, tz)
    assert gaps(every15) == {15 * MIN} and len(every15) == 28
    hourly = occurrences(cron("0", "*"), start, end, tz)
    assert gaps(hourly) == {HOUR} and first_utc in hourly and first_utc + HOUR in hourly
    twice = occurrences(cron("*/20", str(repeated_hour)), start, end, tz)
    assert twice == [first_utc + k * 20 * MIN for k in range(6)]


@pytest.mark.parametrize("tz", [BERLIN, NEW_YORK])
def test_daily_time_keeps_its_wall_clock_across_both_changes(tz: str) -> None:
    year = occurrences(cron("0", "9"), at(2025, 1, 1), at(2026, 1, 1), tz, limit=400)
    assert len(year) == 365
    assert {w[6:11] for w in walls(year, tz)} == {"09:00"}
    assert gaps(year) == {DAY, DAY - HOUR, DAY + HOUR}


def test_crontab_without_zone_follows_a_non_utc_app_timezone() -> None:
    winter = next_fire_ms(cron("0", "9"), at(2025, 1, 10), NEW_YORK)
    summer = next_fire_ms(cron("0", "9"), at(2025, 7, 10), NEW_YORK)
    assert (winter, summer) == (at(2025, 1, 10, 14), at(2025, 7, 10, 13))


def test_crontab_with_its_own_zone_ignores_the_app_zone() -> None:
    spec = cron("0", "9", tz=BERLIN)
    # Between the US change (03-09) and the EU one (03-30) the two zones are 5 hours apart, not 6.
    days = occurrences(spec, at(2025, 3, 8), at(2025, 4, 1), NEW_YORK, limit=40)
    assert {w[6:] for w in walls(days, BERLIN)} == {"09:00+0100", "09:00+0200"}
    assert days[0] == at(2025, 3, 8, 8) and days[-1] == at(2025, 3, 31, 7)
    assert next_fire_ms(spec, at(2025, 3, 8), "UTC") == days[0]


def test_matches_celery_where_no_clock_changes(berlin_app: Celery) -> None:
    specs = [("*/7", "9-17", "mon-fri", "*", "*"), ("0", "0", "*", "1,15", "*"), ("30", "4", "sun", "*", "*"),
             ("15", "3", "mon", "1-7", "*"), ("5", "*/6", "*", "*", "1,2")]
    start, end = berlin(2025, 1, 1, 0, 0), at(2025, 3, 1, 0, 0, BERLIN)
    for minute, hour, dow, dom, moy in specs:
        c = crontab(minute, hour, dow, dom, moy, app=berlin_app)
        expected, last = [], start
        while True:
            nxt = celery_next(c, last)
            if S.dt_ms(nxt) > end:
                break
            expected.append(S.dt_ms(nxt))
            last = nxt.astimezone(ZoneInfo(BERLIN))
        spec = cron(minute, hour, day_of_week=dow, day_of_month=dom, month_of_year=moy)
        assert occurrences(spec, S.dt_ms(start), end, BERLIN, limit=10**6) == expected, (minute, hour, dow, dom)
        assert len(expected) >= 2


def test_day_search_matches_a_minute_by_minute_scan() -> None:
    specs = [cron("0,30", "8-10", day_of_week="1,3,5"), cron("45", "23", day_of_month="28-31"),
             cron("*/13", "*/5", month_of_year="2"), cron("0", "12", day_of_week="0", day_of_month="1-7")]
    start, end = at(2025, 1, 25), at(2025, 3, 10)
    for spec in specs:
        parsed = crontab(*(spec[k] for k in ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")))
        scan = []
        for t in range(start + MIN, end + 1, MIN):
            d = S.ms_dt(t, UTC)
            if (d.minute in parsed.minute and d.hour in parsed.hour and d.day in parsed.day_of_month
                    and d.month in parsed.month_of_year and d.isoweekday() % 7 in parsed.day_of_week):
                scan.append(t)
        assert occurrences(spec, start, end, "UTC", limit=10**6) == scan, spec
        assert scan


def test_rare_crontab_and_one_that_never_fires() -> None:
    leap_monday = cron("0", "0", day_of_month="29", month_of_year="2", day_of_week="1")
    assert walls([next_fire_ms(leap_monday, at(2025, 1, 1), "UTC") or 0], "UTC") == ["02-29 00:00+0000"]
    assert next_fire_ms(leap_monday, at(2025, 1, 1), "UTC") == at(2044, 2, 29)
    with pytest.raises(PeriodicEntryError, match="schedule"):
        validate_spec(cron("0", "0", day_of_month="30", month_of_year="2"))


# -- interval, clocked, solar -----------------------------------------------------------------------

def test_interval_is_anchored_on_the_previous_fire_time() -> None:
    spec = {"type": "interval", "every": 90.5, "relative": False}
    assert next_fire_ms(spec, 1_000, "UTC") == 91_500
    assert occurrences(spec, 1_000, 1_000 + 4 * 90_500, "UTC") == [1_000 + k * 90_500 for k in range(1, 5)]
    assert occurrences(spec, 0, 10**9, "UTC", limit=3) == [90_500, 181_000, 271_500]
    assert latest_occurrences(spec, 0, 10 * 90_500 + 5, "UTC", 2) == [9 * 90_500, 10 * 90_500]


def test_relative_interval_rounds_to_local_boundaries_across_dst() -> None:
    hourly = {"type": "interval", "every": 3600.0, "relative": True}
    got = occurrences(hourly, at(2025, 10, 26, 1, 10, BERLIN), at(2025, 10, 26, 4, 0, BERLIN), BERLIN)
    assert walls(got, BERLIN) == ["10-26 02:00+0200", "10-26 02:00+0100", "10-26 03:00+0100", "10-26 04:00+0100"]
    daily = {"type": "interval", "every": 86400.0, "relative": True}
    midnights = occurrences(daily, at(2025, 3, 28, 10, 0, BERLIN), at(2025, 4, 1, 0, 0, BERLIN), BERLIN)
    assert walls(midnights, BERLIN) == ["03-29 00:00+0100", "03-30 00:00+0100", "03-31 00:00+0200",
                                        "04-01 00:00+0200"]


def test_clocked_fires_once() -> None:
    spec = {"type": "clocked", "at": "2030-01-01T10:00:00+01:00"}
    assert next_fire_ms(spec, at(2029, 1, 1), "UTC") == at(2030, 1, 1, 9)
    assert next_fire_ms(spec, at(2030, 1, 1, 9), "UTC") is None
    assert occurrences(spec, 0, at(2031, 1, 1), "UTC") == [at(2030, 1, 1, 9)]


@pytest.mark.parametrize(("tz", "lat", "lon", "spring", "autumn"), [
    (BERLIN, 52.52, 13.405, (2025, 3, 30), (2025, 10, 26)),
    (NEW_YORK, 40.7128, -74.006, (2025, 3, 9), (2025, 11, 2)),
])
def test_solar_across_dst_is_continuous_in_utc(tz: str, lat: float, lon: float, spring: tuple[int, int, int],
                                               autumn: tuple[int, int, int]) -> None:
    for event in ("sunrise", "sunset"):
        spec = {"type": "solar", "event": event, "latitude": lat, "longitude": lon}
        for day in (spring, autumn):
            got = occurrences(spec, at(*day, 0, 0, tz) - 3 * DAY, at(*day, 0, 0, tz) + 3 * DAY, "UTC")
            assert len(got) == 6
            assert all(DAY - 5 * MIN < g < DAY + 5 * MIN for g in gaps(got)), walls(got, tz)
            observer = ephem.Observer()
            observer.lat, observer.lon, observer.elev, observer.pressure = str(lat), str(lon), 0, 0
            observer.horizon = "-0:34"
            method = observer.next_rising if event == "sunrise" else observer.next_setting
            direct = method(ephem.Sun(), start=ephem.Date(S.ms_dt(got[0] - HOUR, UTC)))
            assert abs(S.dt_ms(direct.datetime().replace(tzinfo=UTC)) - got[0]) < 1000  # ephem iterates to ~ms
    # Local wall times jump by an hour at the change, the instants do not.
    sunrise = {"type": "solar", "event": "sunrise", "latitude": lat, "longitude": lon}
    pair = occurrences(sunrise, at(*spring, 0, 0, tz) - DAY, at(*spring, 0, 0, tz) + DAY, "UTC")
    hours = [S.ms_dt(t, ZoneInfo(tz)).hour for t in pair]
    assert hours[1] == hours[0] + 1


def test_solar_without_ephem_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ephem", None)  # what `import ephem` meets when it is not installed
    spec = {"type": "solar", "event": "sunrise", "latitude": 0.0, "longitude": 0.0}
    with pytest.raises(ConfigurationError, match="pip install ephem"):
        next_fire_ms(spec, 0, "UTC")
    with pytest.raises(ConfigurationError, match="pip install ephem"):
        schedule_of(spec)


# -- spec_of / schedule_of --------------------------------------------------------------------------

class Custom(BaseSchedule):
    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        return False, 10.0


class Subclassed(schedule):
    pass


def test_spec_of_every_supported_form() -> None:
    assert spec_of(30) == {"type": "interval", "every": 30.0, "relative": False}
    assert spec_of(timedelta(minutes=2)) == {"type": "interval", "every": 120.0, "relative": False}
    assert spec_of(schedule(timedelta(hours=1), relative=True)) == {"type": "interval", "every": 3600.0,
                                                                    "relative": True}
    assert spec_of(crontab(minute="*/5", hour="9-17", day_of_week="mon-fri")) == \
        cron("*/5", "9-17", day_of_week="mon-fri")
    assert spec_of(crontab(minute=[30, 0], hour=7)) == cron("0,30", "7")
    assert spec_of(TzAwareCrontab(minute="0", hour="4", tz=ZoneInfo(NEW_YORK))) == cron("0", "4", tz=NEW_YORK)
    assert spec_of(TzAwareCrontab(minute="0", hour="4")) == cron("0", "4", tz="UTC")  # its default zone
    assert spec_of(solar("sunset", 52.5, 13.4)) == {"type": "solar", "event": "sunset", "latitude": 52.5,
                                                    "longitude": 13.4}
    when = datetime(2030, 5, 1, 12, 0, tzinfo=ZoneInfo(BERLIN))
    assert spec_of(dcb_clocked(when)) == {"type": "clocked", "at": "2030-05-01T10:00:00+00:00"}


@pytest.mark.parametrize("value", [Custom(), Subclassed(10), "*/5 * * * *", None, True])
def test_spec_of_refuses_what_it_cannot_express(value: object) -> None:
    with pytest.raises(ConfigurationError, match="supported: a number of seconds"):
        spec_of(value)


@pytest.mark.parametrize("spec", [
    {"type": "interval", "every": 45.0, "relative": False},
    {"type": "interval", "every": 3600.0, "relative": True},
    cron("*/5", "9-17", day_of_week="mon-fri"),
    cron("0", "4", tz=NEW_YORK),
    {"type": "solar", "event": "dawn_civil", "latitude": -33.87, "longitude": 151.21},
    {"type": "clocked", "at": "2030-05-01T10:00:00+00:00"},
])
def test_schedule_of_round_trips(spec: dict[str, object], berlin_app: Celery) -> None:
    value = schedule_of(spec, berlin_app)
    assert spec_of(value) == spec
    assert isinstance(value, BaseSchedule)


def test_schedule_of_gives_celery_working_objects(berlin_app: Celery) -> None:
    zoned = schedule_of(cron("0", "4", tz=NEW_YORK), berlin_app)
    assert isinstance(zoned, ZonedCrontab) and zoned.tz == ZoneInfo(NEW_YORK)
    assert pickle.loads(pickle.dumps(zoned)) == zoned  # beat's shelve and Celery's own copies pickle it
    assert pickle.loads(pickle.dumps(zoned)).tz == ZoneInfo(NEW_YORK)
    assert zoned.remaining_delta(datetime(2025, 1, 1, 12, tzinfo=UTC))[0].tzinfo == ZoneInfo(NEW_YORK)
    plain = schedule_of(cron("0", "4"), berlin_app)
    assert type(plain) is crontab and plain.tz == ZoneInfo(BERLIN)
    once = schedule_of({"type": "clocked", "at": "2030-05-01T10:00:00+00:00"}, berlin_app)
    assert isinstance(once, clocked)
    once.nowfun = lambda: datetime(2031, 1, 1, tzinfo=UTC)
    assert once.is_due(None).is_due and not once.is_due(datetime(2030, 5, 1, 10, tzinfo=UTC)).is_due


def test_validate_spec_names_the_crontab_field() -> None:
    with pytest.raises(PeriodicEntryError) as info:
        validate_spec(cron("61", "*"))
    assert info.value.field == "schedule.minute"
    with pytest.raises(PeriodicEntryError) as info:
        validate_entry(PeriodicEntry(name="n", task="t", schedule=cron("0", "25")))
    assert info.value.field == "schedule.hour" and info.value.name == "n"


# -- an entry's runs: first, following, catch-up, disable, pause -----------------------------------

def entry(**changes: object) -> PeriodicEntry:
    base = PeriodicEntry(name="e", task="t", schedule={"type": "interval", "every": 60.0, "relative": False})
    return replace(base, **changes)  # type: ignore[arg-type]


T0 = at(2025, 6, 1, 12, 0)


def test_first_run() -> None:
    assert first_run_ms(entry(), T0, "UTC") == T0 + MIN
    assert first_run_ms(entry(enabled=False), T0, "UTC") is None
    # An interval with a future start fires at the start itself (django-celery-beat's rule).
    assert first_run_ms(entry(start_time=ms_to_iso(T0 + HOUR)), T0, "UTC") == T0 + HOUR
    daily = entry(schedule=cron("0", "9"), start_time=ms_to_iso(at(2025, 6, 3, 9)))
    assert first_run_ms(daily, T0, "UTC") == at(2025, 6, 3, 9)
    assert first_run_ms(entry(end_time=ms_to_iso(T0 + 30_000)), T0, "UTC") is None
    assert first_run_ms(entry(expires=ms_to_iso(T0 + MIN)), T0, "UTC") is None


def test_following_run() -> None:
    assert following_run_ms(entry(), T0, "UTC") == T0 + MIN
    assert following_run_ms(entry(one_off=True), T0, "UTC") is None
    assert following_run_ms(entry(end_time=ms_to_iso(T0 + MIN)), T0, "UTC") == T0 + MIN
    assert following_run_ms(entry(end_time=ms_to_iso(T0 + MIN - 1)), T0, "UTC") is None


def test_catch_up_policies_after_an_outage() -> None:
    state = PeriodicState(next_run_ms=T0, last_run_ms=T0 - MIN, total_run_count=5)
    now = T0 + 10 * MIN + 30_000  # missed T0 .. T0+10min (11 fire times)
    skip = catch_up(entry(catchup="skip"), state, now, "UTC")
    assert skip.fire == [] and skip.state.next_run_ms == T0 + 11 * MIN and skip.state.total_run_count == 5
    once = catch_up(entry(catchup="once"), state, now, "UTC")
    assert once.fire == [T0 + 10 * MIN]
    assert once.state == PeriodicState(next_run_ms=T0 + 11 * MIN, last_run_ms=T0 + 10 * MIN, total_run_count=6,
                                       last_task_id=occurrence_id("e", T0 + 10 * MIN))
    every = catch_up(entry(catchup="all"), state, now, "UTC")
    assert every.fire == [T0 + k * MIN for k in range(11)] and every.state.total_run_count == 16
    windowed = catch_up(entry(catchup="all", catchup_window=150.0), state, now, "UTC")
    assert windowed.fire == [T0 + 8 * MIN, T0 + 9 * MIN, T0 + 10 * MIN]


def test_catch_up_keeps_the_interval_phase_and_caps_all() -> None:
    state = PeriodicState(next_run_ms=T0 + 7)
    result = catch_up(entry(catchup="all"), state, T0 + 7 + 3 * DAY, "UTC")
    assert len(result.fire) == MAX_CATCHUP and result.fire[-1] == T0 + 7 + 3 * DAY
    assert all((f - (T0 + 7)) % MIN == 0 for f in result.fire)
    assert result.state.next_run_ms == T0 + 7 + 3 * DAY + MIN


def test_catch_up_crontab_across_the_dst_gap() -> None:
    spec = cron("30", "2")
    state = PeriodicState(next_run_ms=at(2025, 3, 28, 2, 30, BERLIN))
    now = at(2025, 3, 30, 12, 0, BERLIN)
    result = catch_up(entry(schedule=spec, catchup="all"), state, now, BERLIN)
    assert result.fire == [at(2025, 3, 28, 1, 30), at(2025, 3, 29, 1, 30), at(2025, 3, 30, 1, 0)]
    assert result.state.next_run_ms == at(2025, 3, 31, 0, 30)


def test_disable_forgets_and_pause_freezes() -> None:
    state = PeriodicState(next_run_ms=T0, last_run_ms=T0 - MIN, total_run_count=5)
    later = T0 + HOUR
    disabled = catch_up(entry(enabled=False), state, later, "UTC")
    assert disabled.fire == [] and disabled.state.next_run_ms is None and disabled.state.total_run_count == 5
    # Re-enabled: no catch-up of the hour it was off; the first run is one interval after now.
    reenabled = catch_up(entry(), disabled.state, later, "UTC")
    assert reenabled.fire == [] and reenabled.state.next_run_ms == later + MIN
    paused = catch_up(entry(paused=True, pause_note="db migration"), state, later, "UTC")
    assert paused.fire == [] and paused.state == state
    resumed = catch_up(entry(catchup="once"), paused.state, later, "UTC")
    assert resumed.fire == [later] and resumed.state.next_run_ms == later + MIN


def test_catch_up_one_off_and_bounds() -> None:
    state = PeriodicState(next_run_ms=T0)
    one = catch_up(entry(one_off=True, catchup="all"), state, T0 + 5 * MIN, "UTC")
    assert one.fire == [T0 + 5 * MIN] and one.state.next_run_ms is None and one.state.total_run_count == 1
    assert catch_up(entry(one_off=True), one.state, T0 + 9 * MIN, "UTC").fire == []
    ended = catch_up(entry(catchup="all", end_time=ms_to_iso(T0 + 2 * MIN)), state, T0 + 5 * MIN, "UTC")
    assert ended.fire == [T0, T0 + MIN, T0 + 2 * MIN] and ended.state.next_run_ms is None
    expired = catch_up(entry(catchup="all", expires=ms_to_iso(T0 + 2 * MIN)), state, T0 + 5 * MIN, "UTC")
    assert expired.fire == [T0, T0 + MIN]
    clock = entry(schedule={"type": "clocked", "at": ms_to_iso(T0)}, catchup="once")
    fired = catch_up(clock, state, T0 + HOUR, "UTC")
    assert fired.fire == [T0] and fired.state.next_run_ms is None
    not_yet = catch_up(entry(), state, T0 - 1, "UTC")
    assert not_yet.fire == [] and not_yet.state == state


def test_half_hour_shift_lord_howe() -> None:
    # Australia/Lord_Howe moves by 30 minutes at 02:00: part of the hour exists, part does not (or twice).
    lh = "Australia/Lord_Howe"
    spring = (at(2025, 10, 4, 12, 0, lh), at(2025, 10, 5, 6, 0, lh))
    assert occurrences(cron("0,15,45", "2"), *spring, lh) == [at(2025, 10, 4, 15, 30), at(2025, 10, 4, 15, 45)]
    assert walls(occurrences(cron("0,15,45", "2"), *spring, lh), lh) == ["10-05 02:30+1100", "10-05 02:45+1100"]
    fall = (at(2025, 4, 5, 12, 0, lh), at(2025, 4, 6, 6, 0, lh))
    assert walls(occurrences(cron("0,15,45", "2"), *fall, lh), lh) == \
        ["04-06 02:00+1030", "04-06 02:15+1030", "04-06 02:45+1030"]
    assert walls(occurrences(cron("*/15", "1"), *fall, lh), lh) == \
        ["04-06 01:00+1100", "04-06 01:15+1100", "04-06 01:30+1100", "04-06 01:45+1100",
         "04-06 01:30+1030", "04-06 01:45+1030"]
    assert walls(occurrences(cron("40", "1"), *fall, lh), lh) == ["04-06 01:40+1100"]

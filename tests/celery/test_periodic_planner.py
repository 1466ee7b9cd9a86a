"""The planner (Celery's schedule classes + the model's rules) on given instants: pure, no Redis."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery

from celery_zset_scheduler.celery.periodic.planner import CeleryPlanner
from celery_zset_scheduler.model.periodic import PeriodicEntry, PeriodicState, iso_to_ms, occurrence_id
from celery_zset_scheduler.model.periodic_json import split_entry, state_from_json, state_to_json
from celery_zset_scheduler.settings import Settings
from celery_zset_scheduler.store.periodic import DueEntry

BERLIN = ZoneInfo("Europe/Berlin")


def ms(dt: datetime) -> int:
    return iso_to_ms(dt.isoformat())


def planner(tz: str = "Europe/Berlin", **conf: Any) -> CeleryPlanner:
    app = Celery("planner", set_as_current=False)
    app.conf.timezone = tz
    app.conf.update(conf)
    return CeleryPlanner(app, Settings(lock_timeout=10.0))


def due(entry: PeriodicEntry, state: PeriodicState, outstanding_until: int | None = None) -> DueEntry:
    return DueEntry(entry.name, state.next_run_ms or 0, split_entry(entry)[0].encode(),
                    state_to_json(state).encode(), b"", outstanding_until)


def plan(p: CeleryPlanner, entry: PeriodicEntry, state: PeriodicState, now: int) -> tuple[list[int], PeriodicState]:
    (planned,) = p.plan([due(entry, state)], now)
    firing = planned.firing
    fires = _fire_times(entry.name, firing.occurrences, state, now)
    return fires, state_from_json(firing.state)


def _fire_times(name: str, occurrences: list[Any], state: PeriodicState, now: int) -> list[int]:
    # Ids are uuid5(name, fire time): find the fire time of each among the minutes around.
    top = now - now % 60_000
    candidates = range(top - 3 * 3_600_000, top + 1, 60_000)
    by_id = {occurrence_id(name, t): t for t in candidates}
    return [by_id[o.task_id] for o in occurrences]


def cron(catchup: Any = "once", **fields: str | None) -> PeriodicEntry:
    spec = {"type": "crontab", "minute": "*", "hour": "*", "day_of_week": "*", "day_of_month": "*",
            "month_of_year": "*", "timezone": "Europe/Berlin", **fields}
    return PeriodicEntry(name="c", task="t", schedule=spec, catchup=catchup)


@pytest.mark.parametrize(("catchup", "expected"), [
    ("all", ["00:30", "01:00"]), ("once", ["01:00"]), ("skip", []),
])
def test_crontab_catch_up_across_spring_forward(catchup: str, expected: list[str]) -> None:
    # */30 in Berlin on 2025-03-30: 01:30 CET (00:30Z), then 02:00/02:30 do not exist, 03:00 CEST (01:00Z).
    entry = cron(catchup, minute="*/30")
    state = PeriodicState(next_run_ms=ms(datetime(2025, 3, 30, 1, 30, tzinfo=BERLIN)))
    now = ms(datetime(2025, 3, 30, 3, 10, tzinfo=BERLIN))  # 40 real minutes later: both are missed
    fires, after = plan(planner(), entry, state, now)
    utc = [datetime.fromtimestamp(t / 1000, timezone.utc).strftime("%H:%M") for t in fires]
    assert utc == expected
    assert after.next_run_ms == ms(datetime(2025, 3, 30, 3, 30, tzinfo=BERLIN))  # 01:30Z
    assert after.total_run_count == len(expected)


def test_crontab_on_time_across_fall_back_in_both_passes() -> None:
    # 0 * * * * in Berlin on 2025-10-26: 02:00 CEST and 02:00 CET are both hourly occurrences.
    entry = cron(minute="0")
    first = ms(datetime(2025, 10, 26, 2, 0, tzinfo=BERLIN))  # 02:00 CEST = 00:00Z
    fires, after = plan(planner(), entry, PeriodicState(next_run_ms=first), first + 1_000)
    assert fires == [first]
    assert after.next_run_ms == first + 3_600_000  # 02:00 CET, one real hour later
    fires, after = plan(planner(), entry, after, first + 3_601_000)
    assert fires == [first + 3_600_000] and after.next_run_ms == first + 7_200_000


def test_crontab_without_zone_uses_the_app_zone_of_a_non_utc_app() -> None:
    entry = cron(minute="0", hour="9", timezone=None)
    start = ms(datetime(2025, 1, 6, 9, 0, tzinfo=ZoneInfo("America/New_York")))
    fires, after = plan(planner("America/New_York"), entry, PeriodicState(next_run_ms=start), start + 500)
    assert fires == [start] and after.next_run_ms == start + 86_400_000


def test_solar_next_occurrence_across_dst_is_a_solar_day_later() -> None:
    pytest.importorskip("ephem")
    entry = PeriodicEntry(name="s", task="t", schedule={"type": "solar", "event": "sunrise", "latitude": 52.52,
                                                         "longitude": 13.40})
    p = planner()
    # The sunrise before the spring change in Berlin, then the one after it.
    before = datetime(2025, 3, 29, 4, 0, tzinfo=timezone.utc)
    from celery_zset_scheduler.celery.periodic.fire_times import next_fire_ms

    first = next_fire_ms(entry.schedule, ms(before), "Europe/Berlin")
    assert first is not None
    (planned,) = p.plan([due(entry, PeriodicState(next_run_ms=first))], first + 1_000)
    after = state_from_json(planned.firing.state)
    assert planned.firing.occurrences[0].task_id == occurrence_id("s", first)
    assert after.next_run_ms is not None
    gap = timedelta(milliseconds=after.next_run_ms - first)
    # Sunrise comes about 2 minutes earlier each day in late March, in UTC: the clock change of
    # the zone plays no part.
    assert timedelta(hours=23, minutes=55) < gap < timedelta(hours=24)


def test_beat_cron_starting_deadline_is_the_default_window_of_crontabs() -> None:
    entry = cron("all", minute="*/30")
    state = PeriodicState(next_run_ms=ms(datetime(2025, 3, 30, 1, 30, tzinfo=BERLIN)))
    now = ms(datetime(2025, 3, 30, 3, 10, tzinfo=BERLIN))
    fires, _ = plan(planner(beat_cron_starting_deadline=15 * 60), entry, state, now)
    assert len(fires) == 1  # 03:00 CEST is 10 minutes old; 01:30 CET, 40 minutes, is past the deadline


def test_an_unreadable_entry_is_kept_and_looked_at_later() -> None:
    p = planner()
    bad = DueEntry("x", 1, b"{not json", b'{"v":1}', b"", None)
    (planned,) = p.plan([bad], 1_000)
    assert planned.firing.occurrences == [] and planned.firing.state == b'{"v":1}'
    assert planned.firing.look_ms == 61_000

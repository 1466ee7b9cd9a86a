"""Importing from real RedBeat stores (a redis-server per test module) and real django-celery-beat models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import redis
from celery import Celery
from celery.schedules import BaseSchedule, crontab, schedule
from redbeat import RedBeatSchedulerEntry
from redbeat.schedules import rrule

from celery_zset_scheduler.celery.periodic.beat_import import ImportReport, from_django_celery_beat, from_redbeat
from celery_zset_scheduler.celery.periodic.fire_times import first_run_ms
from celery_zset_scheduler.model.periodic import PeriodicEntry, PeriodicState, iso_to_ms
from celery_zset_scheduler.testing import RedisServer

UTC = timezone.utc


def ms(dt: datetime) -> int:
    return iso_to_ms(dt.isoformat())


def by_name(report: ImportReport) -> dict[str, tuple[PeriodicEntry, PeriodicState]]:
    return {entry.name: (entry, state) for entry, state in report.entries}


# -- RedBeat ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    c = server.client()
    c.flushall()
    yield c
    c.close()


@pytest.fixture
def redbeat_app(server: RedisServer, client: redis.Redis) -> Iterator[Celery]:
    app = Celery("rb", set_as_current=False)
    app.conf.redbeat_redis_url = server.url
    app.conf.timezone = "Europe/Berlin"
    yield app
    connection = getattr(app, "redbeat_redis", None)
    if connection is not None:
        connection.close()


class Custom(BaseSchedule):
    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        return False, 60.0


class MySchedule(schedule):
    """A custom subclass: RedBeat's encoder stores it as a plain interval (its own loss, not ours)."""


def save(app: Celery, name: str, task: str, sched: object, **kwargs: object) -> RedBeatSchedulerEntry:
    entry = RedBeatSchedulerEntry(name, task, sched, app=app, **kwargs)
    return entry.save()


def test_redbeat_entries_map_field_by_field(redbeat_app: Celery, client: redis.Redis) -> None:
    expires_at = datetime(2030, 1, 1, 12, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    save(redbeat_app, "every-30s", "proj.tasks.ping", schedule(timedelta(seconds=30)), args=[1, "a"],
         kwargs={"k": [1, 2]}, options={"queue": "fast", "priority": 3, "expires": 25, "headers": {"x": "y"}})
    save(redbeat_app, "workdays", "proj.tasks.report", crontab(minute="*/5", hour="9-17", day_of_week="mon-fri"),
         options={"exchange": "ex", "routing_key": "rk", "expires": expires_at}, enabled=False)
    save(redbeat_app, "listed", "proj.tasks.listed", crontab(minute=[30, 0], hour=7))
    save(redbeat_app, "relative", "proj.tasks.rel", schedule(timedelta(hours=1), relative=True))
    ran = RedBeatSchedulerEntry("ran", "proj.tasks.ran", schedule(60), app=redbeat_app).save()
    ran = next(next(ran))  # RedBeat's own run bookkeeping: last_run_at and total_run_count in meta

    report = from_redbeat(redbeat_app.redbeat_redis)
    assert report.problems == []
    got = by_name(report)
    assert sorted(got) == ["every-30s", "listed", "ran", "relative", "workdays"]

    ping, ping_state = got["every-30s"]
    assert ping == PeriodicEntry(
        name="every-30s", task="proj.tasks.ping", schedule={"type": "interval", "every": 30.0, "relative": False},
        args=[1, "a"], kwargs={"k": [1, 2]}, queue="fast", priority=3, headers={"x": "y"}, expire_seconds=25.0)
    stored = RedBeatSchedulerEntry.from_key("redbeat:every-30s", app=redbeat_app)
    assert ping_state == PeriodicState(last_run_ms=ms(stored.last_run_at), total_run_count=0)

    report_entry, _ = got["workdays"]
    assert report_entry == PeriodicEntry(
        name="workdays", task="proj.tasks.report",
        schedule={"type": "crontab", "minute": "*/5", "hour": "9-17", "day_of_week": "mon-fri",
                  "day_of_month": "*", "month_of_year": "*", "timezone": None},
        exchange="ex", routing_key="rk", expires="2030-01-01T11:00:00+00:00", enabled=False)
    assert got["listed"][0].schedule["minute"] == "0,30" and got["listed"][0].schedule["hour"] == "7"
    assert got["relative"][0].schedule == {"type": "interval", "every": 3600.0, "relative": True}

    ran_state = got["ran"][1]
    reread = RedBeatSchedulerEntry.from_key("redbeat:ran", app=redbeat_app)
    assert ran_state.total_run_count == reread.total_run_count == 2
    assert ran_state.last_run_ms == ms(reread.last_run_at)
    assert ran_state.next_run_ms is None  # ours is derived, not copied from RedBeat's score
    # An imported entry is usable as it is.
    assert first_run_ms(ping, ran_state.last_run_ms or 0, "UTC") is not None


def test_redbeat_unmappable_entries_are_reported_not_guessed(redbeat_app: Celery, client: redis.Redis) -> None:
    save(redbeat_app, "fine", "proj.tasks.ok", 10.0)
    save(redbeat_app, "rrule", "proj.tasks.r", rrule("HOURLY", dtstart=datetime.now(UTC) - timedelta(hours=1)))
    with pytest.raises(TypeError):  # RedBeat itself cannot store a custom BaseSchedule
        save(redbeat_app, "custom", "proj.tasks.c", Custom())
    save(redbeat_app, "sub", "proj.tasks.sub", MySchedule(timedelta(minutes=5)))
    save(redbeat_app, "counted", "proj.tasks.n", 10.0, options={"countdown": 5})
    save(redbeat_app, "braces", "proj.tasks.b{x}", 10.0)
    client.zadd("redbeat::schedule", {"redbeat:garbage": 1, "redbeat:ghost": 2})
    client.hset("redbeat:garbage", mapping={"definition": "{not json", "meta": "{}"})
    save(redbeat_app, "bad-args", "proj.tasks.a", 10.0, args=None)
    client.hset("redbeat:bad-args", "definition",
                json.dumps({"name": "bad-args", "task": "t", "args": {"a": 1}, "kwargs": {}, "options": {},
                            "schedule": {"__type__": "interval", "every": 10, "relative": False}, "enabled": True}))

    report = from_redbeat(client)  # a bytes client works too
    assert [e.name for e, _ in report.entries] == ["braces", "fine", "sub"]
    assert by_name(report)["sub"][0].schedule == {"type": "interval", "every": 300.0, "relative": False}
    problems = dict(report.problems)
    assert sorted(problems) == ["bad-args", "counted", "garbage", "ghost", "rrule"]
    assert "rrule" in problems["rrule"]
    assert "countdown" in problems["counted"]
    assert "JSON" in problems["garbage"]
    assert "no definition" in problems["ghost"]
    assert "'args'" in problems["bad-args"]


def test_redbeat_task_name_with_braces_is_fine_but_an_entry_name_is_not(redbeat_app: Celery,
                                                                        client: redis.Redis) -> None:
    save(redbeat_app, "report {daily}", "proj.tasks.r", 60)
    report = from_redbeat(client)
    assert report.entries == [] and "'{'" in dict(report.problems)["report {daily}"]


def test_redbeat_custom_prefix_and_paging(redbeat_app: Celery, client: redis.Redis) -> None:
    redbeat_app.conf.redbeat_key_prefix = "myapp:"
    for i in range(1200):
        save(redbeat_app, f"job-{i:04d}", "proj.tasks.job", 60 + i)
    report = from_redbeat(client, key_prefix="myapp:", page_size=50)
    assert report.problems == []
    assert [e.name for e, _ in report.entries] == [f"job-{i:04d}" for i in range(1200)]
    assert {e.schedule["every"] for e, _ in report.entries} == {60.0 + i for i in range(1200)}
    assert from_redbeat(client).entries == []  # the default prefix reads another store


# -- django-celery-beat -----------------------------------------------------------------------------

@pytest.fixture
def dcb() -> object:
    from django.conf import settings

    if "django_celery_beat" not in settings.INSTALLED_APPS:
        pytest.skip("Django was configured elsewhere without django_celery_beat")
    from django_celery_beat import models

    return models


@pytest.mark.django_db
def test_django_celery_beat_tasks_map_field_by_field(dcb: object) -> None:
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        IntervalSchedule,
        PeriodicTask,
        SolarSchedule,
    )

    every10 = IntervalSchedule.objects.create(every=10, period=IntervalSchedule.MINUTES)
    cron = CrontabSchedule.objects.create(minute="*/5", hour="9-17", day_of_week="1-5",
                                          timezone=ZoneInfo("America/New_York"))
    sun = SolarSchedule.objects.create(event="sunrise", latitude=Decimal("52.520008"), longitude=Decimal("13.404954"))
    when = ClockedSchedule.objects.create(clocked_time=datetime(2030, 5, 1, 10, 0, tzinfo=UTC))
    start = datetime(2025, 6, 1, 8, 0, tzinfo=UTC)
    PeriodicTask.objects.create(
        name="interval", task="proj.tasks.a", interval=every10, args='[1, "two"]', kwargs='{"k": true}',
        queue="q1", exchange="ex", routing_key="rk", headers='{"h": 1}', priority=9, expire_seconds=30,
        start_time=start, description="every ten minutes")
    PeriodicTask.objects.create(name="crontab", task="proj.tasks.b", crontab=cron,
                                expires=datetime(2031, 1, 1, tzinfo=UTC), enabled=False)
    PeriodicTask.objects.create(name="solar", task="proj.tasks.c", solar=sun)
    PeriodicTask.objects.create(name="clocked", task="proj.tasks.d", clocked=when, one_off=True)
    PeriodicTask.objects.create(name="bad-args", task="proj.tasks.e", interval=every10, args="[1,")
    PeriodicTask.objects.create(name="bad-kwargs", task="proj.tasks.f", interval=every10, kwargs="[1]")
    last = datetime(2025, 6, 2, 9, 30, 15, 123000, tzinfo=UTC)
    PeriodicTask.objects.filter(name="interval").update(last_run_at=last, total_run_count=42)

    report = from_django_celery_beat(chunk_size=2)
    got = by_name(report)
    assert sorted(got) == ["clocked", "crontab", "interval", "solar"]
    assert dict(report.problems).keys() == {"bad-args", "bad-kwargs"}
    assert "undecodable args" in dict(report.problems)["bad-args"]
    assert "kwargs" in dict(report.problems)["bad-kwargs"]

    assert got["interval"] == (
        PeriodicEntry(name="interval", task="proj.tasks.a", schedule={"type": "interval", "every": 600.0,
                                                                       "relative": False},
                      args=[1, "two"], kwargs={"k": True}, queue="q1", exchange="ex", routing_key="rk",
                      headers={"h": 1}, priority=9, expire_seconds=30.0, start_time="2025-06-01T08:00:00+00:00",
                      description="every ten minutes"),
        PeriodicState(last_run_ms=ms(last), total_run_count=42))
    assert got["crontab"][0] == PeriodicEntry(
        name="crontab", task="proj.tasks.b",
        schedule={"type": "crontab", "minute": "*/5", "hour": "9-17", "day_of_week": "1-5", "day_of_month": "*",
                  "month_of_year": "*", "timezone": "America/New_York"},
        expires="2031-01-01T00:00:00+00:00", enabled=False)
    assert got["solar"][0].schedule == {"type": "solar", "event": "sunrise", "latitude": 52.520008,
                                        "longitude": 13.404954}
    assert got["clocked"][0].schedule == {"type": "clocked", "at": "2030-05-01T10:00:00+00:00"}
    assert got["clocked"][0].one_off is True
    assert got["crontab"][1] == PeriodicState()


@pytest.mark.django_db
def test_django_celery_beat_in_pages(dcb: object) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    every = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS)
    for i in range(23):
        PeriodicTask.objects.create(name=f"t{i:02d}", task="proj.tasks.x", interval=every)
    report = from_django_celery_beat(chunk_size=5)
    assert [e.name for e, _ in report.entries] == [f"t{i:02d}" for i in range(23)]
    part = from_django_celery_beat(queryset=PeriodicTask.objects.filter(name__startswith="t1"))
    assert [e.name for e, _ in part.entries] == [f"t{i}" for i in range(10, 20)]

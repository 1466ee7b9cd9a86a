"""The runtime API with a real dispatcher and worker: changes take effect without a restart;
catch-up after an outage, pause/resume, backfill, paging, templates."""

from __future__ import annotations

import time
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab

import celery_zset_scheduler
from celery_zset_scheduler import periodic
from celery_zset_scheduler.model.periodic import PeriodicEntry, PeriodicEntryError, PeriodicState, occurrence_id
from celery_zset_scheduler.store.snapshot import redis_now_ms

from ..support.helpers import AppFactory, wait_for

pytestmark = pytest.mark.slow


def runs(apps: AppFactory, tag: str) -> list[dict[str, Any]]:
    return [e for e in apps.executions() if e.get("tag") == tag]


def now_ms(apps: AppFactory, app: Celery) -> int:
    return redis_now_ms(apps.store(app))


def test_runtime_add_disable_enable_and_run_now_take_effect_without_a_restart(apps: AppFactory) -> None:
    app = apps(shards=2)
    apps.worker(apps(shards=2))
    apps.dispatcher(app)
    time.sleep(0.5)  # running, with nothing to do
    info = periodic.add(app, "tick", "t.record", 0.5, kwargs={"tag": "tick"})
    assert info.from_config is False and info.state.next_run_ms is not None
    wait_for(lambda: len(runs(apps, "tick")) >= 3, timeout=10, what="the new entry to run")

    assert periodic.disable(app, "tick") == {"tick": "disabled"}
    time.sleep(0.3)
    count = len(runs(apps, "tick"))
    time.sleep(1.5)
    assert len(runs(apps, "tick")) == count  # nothing runs while disabled
    state = periodic.get(app, "tick")
    assert state is not None and state.state.next_run_ms is None and state.state.total_run_count == count

    ids = periodic.run_now(app, "tick", "nope")
    assert ids["nope"] is None and ids["tick"] is not None
    wait_for(lambda: any(e["id"] == ids["tick"] for e in runs(apps, "tick")), timeout=10, what="run-now")
    assert len(runs(apps, "tick")) == count + 1

    assert periodic.enable(app, "tick") == {"tick": "enabled"}
    wait_for(lambda: len(runs(apps, "tick")) >= count + 4, timeout=10, what="runs after enable")
    ran = runs(apps, "tick")
    assert len({e["id"] for e in ran}) == len(ran)  # every occurrence once
    assert periodic.update(app, "tick", kwargs={"tag": "tock"}, schedule=0.3) == "updated"
    wait_for(lambda: len(runs(apps, "tock")) >= 3, timeout=10, what="the updated entry")
    assert periodic.remove(app, "tick") == {"tick": "removed"}
    time.sleep(0.5)
    count = len(runs(apps, "tock"))
    time.sleep(1.0)
    assert len(runs(apps, "tock")) == count and periodic.get(app, "tick") is None


@pytest.mark.parametrize(("catchup", "expected"), [("skip", 0), ("once", 1), ("all", 10)])
def test_occurrences_missed_while_no_dispatcher_ran_follow_the_catch_up_policy(
    apps: AppFactory, catchup: str, expected: int,
) -> None:
    app = apps(shards=2)
    now = now_ms(apps, app)
    # Last run 10.5 minutes ago, every minute: 10 occurrences fell due while nothing ran.
    entry = PeriodicEntry(name="minutely", task="t.record", schedule={"type": "interval", "every": 60.0},
                          kwargs={"tag": "m"}, catchup=catchup)  # type: ignore[arg-type]
    periodic.add_entry(app, entry, state=PeriodicState(last_run_ms=now - 630_000, total_run_count=3))
    apps.worker(apps(shards=2))
    apps.dispatcher(app)
    if expected:
        wait_for(lambda: len(runs(apps, "m")) >= expected, timeout=15, what="the catch-up")
    time.sleep(1.0)
    ran = runs(apps, "m")
    assert len(ran) == expected
    fire_times = [now - 630_000 + k * 60_000 for k in range(1, 11)]
    assert {e["id"] for e in ran} == {occurrence_id("minutely", t) for t in fire_times[len(fire_times) - expected:]}
    info = periodic.get(app, "minutely")
    assert info is not None and info.state.total_run_count == 3 + expected
    assert info.state.next_run_ms == now - 630_000 + 11 * 60_000  # the phase is kept


def test_a_catch_up_window_limits_what_is_caught_up(apps: AppFactory) -> None:
    app = apps(shards=2)
    now = now_ms(apps, app)
    entry = PeriodicEntry(name="w", task="t.record", schedule={"type": "interval", "every": 60.0},
                          kwargs={"tag": "w"}, catchup="all", catchup_window=200.0)
    periodic.add_entry(app, entry, state=PeriodicState(last_run_ms=now - 630_000))
    apps.worker(apps(shards=2))
    apps.dispatcher(app)
    wait_for(lambda: len(runs(apps, "w")) >= 3, timeout=15, what="the catch-up")
    time.sleep(1.0)
    assert len(runs(apps, "w")) == 3  # of the fire times 570, 510 ... 30 s ago, those within 200 s


@pytest.mark.parametrize(("catchup", "low", "high"), [("all", 6, 9), ("skip", 2, 4)])
def test_pause_remembers_and_resume_catches_up(apps: AppFactory, catchup: str, low: int, high: int) -> None:
    app = apps(shards=2)
    apps.worker(apps(shards=2))
    apps.dispatcher(app)
    periodic.add(app, "p", "t.record", 1.0, kwargs={"tag": "p"}, catchup=catchup)
    wait_for(lambda: runs(apps, "p"), timeout=10, what="a first run")
    assert periodic.pause(app, "p", note="maintenance") == {"p": "paused"}
    info = periodic.get(app, "p")
    assert info is not None and info.entry.paused and info.entry.pause_note == "maintenance"
    frozen = info.state.next_run_ms
    time.sleep(0.3)
    before = len(runs(apps, "p"))
    time.sleep(7.5)
    assert len(runs(apps, "p")) == before  # nothing while paused
    after_pause = periodic.get(app, "p")
    assert after_pause is not None and after_pause.state.next_run_ms == frozen  # frozen, not forgotten
    assert periodic.resume(app, "p") == {"p": "resumed"}
    time.sleep(1.5)
    caught = len(runs(apps, "p")) - before
    # About 8 fell due while paused; on time (within twice the lock timeout, 3 s): the last 3.
    assert low <= caught <= high + 1, caught


def test_backfill_runs_the_past_occurrences_once_each_in_order(apps: AppFactory) -> None:
    app = apps(shards=2)
    periodic.add(app, "hourly", "t.record", crontab(minute=0), kwargs={"tag": "b"})
    now = now_ms(apps, app)
    top = now - now % 3_600_000
    start, end = top - 5 * 3_600_000, top - 1
    expected = [top - k * 3_600_000 for k in range(5, 0, -1)]
    assert periodic.backfill_preview(app, "hourly", start, end) == expected
    done = periodic.backfill(app, "hourly", start, end)
    assert done == [(t, occurrence_id("hourly", t)) for t in expected]
    assert periodic.backfill(app, "hourly", start, end) == done  # still pending: nothing new stored
    with pytest.raises(celery_zset_scheduler.ConfigurationError, match="past only"):
        periodic.backfill(app, "hourly", start, now + 3_600_000)
    apps.worker(apps(shards=2))
    apps.dispatcher(app)
    wait_for(lambda: len(runs(apps, "b")) >= 5, timeout=15, what="the backfill")
    time.sleep(0.5)
    assert [e["id"] for e in runs(apps, "b")] == [task_id for _, task_id in done]  # in fire-time order
    info = periodic.get(app, "hourly")
    assert info is not None and info.state.total_run_count == 10  # two backfills counted, 5 stored once


def test_the_occurrence_message_is_celery_s_routing_and_expire_seconds_is_per_occurrence(apps: AppFactory) -> None:
    app = apps(shards=2, task_routes={"t.record": {"queue": "routed"}})
    periodic.add(app, "routed", "t.record", 3600.0, kwargs={"tag": "r"}, priority=7, headers={"h": 1},
                 expire_seconds=30.0, options={"soft_time_limit": 9})
    info = periodic.get(app, "routed")
    assert info is not None and info.message is not None
    assert info.message.queue == "routed" and info.message.routing_key == "routed"
    assert info.message.properties["priority"] == 7
    assert info.message.headers["h"] == 1 and info.message.headers["zset_periodic"] == "routed"
    assert info.message.headers["celery_beat_task"] is True
    assert info.message.headers["timelimit"] == [None, 9]
    ids = periodic.run_now(app, "routed")
    found = celery_zset_scheduler.lookup(app, str(ids["routed"]))
    assert found is not None and found[1] is not None
    entry, message = found
    assert message.task_id == ids["routed"] and message.headers["root_id"] == ids["routed"]
    assert message.properties["correlation_id"] == ids["routed"]
    from celery_zset_scheduler.model.periodic import iso_to_ms

    assert iso_to_ms(message.headers["expires"]) == entry.score_ms + 30_000


def test_list_pages_by_name_and_add_refuses_a_duplicate(apps: AppFactory) -> None:
    app = apps(shards=4)
    names = [f"job-{i:02d}" for i in range(25)]
    statuses = periodic.add_many(app, [PeriodicEntry(name=n, task="t.record", schedule={"type": "interval",
                                                                                         "every": 60.0})
                                       for n in names])
    assert set(statuses.values()) == {"added"}
    seen: list[str] = []
    cursor = None
    while True:
        page = periodic.list(app, limit=10, cursor=cursor)
        seen += [i.entry.name for i in page.entries]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == names
    with pytest.raises(PeriodicEntryError, match="already exists"):
        periodic.add(app, "job-00", "t.record", 30.0)
    assert periodic.add(app, "job-00", "t.record", 30.0, replace_existing=True).entry.schedule["every"] == 30.0
    with pytest.raises(PeriodicEntryError, match="cannot be changed"):
        periodic.update(app, "job-01", name="other")
    assert periodic.update(app, "missing", description="x") == "unknown"
    with pytest.raises(PeriodicEntryError, match="schedule.minute"):
        periodic.add(app, "bad", "t.record", {"type": "crontab", "minute": "61"})


def test_a_full_store_is_drained_first_then_periodic_entries_run(apps: AppFactory) -> None:
    from celery_zset_scheduler.errors import StoreUnavailable
    from celery_zset_scheduler.testing import RedisServer

    full = RedisServer(extra=["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]).start()
    try:
        app = apps(shards=2, zset_scheduler_url=full.url)
        periodic.add(app, "beat", "t.record", 0.5, kwargs={"tag": "full"})
        ids = []
        with pytest.raises(StoreUnavailable, match="used memory > 'maxmemory'"):
            for i in range(100_000):
                ids.append(app.tasks["t.record"].apply_async(kwargs={"tag": i, "pad": "x" * 200}, countdown=1).id)
        dispatcher = apps.dispatcher(app)
        apps.worker(apps(shards=2), pool="threads", concurrency=4)
        wait_for(lambda: set(ids) <= {e["id"] for e in apps.executions()}, timeout=120, what="the drain")
        wait_for(lambda: len(runs(apps, "full")) >= 3, timeout=20, what="the periodic entry, once there is room")
        assert dispatcher.thread.is_alive() and dispatcher.error is None  # type: ignore[attr-defined]
        ran = runs(apps, "full")
        assert len({e["id"] for e in ran}) == len(ran)
    finally:
        full.close()

"""``beat_schedule`` synced into the store at dispatcher start: changed ones updated, removed ones
removed, runtime ones left alone; concurrent starts with different configurations end in one."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab

from celery_zset_scheduler import periodic
from celery_zset_scheduler.store.periodic import PeriodicStore

from ..support.helpers import AppFactory, stopped, wait_for

pytestmark = pytest.mark.slow


def synced(dispatcher: Any) -> bool:
    return bool(dispatcher.periodic._prepared)


def configured(app: Celery) -> dict[str, periodic.PeriodicInfo]:
    page = periodic.list(app, limit=1000)
    return {i.entry.name: i for i in page.entries if i.from_config}


def test_config_is_synced_across_two_starts(apps: AppFactory) -> None:
    first = apps(shards=2, beat_schedule={
        "a": {"task": "t.record", "schedule": 60.0, "kwargs": {"tag": "a"}},
        "b": {"task": "t.record", "schedule": crontab(minute=0), "options": {"queue": "q"}},
        "kept": {"task": "t.record", "schedule": 3600.0, "catchup": "all", "overlap": "skip", "jitter": 1.5},
    })
    dispatcher = apps.dispatcher(first)
    with stopped(dispatcher):
        wait_for(lambda: synced(dispatcher), what="the first sync")
    assert set(configured(first)) == {"a", "b", "kept"}
    kept = periodic.get(first, "kept")
    assert kept is not None and (kept.entry.catchup, kept.entry.overlap, kept.entry.jitter) == ("all", "skip", 1.5)
    b = periodic.get(first, "b")
    assert b is not None and b.message is not None and b.message.queue == "q"
    assert b.entry.schedule["timezone"] == "UTC"  # the app's zone, written into the entry
    # At run time: an entry of our own, a config entry disabled, one run of it.
    periodic.add(first, "runtime", "t.record", 10.0)
    periodic.disable(first, "a")
    periodic.run_now(first, "a")
    untouched = PeriodicStore(apps.store(first)).read("kept").state

    second = apps(shards=2, beat_schedule={
        "a": {"task": "t.record", "schedule": 30.0, "kwargs": {"tag": "a2"}},  # changed
        "kept": {"task": "t.record", "schedule": 3600.0, "catchup": "all", "overlap": "skip", "jitter": 1.5},
        "d": {"task": "t.record", "schedule": crontab(minute="*/5", hour="9-17")},  # new; "b" is gone
    })
    dispatcher = apps.dispatcher(second)
    with stopped(dispatcher):
        wait_for(lambda: synced(dispatcher), what="the second sync")
    assert set(configured(second)) == {"a", "kept", "d"}
    assert periodic.get(second, "b") is None  # removed from beat_schedule: removed
    runtime = periodic.get(second, "runtime")
    assert runtime is not None and not runtime.from_config  # created at run time: left alone
    a = periodic.get(second, "a")
    assert a is not None and a.entry.schedule["every"] == 30.0 and a.entry.kwargs == {"tag": "a2"}
    assert a.entry.enabled is False  # switched off at run time: stays off
    assert a.state.total_run_count == 1  # history kept
    assert PeriodicStore(apps.store(second)).read("kept").state == untouched  # unchanged: not even rewritten


def test_a_config_entry_removed_at_run_time_comes_back_only_while_configured(apps: AppFactory) -> None:
    app = apps(shards=2, beat_schedule={"x": {"task": "t.record", "schedule": 60.0}})
    for _ in range(2):
        dispatcher = apps.dispatcher(app)
        with stopped(dispatcher):
            wait_for(lambda d=dispatcher: synced(d), what="a sync")
        assert "x" in configured(app)
        assert periodic.remove(app, "x") == {"x": "removed"}


def test_a_bad_beat_schedule_entry_refuses_to_start_naming_it(apps: AppFactory) -> None:
    from celery_zset_scheduler.celery.dispatcher.build import build_dispatcher
    from celery_zset_scheduler.errors import ConfigurationError

    app = apps(shards=2, beat_schedule={"oops": {"task": "t.record", "schedule": 60.0, "catchup": "sometimes"}})
    with pytest.raises(ConfigurationError, match="'oops'.*catchup"):
        build_dispatcher(app)
    app = apps(shards=2, beat_schedule={"typo": {"task": "t.record", "schedul": 60.0}})
    with pytest.raises(ConfigurationError, match="unknown key 'schedul'"):
        build_dispatcher(app)


@pytest.mark.parametrize("round_", range(3))
def test_two_dispatchers_starting_together_with_different_configs_end_with_one_of_them(
    apps: AppFactory, round_: int,
) -> None:
    configs = [
        {"only-x": {"task": "t.record", "schedule": 60.0}, "shared": {"task": "t.record", "schedule": 10.0},
         "x2": {"task": "t.record", "schedule": crontab(minute=5)}},
        {"only-y": {"task": "t.record", "schedule": 120.0}, "shared": {"task": "t.record", "schedule": 20.0}},
    ]
    made = [apps(shards=4, prefix=f"sync{round_}", beat_schedule=c) for c in configs]
    dispatchers = [apps.dispatcher(app) for app in made]
    wait_for(lambda: all(synced(d) for d in dispatchers), what="both syncs")
    final = configured(made[0])
    winner = next(i for i, c in enumerate(configs) if set(c) == set(final))  # exactly one config, whole
    assert final["shared"].entry.schedule["every"] == configs[winner]["shared"]["schedule"]
    index = dict(PeriodicStore(apps.store(made[0])).config_index())
    assert set(index) == set(configs[winner])

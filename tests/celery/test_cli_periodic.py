"""``celery zset periodic ...`` and ``celery zset import-beat`` against a real Redis, a real RedBeat
store and real django-celery-beat models."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from celery import Celery
from celery.schedules import crontab, schedule
from redbeat import RedBeatSchedulerEntry

import celery_zset_scheduler
from celery_zset_scheduler import periodic
from celery_zset_scheduler.model.periodic import iso_to_ms, occurrence_id
from celery_zset_scheduler.store.snapshot import redis_now_ms

from ..support.cli_support import invoke, out
from ..support.helpers import AppFactory, wait_for

UTC = timezone.utc


def add(app: Celery, *args: Any) -> Any:
    return invoke(app, "periodic", "add", *args, "--yes", "--json")


def test_add_ls_show_in_the_conventions_of_the_other_commands(apps: AppFactory) -> None:
    app = apps(shards=2)
    added = out(add(app, "report", "t.record", "--cron", "30 7 * * 1-5", "--timezone", "Europe/Berlin",
                    "--kwargs", '{"tag": "r"}', "--queue", "reports", "--priority", "3", "--catchup", "all",
                    "--jitter", "60", "--description", "weekday mornings"))
    assert added["status"] == "added"
    entry = added["entry"]
    assert entry["schedule"] == {"type": "crontab", "minute": "30", "hour": "7", "day_of_week": "1-5",
                                 "day_of_month": "*", "month_of_year": "*", "timezone": "Europe/Berlin"}
    assert entry["schedule_text"] == "cron 30 7 * * 1-5 Europe/Berlin"
    assert (entry["catchup"], entry["jitter"], entry["queue"], entry["status"]) == ("all", 60.0, "reports", "enabled")
    assert entry["source"] == "runtime" and entry["next_run_ms"] is not None
    out(add(app, "tick", "t.record", "--every", "90"))
    out(add(app, "once", "t.record", "--at", "+1h", "--disabled"))

    listing = out(invoke(app, "periodic", "ls", "--json"))
    assert [e["name"] for e in listing["entries"]] == ["once", "report", "tick"] and listing["cursor"] is None
    page = out(invoke(app, "periodic", "ls", "--json", "--limit", "2"))
    assert [e["name"] for e in page["entries"]] == ["once", "report"] and page["cursor"]
    rest = out(invoke(app, "periodic", "ls", "--json", "--limit", "2", "--cursor", page["cursor"]))
    assert [e["name"] for e in rest["entries"]] == ["tick"] and rest["cursor"] is None
    table = invoke(app, "periodic", "ls")
    assert table.exit_code == 0
    assert "NAME" in table.output and "every 90s" in table.output and "disabled" in table.output

    shown = out(invoke(app, "periodic", "show", "report", "--json"))
    assert shown["routing"] == {"exchange": "", "routing_key": "reports", "queue": "reports", "priority": 3}
    text = invoke(app, "periodic", "show", "report")
    assert text.exit_code == 0 and "weekday mornings" in text.output and "queue=reports" in text.output
    missing = invoke(app, "periodic", "show", "nope")
    assert missing.exit_code == 3 and "no periodic entry named 'nope'" in missing.output

    again = add(app, "tick", "t.record", "--every", "30")
    assert again.exit_code == 3 and "--replace" in again.output
    replaced = out(add(app, "tick", "t.record", "--every", "30", "--replace"))
    assert replaced["status"] == "updated" and replaced["entry"]["schedule"]["every"] == 30.0


def test_bad_input_is_one_line_and_changes_need_a_yes(apps: AppFactory) -> None:
    app = apps(shards=2)
    two = invoke(app, "periodic", "add", "x", "t.record", "--every", "5", "--cron", "* * * * *", "--yes")
    assert two.exit_code == 2 and "exactly one schedule" in two.output
    bad = invoke(app, "periodic", "add", "x", "t.record", "--cron", "61 * * * *", "--yes")
    assert bad.exit_code == 1 and bad.output.count("\n") == 1 and "schedule.minute" in bad.output
    braces = invoke(app, "periodic", "add", "x{1}", "t.record", "--every", "5", "--yes")
    assert braces.exit_code == 1 and "hash tags" in braces.output
    refused = invoke(app, "periodic", "add", "x", "t.record", "--every", "5", input="n\n")
    assert refused.exit_code == 4 and periodic.get(app, "x") is None
    assert invoke(app, "periodic", "add", "x", "t.record", "--every", "5", input="y\n").exit_code == 0
    assert invoke(app, "periodic", "rm", "x", input="\n").exit_code == 4 and periodic.get(app, "x") is not None


def test_switches_run_now_and_backfill(apps: AppFactory) -> None:
    app = apps(shards=2)
    out(add(app, "a", "t.record", "--every", "60", "--kwargs", '{"tag": "a"}'))
    out(add(app, "b", "t.record", "--cron", "0 * * * *", "--kwargs", '{"tag": "b"}'))
    paused = out(invoke(app, "periodic", "pause", "a", "nope", "--note", "db migration", "--yes", "--json"))
    assert paused["counts"] == {"paused": 1, "unknown": 1}
    assert invoke(app, "periodic", "pause", "a", "nope", "--yes").exit_code == 3
    assert out(invoke(app, "periodic", "show", "a", "--json"))["pause_note"] == "db migration"
    assert out(invoke(app, "periodic", "resume", "a", "--yes", "--json"))["counts"] == {"resumed": 1}
    assert out(invoke(app, "periodic", "disable", "a", "b", "--yes", "--json"))["counts"] == {"disabled": 2}
    assert out(invoke(app, "periodic", "disable", "a", "--yes", "--json"))["counts"] == {"unchanged": 1}
    assert out(invoke(app, "periodic", "enable", "a", "--yes", "--json"))["counts"] == {"enabled": 1}

    ran = out(invoke(app, "periodic", "run-now", "b", "--yes", "--json"))
    (result,) = ran["results"]
    assert result["status"] == "triggered" and result["task_id"]
    listed = out(invoke(app, "ls", "--json"))  # an ordinary stored task
    assert [t["id"] for t in listed["tasks"]] == [result["task_id"]]

    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start, end = (now - timedelta(hours=3)).isoformat(), (now - timedelta(seconds=1)).isoformat()
    refused = invoke(app, "periodic", "backfill", "b", "--start", start, "--end", end, input="n\n")
    assert refused.exit_code == 4
    filled = out(invoke(app, "periodic", "backfill", "b", "--start", start, "--end", end, "--yes", "--json"))
    expected = [iso_to_ms((now - timedelta(hours=h)).isoformat()) for h in (3, 2, 1)]
    assert [o["fire_ms"] for o in filled["occurrences"]] == expected
    assert [o["task_id"] for o in filled["occurrences"]] == [occurrence_id("b", t) for t in expected]
    future = invoke(app, "periodic", "backfill", "b", "--start", "now", "--end", "+1h", "--yes")
    assert future.exit_code == 1 and "past only" in future.output
    removed = out(invoke(app, "periodic", "rm", "a", "b", "--yes", "--json"))
    assert removed["counts"] == {"removed": 2}


def test_status_shows_the_periodic_entries_and_their_leader(apps: AppFactory) -> None:
    app = apps(shards=2)
    periodic.add(app, "s", "t.record", 3600.0)
    dispatcher = apps.dispatcher(app)
    wait_for(lambda: out(invoke(app, "status", "--json"))["shards"][0]["leader"] is not None
             and out(invoke(app, "status", "--json"))["shards"][1]["leader"] is not None, what="leaders")
    data = out(invoke(app, "status", "--json"))
    assert data["periodic"]["entries"] == 1 and data["periodic"]["scheduled"] == 1
    shard = periodic.get(app, "s").shard  # type: ignore[union-attr]
    assert data["shards"][shard]["periodic_entries"] == 1
    text = invoke(app, "status").output
    assert "periodic entries: 1 (1 scheduled)" in text
    assert f"shard {shard}: 1, next in " in text and f"leader {dispatcher.member_id}" in text


# -- import-beat ----------------------------------------------------------------------------------

def test_import_from_a_store_written_by_redbeat(apps: AppFactory, r: redis.Redis) -> None:
    app = apps(shards=2)
    url = app.conf.broker_url
    rb = Celery("rb", set_as_current=False)
    rb.conf.redbeat_redis_url = url
    last = datetime.now(UTC) - timedelta(minutes=30)
    RedBeatSchedulerEntry("nightly", "t.record", crontab(minute=0, hour=3), app=rb, enabled=False).save()
    RedBeatSchedulerEntry("bad", "t.record", 10.0, options={"countdown": 5}, app=rb).save()
    ping = RedBeatSchedulerEntry("ping", "t.record", schedule(timedelta(seconds=30)), kwargs={"tag": "ping"},
                                 options={"queue": "fast", "expires": 25}, app=rb).save()
    for _ in range(8):
        ping = next(ping)  # RedBeat's own run bookkeeping (meta: last_run_at, total_run_count)
    ping._next_instance(last_run_at=last)  # the ninth run, half an hour ago
    rb.redbeat_redis.connection_pool.disconnect()  # type: ignore[attr-defined]

    dry = invoke(app, "import-beat", "--from", "redbeat", "--redbeat-url", url, "--dry-run", "--json")
    assert dry.exit_code == 3  # one entry cannot be mapped
    report = out(dry)
    assert {x["name"]: x["status"] for x in report["results"]} == {"nightly": "would_import", "ping": "would_import"}
    assert [p["name"] for p in report["problems"]] == ["bad"] and "countdown" in report["problems"][0]["reason"]
    assert periodic.get(app, "ping") is None  # a dry run writes nothing

    done = invoke(app, "import-beat", "--from", "redbeat", "--redbeat-url", url, "--yes", "--json")
    assert out(done)["counts"] == {"added": 2, "not_mappable": 1}
    ping_here = periodic.get(app, "ping")
    assert ping_here is not None and ping_here.entry.queue == "fast" and ping_here.entry.expire_seconds == 25.0
    assert ping_here.state.total_run_count == 9
    assert ping_here.state.last_run_ms == iso_to_ms(last.isoformat())
    assert ping_here.state.next_run_ms == ping_here.state.last_run_ms + 30_000  # overdue: runs once on start
    nightly = periodic.get(app, "nightly")
    assert nightly is not None and not nightly.entry.enabled and nightly.state.next_run_ms is None
    again = out(invoke(app, "import-beat", "--from", "redbeat", "--redbeat-url", url, "--yes", "--json"))
    assert again["counts"] == {"exists": 2, "not_mappable": 1}

    # The imported entry runs here: its overdue occurrence once (catch-up "once"), expiring 25 s
    # after it is handed over (not after its fire time half an hour ago).
    store = apps.store(app)
    apps.dispatcher(app)
    fired = wait_for(lambda: (lambda i: i if i and i.state.total_run_count == 10 else None)(periodic.get(app, "ping")),
                     timeout=10, what="the overdue occurrence")
    found = celery_zset_scheduler.lookup(app, fired.state.last_task_id)
    if found is None:  # already handed over: read it from the broker's queue
        raw = redis.Redis.from_url(url).lrange("fast", 0, -1)
        assert raw, "the occurrence is neither stored nor queued"
        expires = json.loads(raw[0])["headers"]["expires"]
    else:
        expires = found[1].headers["expires"]  # type: ignore[union-attr]
    assert iso_to_ms(expires) > redis_now_ms(store)


@pytest.mark.django_db
def test_import_from_a_database_written_by_django_celery_beat(apps: AppFactory) -> None:
    from django.conf import settings

    if "django_celery_beat" not in settings.INSTALLED_APPS:
        pytest.skip("Django was configured elsewhere without django_celery_beat")
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

    every = IntervalSchedule.objects.create(every=5, period=IntervalSchedule.MINUTES)
    cron = CrontabSchedule.objects.create(minute="0", hour="6", timezone="Asia/Tokyo")
    PeriodicTask.objects.create(name="sync", task="t.record", interval=every, kwargs='{"tag": "sync"}',
                                queue="q", priority=4, description="five minutes")
    PeriodicTask.objects.create(name="morning", task="t.record", crontab=cron, one_off=True)
    PeriodicTask.objects.create(name="broken", task="t.record", interval=every, args="[1,")
    app = apps(shards=2)
    result = invoke(app, "import-beat", "--from", "django-celery-beat", "--yes", "--json")
    assert result.exit_code == 3
    report = out(result)
    assert report["counts"] == {"added": 2, "not_mappable": 1} and report["problems"][0]["name"] == "broken"
    sync = periodic.get(app, "sync")
    assert sync is not None
    assert (sync.entry.schedule["every"], sync.entry.queue, sync.entry.priority) == (300.0, "q", 4)
    assert sync.entry.description == "five minutes"
    morning = periodic.get(app, "morning")
    assert morning is not None and morning.entry.one_off and morning.entry.schedule["timezone"] == "Asia/Tokyo"

"""``celery zset status|ls|show|cancel|reschedule|run-now`` against a real Redis, with real tasks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import redis

from celery_zset_scheduler.model.clock import time_ms as redis_ms
from celery_zset_scheduler.model.codec import encode
from celery_zset_scheduler.ops.status import read_status
from celery_zset_scheduler.store.shared_gc import collect, step_call
from celery_zset_scheduler.testing import RedisServer

from ..store.test_shared import message
from ..support.cli_support import cli_env, invoke, out
from ..support.helpers import BROKER_DB, AppFactory, wait_for
from ..support.tools import counts, pending

STATUS_KEYS = {"prefix", "shard_count", "redis_time_ms", "redis_time", "totals", "dead_letters", "stats",
               "dispatchers", "periodic", "cluster", "shards", "shared_prefixes"}
SHARD_KEYS = {"shard", "node", "pending", "inflight", "oldest_due_ms", "lag_seconds", "locked", "leader", "epoch",
              "rate_per_second", "dispatched", "periodic_entries", "periodic_scheduled", "periodic_next_run_ms",
              "shared_in_use", "shared_set_aside", "shared_to_delete", "collecting", "last_cycle_ms"}
CELERY = str(Path(sys.executable).with_name("celery"))


def schedule(app: Any, n: int, countdown: float = 3600, name: str = "t.record", **kwargs: Any) -> list[str]:
    return [app.send_task(name, kwargs={"tag": i, **kwargs}, countdown=countdown).id for i in range(n)]


# -- status -------------------------------------------------------------------------------------


def test_status_on_an_empty_store(apps: AppFactory) -> None:
    app = apps()
    data = out(invoke(app, "status", "--json"))
    assert set(data) == STATUS_KEYS
    assert data["totals"] == {"pending": 0, "inflight": 0, "oldest_due_ms": None, "lag_seconds": 0.0,
                              "rate_per_second": 0.0}
    assert data["dispatchers"] == [] and data["dead_letters"] == 0
    assert [s["shard"] for s in data["shards"]] == [0, 1, 2, 3]
    assert all(s["pending"] == 0 and s["leader"] is None and not s["locked"] for s in data["shards"])
    text = invoke(app, "status")
    assert text.exit_code == 0
    assert "dispatchers alive: 0" in text.output and "dead letters: 0" in text.output


def test_status_shows_counts_leaders_epochs_and_dispatch_rate(apps: AppFactory) -> None:
    app = apps()
    far = schedule(app, 7)
    schedule(app, 12, countdown=0.2)
    dispatcher = apps.dispatcher(app)
    store = apps.store(app)
    wait_for(lambda: pending(store) == 7 and counts(store) and sum(c.inflight for c in counts(store)) == 0,
             what="the due tasks dispatched")

    def announced() -> Any:
        data = out(invoke(app, "status", "--json"))
        done = sum(s["dispatched"] or 0 for s in data["shards"]) == 12
        return data if done and all(s["leader"] for s in data["shards"]) else None

    data = wait_for(announced, what="every leader announcing its dispatches")
    assert data["totals"]["pending"] == 7 and data["totals"]["inflight"] == 0
    assert [s["pending"] for s in data["shards"]] == [c.pending for c in counts(store)]
    assert {s["leader"] for s in data["shards"]} == {dispatcher.member_id}
    assert all(s["locked"] and s["epoch"] >= 1 for s in data["shards"])
    assert all(set(s) == SHARD_KEYS for s in data["shards"])
    assert data["dispatchers"] == [{"id": dispatcher.member_id, "shards": [0, 1, 2, 3], "member": True,
                                    "expires_ms": data["dispatchers"][0]["expires_ms"]}]
    assert data["dispatchers"][0]["expires_ms"] > data["redis_time_ms"]
    assert data["totals"]["rate_per_second"] > 0
    assert data["totals"]["oldest_due_ms"] == min(store.get(i).score_ms for i in far)  # type: ignore[union-attr]
    text = invoke(app, "status").output
    assert dispatcher.member_id in text and "dispatchers alive: 1" in text


def test_status_lag_is_the_wait_of_the_oldest_overdue_task(apps: AppFactory) -> None:
    app = apps()
    (task_id,) = schedule(app, 1, countdown=0.05)
    store = apps.store(app)
    entry = store.get(task_id)
    assert entry is not None
    time.sleep(0.6)
    data = out(invoke(app, "status", "--json"))
    now = data["redis_time_ms"]
    assert data["totals"]["lag_seconds"] == (now - entry.score_ms) / 1000 >= 0.5
    shard = data["shards"][entry.shard]
    assert shard["lag_seconds"] == data["totals"]["lag_seconds"] and shard["oldest_due_ms"] == entry.score_ms


def test_status_shows_the_shared_prefixes_and_where_their_collection_is(apps: AppFactory) -> None:
    app = apps(zset_scheduler_collect_interval=600)
    data = out(invoke(app, "status", "--json"))
    assert data["shared_prefixes"] == {"in_use": 0, "set_aside": 0, "to_delete": 0, "collecting_shards": [],
                                       "last_cycle_ms": None}
    assert "shared prefixes: 0 in use, 0 set aside, 0 to delete; not collected yet" in invoke(app, "status").output
    schedule(app, 40)  # one producer, one task name, one queue: one prefix in every shard it wrote to
    store = apps.store(app)
    written = [s for s in range(4) if store.client.hlen(store.keys.shard(s).shared)]
    assert len(written) >= 2
    data = out(invoke(app, "status", "--json"))
    assert data["shared_prefixes"]["in_use"] == len(written)
    assert [s["shared_in_use"] for s in data["shards"]] == [int(s in written) for s in range(4)]

    # A collection (the period 0 the dispatchers' interval stands for) on two shards: the first
    # look starts a shard's clock, the next step begins a cycle and sets its prefix aside.
    first, second = written[:2]
    looked = store.scripts.run(step_call(store.keys, first, 0))
    assert looked.phase == "wait"
    data = out(invoke(app, "status", "--json"))
    clock = data["shards"][first]["last_cycle_ms"]
    assert clock is not None and abs(clock - data["redis_time_ms"]) < 60_000
    assert data["shared_prefixes"]["last_cycle_ms"] == clock and data["shared_prefixes"]["collecting_shards"] == []
    assert "next cycle can begin in 9m" in invoke(app, "status").output  # 600 s after that clock started
    assert store.scripts.run(step_call(store.keys, first, 0)).phase == "begun"
    data = out(invoke(app, "status", "--json"))
    assert data["shared_prefixes"]["collecting_shards"] == [first] and data["shards"][first]["collecting"]
    assert (data["shards"][first]["shared_in_use"], data["shards"][first]["shared_set_aside"]) == (0, 1)
    assert data["shared_prefixes"] == {**data["shared_prefixes"], "in_use": len(written) - 1, "set_aside": 1}
    assert f"a collection is under way on shards {first}" in invoke(app, "status").output
    collect(store.scripts, store.keys, first, 0)  # the scan finds the prefix in use: back in `shared`
    for _ in range(2):
        collect(store.scripts, store.keys, second, 0)  # looked at, then one whole cycle
    data = out(invoke(app, "status", "--json"))
    assert data["shared_prefixes"]["in_use"] == len(written) and data["shared_prefixes"]["collecting_shards"] == []
    assert data["shared_prefixes"]["set_aside"] == data["shared_prefixes"]["to_delete"] == 0

    # Entries of a producer since restarted, cancelled: a cycle finds no value referring to its
    # prefix, which then waits one more cycle to be deleted.
    gone = [f"gone-{n}" for n in range(8)]
    for n, task_id in enumerate(gone):
        store.schedule(task_id, 10**13, encode(message(task_id, n, origin="gen1@web-gone")))
    assert set(store.cancel(gone).values()) == {"cancelled"}
    extra = out(invoke(app, "status", "--json"))["shared_prefixes"]["in_use"] - len(written)
    assert extra >= 1
    for shard in range(4):  # one whole cycle each (a shard not looked at yet: the look first)
        if collect(store.scripts, store.keys, shard, 0)[-1].phase == "wait":
            assert collect(store.scripts, store.keys, shard, 0)[-1].phase == "ended"
    data = out(invoke(app, "status", "--json"))
    assert data["shared_prefixes"]["in_use"] == len(written) and data["shared_prefixes"]["to_delete"] == extra
    assert sum(s["shared_to_delete"] for s in data["shards"]) == extra
    off = invoke(apps(zset_scheduler_collect_interval=0), "status").output
    assert "collection off (zset_scheduler_collect_interval = 0)" in off


def test_status_watch_refreshes(apps: AppFactory) -> None:
    app = apps()
    result = invoke(app, "status", "--watch", "--json", "--interval", "0.1", "--count", "3")
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3
    times = [json.loads(line)["redis_time_ms"] for line in lines]
    assert times == sorted(times) and times[-1] - times[0] >= 150


def test_status_of_a_real_celery_process(apps: AppFactory, redis_server: RedisServer) -> None:
    app = apps()  # the same store and prefix as tests.support.cli_app
    ids = schedule(app, 5)
    proc = subprocess.run(
        [CELERY, "-A", "tests.support.cli_app", "zset", "status", "--json"], env=cli_env(redis_server),
        capture_output=True, text=True, timeout=60, cwd=str(Path(__file__).resolve().parent.parent.parent),
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == STATUS_KEYS
    assert data["totals"]["pending"] == len(ids) and data["prefix"] == "zt" and data["shard_count"] == 4


# -- ls and show ---------------------------------------------------------------------------------


def test_ls_pages_through_every_task_in_due_order_with_ties(apps: AppFactory) -> None:
    app = apps()
    base = datetime.now(timezone.utc) + timedelta(hours=1)
    ids = []
    for i in range(41):  # groups of 4 tasks due at the same millisecond, spread over the shards
        ids.append(app.send_task("t.record", kwargs={"tag": i}, eta=base + timedelta(seconds=i // 4)).id)
    store = apps.store(app)
    expected = sorted(ids, key=lambda i: (store.get(i).score_ms, i))  # type: ignore[union-attr]
    seen: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        args = ["ls", "--json", "--limit", "6"] + (["--cursor", cursor] if cursor else [])
        page = out(invoke(app, *args))
        assert len(page["tasks"]) <= 6
        seen += page["tasks"]
        pages += 1
        cursor = page["cursor"]
        if cursor is None:
            break
    assert [t["id"] for t in seen] == expected
    assert pages in (7, 8)
    first = seen[0]
    assert set(first) == {"id", "task", "shard", "due_ms", "due"} and first["task"] == "t.record"
    assert first["shard"] == store.get(first["id"]).shard  # type: ignore[union-attr]


def test_ls_task_filter_reads_a_bounded_number_per_call(apps: AppFactory) -> None:
    app = apps()
    wanted = set()
    for i in range(30):
        app.send_task("t.record", countdown=3600 + i)
        wanted.add(app.send_task("t.other", countdown=3600 + i + 0.5).id)
    found: list[str] = []
    cursor, calls = None, 0
    while True:
        args = ["ls", "--json", "--task", "t.other", "--scan-limit", "7", "--limit", "50"]
        page = out(invoke(app, *args, *(["--cursor", cursor] if cursor else [])))
        assert page["scanned"] <= 7
        found += [t["id"] for t in page["tasks"]]
        assert all(t["task"] == "t.other" for t in page["tasks"])
        calls += 1
        cursor = page["cursor"]
        if cursor is None:
            break
    assert sorted(found) == sorted(wanted) and len(found) == 30
    assert calls >= 60 // 7


def test_ls_filters_by_due_time_and_shard(apps: AppFactory) -> None:
    app = apps()
    soon = set(schedule(app, 10, countdown=600))
    schedule(app, 10, countdown=7200)
    data = out(invoke(app, "ls", "--json", "--due-before", "+1h", "--limit", "100"))
    assert {t["id"] for t in data["tasks"]} == soon and data["cursor"] is None
    later = out(invoke(app, "ls", "--json", "--due-after", "+1h", "--limit", "100"))
    assert len(later["tasks"]) == 10 and not soon & {t["id"] for t in later["tasks"]}
    one = out(invoke(app, "ls", "--json", "--shard", "2", "--limit", "100"))
    assert {t["shard"] for t in one["tasks"]} <= {2}
    assert len(one["tasks"]) == counts(apps.store(app))[2].pending


def test_ls_refuses_a_cursor_of_other_filters_or_a_broken_one(apps: AppFactory) -> None:
    app = apps()
    schedule(app, 5)
    cursor = out(invoke(app, "ls", "--json", "--limit", "2"))["cursor"]
    assert cursor
    other = invoke(app, "ls", "--limit", "2", "--task", "t.record", "--cursor", cursor)
    assert other.exit_code == 2 and "other filters" in other.output
    broken = invoke(app, "ls", "--cursor", "not-a-cursor")
    assert broken.exit_code == 2 and "invalid cursor" in broken.output
    assert "Traceback" not in broken.output + other.output


def test_ls_on_an_empty_store(apps: AppFactory) -> None:
    app = apps()
    assert out(invoke(app, "ls", "--json")) == {"tasks": [], "cursor": None, "scanned": 0}
    text = invoke(app, "ls")
    assert text.exit_code == 0 and "no pending tasks match" in text.output


def test_show_prints_the_stored_task(apps: AppFactory) -> None:
    app = apps()
    result = app.tasks["t.record"].apply_async(
        args=(), kwargs={"tag": "shown", "due": 1.5}, countdown=600, priority=3, headers={"tenant": "acme"},
    )
    data = out(invoke(app, "show", result.id, "--json"))
    entry = apps.store(app).get(result.id)
    assert entry is not None
    assert data["id"] == result.id and data["state"] == "pending" and data["task"] == "t.record"
    assert data["kwargs"] == {"tag": "shown", "due": 1.5} and data["args"] == []
    assert data["shard"] == entry.shard and data["due_ms"] == entry.score_ms
    assert data["headers"]["tenant"] == "acme" and data["headers"]["id"] == result.id
    assert data["routing"] == {"exchange": "", "routing_key": "celery", "queue": "celery", "priority": 3}
    assert data["error"] is None
    text = invoke(app, "show", result.id)
    assert text.exit_code == 0
    assert '"shown"' in text.output and "header tenant" in text.output and "celery" in text.output


def test_show_unknown_id_is_one_line_and_exit_code_3(apps: AppFactory) -> None:
    app = apps()
    result = invoke(app, "show", "no-such-id")
    assert result.exit_code == 3
    assert result.output.strip() == "Error: no pending or in-flight task with id 'no-such-id'"


# -- cancel, reschedule, run-now ----------------------------------------------------------------


def test_cancel_asks_first_and_refusal_changes_nothing(apps: AppFactory) -> None:
    app = apps()
    ids = schedule(app, 2)
    refused = invoke(app, "cancel", *ids, input="n\n")
    assert refused.exit_code == 4 and "aborted" in refused.output
    assert pending(apps.store(app)) == 2
    no_answer = invoke(app, "cancel", *ids, input="")
    assert no_answer.exit_code == 4 and pending(apps.store(app)) == 2
    agreed = invoke(app, "cancel", ids[0], input="y\n")
    assert agreed.exit_code == 0 and apps.store(app).get(ids[0]) is None


def test_cancel_with_yes_reports_each_id(apps: AppFactory) -> None:
    app = apps()
    ids = schedule(app, 3)
    data = out(invoke(app, "cancel", *ids, "unknown-id", "--yes", "--json"))
    assert data == {
        "action": "cancel",
        "results": [{"id": i, "status": "cancelled"} for i in ids] + [{"id": "unknown-id", "status": "unknown"}],
        "counts": {"cancelled": 3, "unknown": 1},
    }
    assert invoke(app, "cancel", "unknown-id", "--yes").exit_code == 3
    assert pending(apps.store(app)) == 0


def test_cancel_ids_from_stdin(apps: AppFactory) -> None:
    app = apps()
    ids = schedule(app, 4)
    assert invoke(app, "cancel", "-", input="\n".join(ids)).exit_code == 2  # stdin needs --yes
    result = invoke(app, "cancel", "-", "--yes", "--json", input="\n".join(ids) + "\n")
    assert out(result)["counts"] == {"cancelled": 4}


def test_bulk_cancel_by_task_name_keeps_the_rest_even_with_ties(apps: AppFactory) -> None:
    app = apps(shards=1)
    eta = datetime.now(timezone.utc) + timedelta(hours=2)
    doomed: set[str] = set()
    kept: set[str] = set()
    for i in range(1300):  # three pages, every task due at the same millisecond (ties: id order)
        name = "t.other" if i % 2 else "t.record"  # so the last entry of each page is cancelled
        task_id = app.send_task(name, kwargs={"tag": i}, eta=eta, task_id=f"id-{i:05d}").id
        (doomed if name == "t.other" else kept).add(task_id)
    assert invoke(app, "cancel", "--task", "t.other", input="n\n").exit_code == 4
    data = out(invoke(app, "cancel", "--task", "t.other", "--yes", "--json"))
    assert data == {"action": "cancel", "results": [], "counts": {"cancelled": len(doomed)}}
    store = apps.store(app)
    assert pending(store) == len(kept)
    assert all(store.get(i) is None for i in doomed)


def test_bulk_cancel_needs_ids_or_a_selection(apps: AppFactory) -> None:
    app = apps()
    ids = schedule(app, 3)
    assert invoke(app, "cancel").exit_code == 2
    assert invoke(app, "cancel", ids[0], "--all").exit_code == 2
    soon = schedule(app, 2, countdown=60)
    data = out(invoke(app, "cancel", "--due-before", "+5m", "--yes", "--json"))
    assert data["counts"] == {"cancelled": 2} and all(apps.store(app).get(i) is None for i in soon)
    assert out(invoke(app, "cancel", "--all", "--yes", "--json"))["counts"] == {"cancelled": 3}


def test_reschedule_moves_a_task(apps: AppFactory) -> None:
    app = apps()
    (task_id,) = schedule(app, 1)
    store = apps.store(app)
    assert invoke(app, "reschedule", task_id, "--countdown", "60", input="n\n").exit_code == 4
    before = store.get(task_id)
    assert before is not None
    started = time.time()
    data = out(invoke(app, "reschedule", task_id, "--countdown", "60", "--yes", "--json"))
    after = store.get(task_id)
    assert after is not None and after.score_ms < before.score_ms
    assert abs(after.score_ms / 1000 - (started + 60)) < 5
    assert data["results"] == [{"id": task_id, "status": "rescheduled", "due_ms": after.score_ms,
                                "due": data["results"][0]["due"]}]
    eta = "2099-01-02T03:04:05+00:00"
    assert invoke(app, "reschedule", task_id, "--eta", eta, "--yes").exit_code == 0
    moved = store.get(task_id)
    assert moved is not None and moved.score_ms == int(datetime.fromisoformat(eta).timestamp() * 1000)
    missing = invoke(app, "reschedule", "nope", "--countdown", "5", "--yes", "--json")
    assert missing.exit_code == 3 and out(missing)["results"] == [{"id": "nope", "status": "not_pending"}]
    assert invoke(app, "reschedule", task_id, "--yes").exit_code == 2  # no new time given


def test_run_now_makes_a_task_due_and_the_dispatcher_sends_it(apps: AppFactory, r: redis.Redis) -> None:
    app = apps()
    (task_id,) = schedule(app, 1, countdown=86400)
    assert invoke(app, "run-now", task_id, input="n\n").exit_code == 4
    data = out(invoke(app, "run-now", task_id, "--yes", "--json"))
    assert data["results"][0]["status"] == "rescheduled"
    assert data["results"][0]["due_ms"] <= redis_ms(r.time())
    apps.dispatcher(app)
    broker = redis.Redis(port=r.connection_pool.connection_kwargs["port"], db=BROKER_DB)
    raw = wait_for(lambda: broker.lrange("celery", 0, -1), what="the task in the broker queue")
    assert [json.loads(m)["headers"]["id"] for m in raw] == [task_id]
    assert apps.store(app).get(task_id) is None


# -- errors -------------------------------------------------------------------------------------


def test_an_unreachable_redis_is_one_line_unless_verbose(apps: AppFactory) -> None:
    with RedisServer() as gone:
        url = gone.url
    app = apps(zset_scheduler_url=url)
    result = invoke(app, "status")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and result.output.startswith("Error: cannot reach Redis at redis://")
    assert "Traceback" not in result.output
    verbose = invoke(app, "status", "--verbose", catch=True)
    assert isinstance(verbose.exception, redis.ConnectionError)


def test_a_shard_count_mismatch_is_refused_without_writing(apps: AppFactory) -> None:
    schedule(apps(shards=4), 1)
    other = apps(shards=8)
    result = invoke(other, "ls")
    assert result.exit_code == 1 and "has 4 shards" in result.output
    empty = apps(prefix="fresh")
    assert invoke(empty, "status").exit_code == 0
    assert not read_status(apps.store(empty)).shards[0].pending
    assert apps.store(empty).client.exists("fresh:meta") == 0  # status did not create the store

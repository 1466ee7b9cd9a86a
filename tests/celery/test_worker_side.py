"""An installed worker: every task sees its ETA and reaches the dead-letter store when it fails
for good, whatever its class; a worker whose clock lags Redis still runs a due task at once."""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Task
from celery.contrib.testing.worker import start_worker

from celery_zset_scheduler import ZSetTask
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.model.letters import DeadLetter
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import AppFactory, wait_for
from ..support.procs import CELERY, Cluster


def letter_of(app: Any, task_id: str, timeout: float = 30.0) -> DeadLetter:
    letters = installation_for(app).dead_letters  # type: ignore[union-attr]
    return wait_for(lambda: letters.get(task_id), timeout=timeout,  # type: ignore[no-any-return]
                    what=f"{task_id} in the dead-letter store")


def test_a_task_that_waited_in_the_store_sees_its_eta_as_with_plain_celery(apps: AppFactory) -> None:
    plain = apps(install=False)
    # Alone: two in-process workers would share Kombu's event loop (and its ETA timer).
    with start_worker(plain, pool="solo", perform_ping_check=False, loglevel="WARNING"):
        eta = datetime.now(timezone.utc) + timedelta(seconds=0.5)
        plain.tasks["t.record"].apply_async(kwargs={"tag": "plain"}, eta=eta).get(timeout=20)
    ours = apps()
    apps.dispatcher(ours)
    apps.worker(ours)
    eta = datetime.now(timezone.utc) + timedelta(seconds=0.5)
    by_countdown = ours.tasks["t.record"].apply_async(kwargs={"tag": "countdown"}, countdown=0.5)
    ours.tasks["t.record"].apply_async(kwargs={"tag": "eta"}, eta=eta).get(timeout=20)
    by_countdown.get(timeout=20)
    runs = {run["tag"]: run for run in apps.executions()}
    assert runs["eta"]["eta"] == eta.isoformat()  # the text plain Celery's task sees, too:
    assert datetime.fromisoformat(runs["plain"]["eta"]).tzinfo == timezone.utc
    seen = datetime.fromisoformat(runs["countdown"]["eta"])
    assert seen.tzinfo is not None and 0 <= runs["countdown"]["at"] - seen.timestamp() < 2.0
    assert runs["eta"]["at"] >= eta.timestamp()


def test_a_task_that_waited_in_the_store_sees_the_headers_plain_celery_gives(apps: AppFactory) -> None:
    """``self.request.headers``: None without headers of the caller's, the caller's own with them,
    on the first run and on a retry that waited in the store (plain Celery's: through the broker)."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("t.record", {"kwargs": {"tag": "bare"}, "countdown": 0.3}),
        ("t.record", {"kwargs": {"tag": "own"}, "countdown": 0.3, "headers": {"tenant": "acme", "n": [1, 2]}}),
        ("t.retry_once", {"kwargs": {"countdown": 0.3}, "countdown": 0.3}),
        ("t.retry_once", {"kwargs": {"countdown": 0.3}, "countdown": 0.3, "headers": {"tenant": "acme"}}),
    ]

    def seen(app: Any) -> list[Any]:
        ids = [app.tasks[name].apply_async(**options).id for name, options in calls]
        wait_for(lambda: len([r for r in apps.executions() if r["id"] in ids]) >= 6, what="every run and retry")
        runs = apps.executions()
        return [[(run["retries"], run["headers"]) for run in runs if run["id"] == task_id] for task_id in ids]

    plain = apps(install=False)
    with start_worker(plain, pool="solo", perform_ping_check=False, loglevel="WARNING"):
        theirs = seen(plain)
    ours = apps()
    apps.dispatcher(ours)
    apps.worker(ours)
    mine = seen(ours)
    assert theirs[0] == [(0, None)] and theirs[1] == [(0, {"tenant": "acme", "n": [1, 2]})]
    assert [retries for retries, _ in theirs[2]] == [0, 1]
    assert mine == theirs


def test_a_worker_whose_clock_lags_redis_runs_a_due_task_at_once(
        apps: AppFactory, redis_server: RedisServer) -> None:
    app = apps()
    apps.dispatcher(app)
    cluster = Cluster(redis_server)
    try:
        # An hour behind: had the message kept its eta header, this worker would hold it an hour.
        worker = cluster.spawn([sys.executable, "-m", "tests.support.skewed", "-3600", CELERY, "-A",
                                "tests.support.proc_app", "worker", "--pool", "solo", "--loglevel", "INFO",
                                "--without-gossip", "--without-mingle", "--without-heartbeat"])
        worker.wait_for_output(r"ready\.", timeout=60)
        eta = datetime.now(timezone.utc) + timedelta(seconds=1)
        result = app.tasks["t.record"].apply_async(kwargs={"tag": "lagging"}, eta=eta)
        assert result.get(timeout=20) == "lagging"
        assert time.time() - eta.timestamp() < 10
        (run,) = apps.executions()
        assert run["eta"] == eta.isoformat()
        assert run["at"] < eta.timestamp() - 3000  # its own clock said an hour before the ETA
    finally:
        cluster.close()


def test_a_plain_task_that_fails_for_good_is_dead_lettered_as_a_zset_task_is(apps: AppFactory) -> None:
    app = apps()
    flaky = app.tasks["t.plain_flaky"]  # @app.task(autoretry_for=(ValueError,), max_retries=2)
    assert not isinstance(flaky, ZSetTask) and flaky.Request == Task.Request  # the user's, untouched
    apps.dispatcher(app)
    apps.worker(app)
    result = flaky.apply_async()
    letter = letter_of(app, result.id)
    runs = [run for run in apps.executions() if run["tag"] == "plain_flaky"]
    assert [run["retries"] for run in runs] == [0, 1, 2]  # the retries waited in the store
    assert (letter.reason, letter.task_name, letter.exc_type, letter.attempts) == \
           ("retries_exhausted", "t.plain_flaky", "ValueError", 3)
    assert letter.exc_message == "attempt 3 failed" and "ValueError: attempt 3 failed" in letter.traceback
    assert abs(letter.first_failure_ms / 1000 - runs[0]["at"]) < 1.0  # carried across the retries
    assert abs(letter.last_failure_ms / 1000 - runs[-1]["at"]) < 1.0
    assert letter.worker and letter.args == [] and letter.kwargs == {}
    original = letter.original()
    assert original.task_name == "t.plain_flaky" and original.headers["retries"] == 2
    rejected = app.tasks["t.plain_reject"].apply_async()
    assert (letter_of(app, rejected.id).reason, letter_of(app, rejected.id).exc_type) == ("rejected", "Reject")
    assert result.state == "FAILURE"  # Celery's own handling goes on as before


@pytest.mark.parametrize("value", [False, "false"])
def test_the_setting_turns_dead_lettering_off(apps: AppFactory, value: Any) -> None:
    app = apps(zset_scheduler_dead_letters=value)
    apps.dispatcher(app)
    apps.worker(app)
    failed = app.tasks["t.plain_reject"].apply_async()
    unknown = app.send_task("no.such.task")
    kept = app.tasks["t.reject"].apply_async()  # a ZSetTask: it follows the setting too
    wait_for(lambda: failed.state == "FAILURE" and kept.state == "FAILURE", what="the rejections")
    time.sleep(1.0)  # the unknown message was consumed and discarded meanwhile
    letters = installation_for(app).dead_letters  # type: ignore[union-attr]
    assert [letters.get(t.id) for t in (failed, unknown, kept)] == [None, None, None]

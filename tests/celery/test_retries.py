"""Retries that wait in the store, per-exception policies and dead-lettering, with real workers (I7)."""

from __future__ import annotations

import base64
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_zset_scheduler import task_dead_lettered
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.model.codec import decode
from celery_zset_scheduler.model.letters import DeadLetter
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import AppFactory, wait_for
from ..support.procs import Cluster
from ..support.tools import iter_letters, pending


def attempts(apps: AppFactory, tag: str) -> list[dict[str, Any]]:
    return [run for run in apps.executions() if run["tag"] == tag]


def dead_letter(apps: AppFactory, app: Any, task_id: str) -> DeadLetter:
    letters = installation_for(app).dead_letters  # type: ignore[union-attr]
    return wait_for(lambda: letters.get(task_id), timeout=30, what=f"{task_id} in the dead-letter store")  # type: ignore[no-any-return]


def test_autoretry_backoff_waits_in_the_store_then_dead_letters(apps: AppFactory) -> None:
    app = apps()
    received: list[DeadLetter] = []
    task_dead_lettered.connect(lambda sender, letter, **_: received.append(letter), weak=False,
                               dispatch_uid="test-retries")
    try:
        apps.dispatcher(app)
        apps.worker(app)
        result = app.tasks["t.flaky"].apply_async()
        store = installation_for(app).store  # type: ignore[union-attr]
        waiting = []
        for retry in (1, 2, 3):
            # Between attempts the retry is a pending entry of the store, not a broker message.
            found = wait_for(lambda: store.get(result.id), what=f"retry {retry} in the store")
            message = decode(result.id, found.payload)
            waiting.append(message.headers["retries"])
            wait_for(lambda n=retry: len(attempts(apps, "flaky")) > n, timeout=20, what=f"attempt {retry + 1}")
        letter = dead_letter(apps, app, result.id)
    finally:
        task_dead_lettered.disconnect(dispatch_uid="test-retries")
    runs = attempts(apps, "flaky")
    assert waiting == [1, 2, 3]
    assert [run["retries"] for run in runs] == [0, 1, 2, 3]
    delays = [b["at"] - a["at"] for a, b in itertools.pairwise(runs)]
    # retry_backoff=1, no jitter: 1, 2, 4 s (plus dispatch and execution time).
    for delay, expected in zip(delays, (1.0, 2.0, 4.0), strict=True):
        assert expected <= delay <= expected + 1.0, delays
    assert letter.reason == "retries_exhausted"
    assert (letter.task_name, letter.exc_type, letter.attempts) == ("t.flaky", "RuntimeError", 4)
    assert letter.exc_message == "attempt 4 failed" and "RuntimeError: attempt 4 failed" in letter.traceback
    assert abs(letter.first_failure_ms / 1000 - runs[0]["at"]) < 1.0
    assert abs(letter.last_failure_ms / 1000 - runs[-1]["at"]) < 1.0
    assert letter.worker and letter.args == [] and letter.kwargs == {}
    assert [r.task_id for r in received] == [result.id]
    original = letter.original()
    assert original.task_name == "t.flaky" and original.headers["retries"] == 3


def test_per_exception_policies(apps: AppFactory) -> None:
    app = apps()
    apps.dispatcher(app)
    apps.worker(app)
    never = app.tasks["t.policy"].apply_async(kwargs={"kind": "value"})
    backed_off = app.tasks["t.policy"].apply_async(kwargs={"kind": "key"})
    assert dead_letter(apps, app, never.id).attempts == 1  # ValueError: never retried
    letter = dead_letter(apps, app, backed_off.id)
    assert (letter.attempts, letter.reason, letter.exc_type) == (3, "retries_exhausted", "KeyError")
    runs = attempts(apps, "policy.key")
    delays = [b["at"] - a["at"] for a, b in itertools.pairwise(runs)]
    # RetryPolicy(backoff=0.4, backoff_max=1.0, jitter): uniform in [0, 0.4] then [0, 0.8].
    assert delays[0] <= 0.4 + 0.6 and delays[1] <= 0.8 + 0.6, delays
    assert len(attempts(apps, "policy.value")) == 1


def test_reject_without_requeue_is_dead_lettered(apps: AppFactory) -> None:
    app = apps()
    apps.worker(app)
    result = app.tasks["t.reject"].apply_async()
    letter = dead_letter(apps, app, result.id)
    assert (letter.reason, letter.exc_type, letter.attempts) == ("rejected", "Reject", 1)


def test_an_unknown_task_name_is_dead_lettered_byte_for_byte(apps: AppFactory, r: redis.Redis) -> None:
    app = apps()
    apps.worker(app)
    result = app.send_task("no.such.task", args=[1, "two"], kwargs={"x": 3})
    letter = dead_letter(apps, app, result.id)
    assert (letter.reason, letter.task_name) == ("unknown_task", "no.such.task")
    body = letter.original().body
    assert json.loads(body)[:2] == [[1, "two"], {"x": 3}]


def test_a_poison_entry_is_dead_lettered_and_dispatching_goes_on(apps: AppFactory, r: redis.Redis) -> None:
    app = apps()
    store = installation_for(app).store  # type: ignore[union-attr]
    store.check_meta()
    good = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=0.3) for i in range(20)]
    sk = store.keys.shard(store.keys.shard_of("poison-1"))
    sec, usec = r.time()
    r.zadd(sk.due, {"poison-1": sec * 1000 + usec // 1000})
    r.hset(sk.msg, "poison-1", b"\xff not a message")
    apps.dispatcher(app)
    apps.worker(app)
    for result in good:
        assert result.get(timeout=20) is not None
    letter = dead_letter(apps, app, "poison-1")
    assert letter.reason == "poison" and letter.exc_type == "PoisonMessage"
    assert base64.b64decode(letter.message) == b"\xff not a message"
    assert store.get("poison-1") is None  # acked: it will not come back


def test_dead_letter_caps_trim_in_the_adding_script(apps: AppFactory) -> None:
    app = apps(zset_scheduler_dlq_max_len=5, zset_scheduler_dlq_max_age=2)
    letters = installation_for(app).dead_letters  # type: ignore[union-attr]
    for i in range(8):
        letters.add(DeadLetter(task_id=f"old-{i}", task_name="t", reason="failed"))
    assert letters.count() == 5
    assert [letter.task_id for letter in iter_letters(letters)] == [f"old-{i}" for i in range(7, 2, -1)]
    time.sleep(2.1)
    letters.add(DeadLetter(task_id="new", task_name="t", reason="failed"))
    assert [letter.task_id for letter in iter_letters(letters)] == ["new"]  # the old ones aged out


def test_worker_memory_does_not_grow_with_tasks_waiting_to_retry(
    apps: AppFactory, redis_server: RedisServer,
) -> None:
    cluster = Cluster(redis_server, shards=4)
    try:
        app = apps()
        worker = cluster.worker()
        worker.wait_for_output(r"\[queues\]", timeout=30)

        def rss_kb() -> int:
            status = Path(f"/proc/{worker.pid}/status").read_text()
            return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))

        def send(count: int) -> None:
            for _ in range(count):
                app.tasks["t.retry_once"].apply_async(kwargs={"countdown": 3600})

        store = installation_for(app).store  # type: ignore[union-attr]
        send(3000)  # warm-up: the worker's first few thousand tasks fill its caches and arenas
        wait_for(lambda: pending(store) == 3000, timeout=120, what="3000 retries waiting")
        before = rss_kb()
        send(4000)
        wait_for(lambda: pending(store) == 7000, timeout=120, what="7000 retries waiting")
        after = rss_kb()
        # Celery's own ETA handling would hold ~11 KB per waiting retry (~44 MB more here); a tenth
        # of that allows for the allocator (Python 3.10's worker grows ~2 MB over these 4,000 runs).
        assert after - before < 4000 * 11 // 10, (before, after)
    finally:
        cluster.close()


def test_a_fixed_task_requeued_from_the_dead_letter_store_runs(apps: AppFactory, r: redis.Redis) -> None:
    from ..support.cli_support import invoke

    app = apps()
    recorder = redis.Redis.from_url(apps.record_url)
    recorder.set("broken", 1)
    apps.dispatcher(app)
    apps.worker(app)
    result = app.tasks["t.fixable"].apply_async(kwargs={"value": 21})
    letter = dead_letter(apps, app, result.id)
    assert (letter.reason, letter.exc_type) == ("failed", "RuntimeError")
    recorder.delete("broken")  # the bug is fixed and deployed
    requeued = invoke(app, "dlq", "requeue", result.id, "--yes")
    assert requeued.exit_code == 0, requeued.output
    wait_for(lambda: attempts(apps, "fixable.ok"), timeout=20, what="the requeued task to succeed")
    assert [run["tag"] for run in apps.executions()] == ["fixable.failed", "fixable.ok"]
    assert installation_for(app).dead_letters.get(result.id) is None  # type: ignore[union-attr]
    assert app.AsyncResult(result.id).get(timeout=10) == 42


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_retries": -1}, "max_retries must be None .no limit. or an integer >= 0, got -1"),
        ({"max_retries": 2.5}, "max_retries"),
        ({"max_retries": True}, "max_retries"),
        ({"backoff": -1.0}, "backoff must be a number of seconds >= 0, got -1.0"),
        ({"backoff_max": float("nan")}, "backoff_max"),
        ({"backoff": "1s"}, "backoff"),
    ],
)
def test_a_retry_policy_refuses_values_that_mean_nothing(kwargs: dict[str, Any], message: str) -> None:
    from celery_zset_scheduler import RetryPolicy

    with pytest.raises(ValueError, match=f"^RetryPolicy: {message}"):
        RetryPolicy(**kwargs)
    assert RetryPolicy(max_retries=None).max_retries is None and RetryPolicy(max_retries=0, backoff=0).backoff == 0

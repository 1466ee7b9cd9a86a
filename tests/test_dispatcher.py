"""The dispatcher's sleeping and waking, observed at the broker queue (no worker needed)."""

from __future__ import annotations

import json
import time

import pytest
import redis

from celery_zset_scheduler.store import NewEntry

from .helpers import BROKER_DB, AppFactory, wait_for


def queued_at(broker: redis.Redis, task_id: str) -> float | None:
    for raw in broker.lrange("celery", 0, -1):
        if json.loads(raw)["headers"]["id"] == task_id:
            return time.time()
    return None


@pytest.mark.parametrize("delay", [0.3, 2.5])
def test_a_sleeping_leader_is_woken_for_an_earlier_task(apps: AppFactory, r: redis.Redis, delay: float) -> None:
    # Polling alone would take 30 s: only the wake-up can make these tasks prompt.
    app = apps(zset_scheduler_max_interval=30)
    store = apps.store(app)
    store.schedule_many([NewEntry(f"far-{i}", int((time.time() + 86400) * 1000), b"x") for i in range(40)])
    dispatcher = apps.dispatcher(app)
    wait_for(lambda: len(dispatcher.leadership.owned) == store.shards, what="the dispatcher to lead every shard")
    time.sleep(1.5)  # it claimed every shard and sleeps until the far-future entries
    broker = redis.Redis(port=r.connection_pool.connection_kwargs["port"], db=BROKER_DB)
    due = time.time() + delay
    result = app.tasks["t.record"].apply_async(countdown=delay)
    arrived = wait_for(lambda: queued_at(broker, result.id), timeout=10, interval=0.005,
                       what="the task in the broker queue")
    assert due - 0.01 <= arrived <= due + 0.3, arrived - due

"""Idempotency keys at schedule time and at run time, with real workers (I6)."""

from __future__ import annotations

import collections
import time
from typing import Any

import pytest
import redis
from celery import Celery

import celery_zset_scheduler
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher
from celery_zset_scheduler.model.codec import StoredMessage
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import AppFactory, built_message, publish_by_hand, wait_for
from ..support.procs import Cluster
from ..support.tools import pending


def charge_message(app: Celery, order_id: int, **kwargs: Any) -> StoredMessage:
    """The exact message apply_async would send, handed back instead of stored or published."""
    return built_message(app.tasks["t.charge"], kwargs={"order_id": order_id, **kwargs})


def tags(apps: AppFactory, tag: str) -> list[dict[str, Any]]:
    return [run for run in apps.executions() if run["tag"] == tag]


@pytest.mark.parametrize("pool", ["solo", "threads", "prefork"])
def test_the_same_message_delivered_twice_runs_the_body_once(apps: AppFactory, pool: str) -> None:
    app = apps()
    message = charge_message(app, order_id=1)
    report = publish_by_hand(KombuPublisher(app), [message, message])  # by hand, twice, byte for byte
    assert report.published == 2 and report.error is None
    apps.dispatcher(app)  # a duplicate that arrives while the first runs comes back through the store
    apps.worker(app, pool=pool, concurrency=2 if pool != "solo" else 1)
    result = app.AsyncResult(message.task_id)
    assert result.get(timeout=20) == {"order_id": 1, "charged": 10}
    time.sleep(1.0)
    assert len(tags(apps, "charge.done")) == 1


def test_two_deliveries_at_the_same_time_run_it_once(apps: AppFactory, r: redis.Redis) -> None:
    app = apps()
    message = charge_message(app, order_id=2, sleep=1.5)
    publish_by_hand(KombuPublisher(app), [message, message])
    apps.dispatcher(app)
    apps.worker(app, pool="threads", concurrency=2)
    # The second delivery finds the key running and goes back to the store to look again later.
    wait_for(lambda: installation_for(app).store.get(message.task_id) is not None,  # type: ignore[union-attr]
             what="the concurrent duplicate waiting in the store")
    assert app.AsyncResult(message.task_id).get(timeout=20) == {"order_id": 2, "charged": 10}
    wait_for(lambda: installation_for(app).store.get(message.task_id) is None,  # type: ignore[union-attr]
             timeout=20, what="the duplicate to come back and find the key done")
    time.sleep(0.5)
    assert len(tags(apps, "charge.started")) == 1
    assert len(tags(apps, "charge.done")) == 1


def test_a_done_key_returns_its_outcome_without_running(apps: AppFactory) -> None:
    app = apps()
    apps.dispatcher(app)
    apps.worker(app)
    first = app.tasks["t.charge"].apply_async(kwargs={"order_id": 3, "amount": 99})
    assert first.get(timeout=20) == {"order_id": 3, "charged": 99}
    # A later call with the same key (different id, different amount) is a duplicate.
    again = app.tasks["t.charge"].apply_async(kwargs={"order_id": 3, "amount": 1})
    assert again.id != first.id
    assert again.get(timeout=20) == {"order_id": 3, "charged": 99}
    assert len(tags(apps, "charge.done")) == 1
    state = installation_for(app).idempotency.state("charge:3")  # type: ignore[union-attr]
    assert state["state"] == "done"


def test_scheduling_a_pending_key_again_keeps_one_entry(apps: AppFactory) -> None:
    app = apps()
    charge = app.tasks["t.charge"]
    first = charge.apply_async(kwargs={"order_id": 4}, countdown=60)
    assert first.duplicate_of_pending is False  # a first call has the attribute too
    second = charge.apply_async(kwargs={"order_id": 4, "amount": 50}, countdown=30)
    assert second.id == first.id and second.duplicate_of_pending is True
    store = installation_for(app).store  # type: ignore[union-attr]
    assert pending(store) == 1
    replaced = charge.apply_async(kwargs={"order_id": 4, "amount": 70}, countdown=1, idempotency_replace=True)
    assert replaced.id != first.id and replaced.duplicate_of_pending is False
    assert pending(store) == 1 and celery_zset_scheduler.lookup(app, first.id) is None
    other = charge.apply_async(kwargs={"order_id": 4}, countdown=60, idempotency_key="manual")
    assert other.id not in (first.id, replaced.id) and pending(store) == 2
    apps.dispatcher(app)
    apps.worker(app)
    assert replaced.get(timeout=20) == {"order_id": 4, "charged": 70}


def test_a_failed_key_is_released_for_the_retry(apps: AppFactory, r: redis.Redis) -> None:
    app = apps()
    fixable = app.tasks["t.fixable"]
    assert fixable.dead_letter is None  # follows zset_scheduler_dead_letters, on by default
    apps.dispatcher(app)
    apps.worker(app)
    r.connection_pool.reset()
    charge = app.tasks["t.charge"]
    # Releasing on failure is what lets a redelivery run: a body that raised leaves no record.
    keys = installation_for(app).idempotency  # type: ignore[union-attr]
    assert keys.acquire("charge:5", "someone", 5.0).state == "acquired"
    assert keys.release("charge:5", "someone")
    assert charge.apply_async(kwargs={"order_id": 5}).get(timeout=20) == {"order_id": 5, "charged": 10}


def test_a_worker_killed_mid_task_runs_it_again_once_after_the_lease(
    apps: AppFactory, redis_server: RedisServer, r: redis.Redis,
) -> None:
    # Kombu restores unacked messages older than the visibility timeout on a periodic sweep.
    transport = {"visibility_timeout": 3, "unacked_restore_interval": 1, "unacked_restore_throttle": 1}
    conf = {"broker_transport_options": transport, "zset_scheduler_lock_timeout": 1.5}
    cluster = Cluster(redis_server, shards=4, conf=conf)
    try:
        app = apps(**conf)
        result = app.tasks["t.charge"].apply_async(kwargs={"order_id": 6, "sleep": 4.0})
        first = cluster.worker()
        wait_for(lambda: tags(apps, "charge.started"), what="the body to start")
        first.kill9()  # mid-task: the message stays unacked, the key's lease stops being renewed
        cluster.worker()  # restores the unacked message after the visibility timeout
        assert result.get(timeout=40) == {"order_id": 6, "charged": 10}
        time.sleep(1.0)
        assert len(tags(apps, "charge.started")) == 2
        assert len(tags(apps, "charge.done")) == 1
    finally:
        cluster.close()


def test_every_execution_of_a_key_is_recorded_once_under_load(apps: AppFactory) -> None:
    app = apps()
    apps.dispatcher(app)
    apps.worker(app, pool="threads", concurrency=4)
    charge = app.tasks["t.charge"]
    results = [charge.apply_async(kwargs={"order_id": 100 + i % 10}) for i in range(60)]
    for result in results:
        result.get(timeout=30)
    counts = collections.Counter(run["order_id"] for run in tags(apps, "charge.done"))
    assert counts == collections.Counter(dict.fromkeys(range(100, 110), 1))


def test_a_callable_key_and_a_lease_renewed_through_a_long_run(apps: AppFactory) -> None:
    app = apps()
    apps.dispatcher(app)
    apps.worker(app, pool="threads", concurrency=2)
    refund = app.tasks["t.refund"]
    long_run = refund.apply_async(kwargs={"order_id": 8, "sleep": 3.5})  # 3.5x the 1 s lease
    wait_for(lambda: tags(apps, "refund.started"), what="the first run to start")
    time.sleep(2.0)  # the lease would have expired twice without renewals
    keys = installation_for(app).idempotency  # type: ignore[union-attr]
    assert keys.state("refund:8")["state"] == "running"  # the callable's key, still held
    duplicate = refund.apply_async(kwargs={"order_id": 8})
    assert long_run.get(timeout=20) == 8
    assert duplicate.get(timeout=30) == 8  # waited for the first, then returned its outcome
    assert len(tags(apps, "refund.started")) == 1


def test_a_key_kept_failed_does_not_run_again(apps: AppFactory) -> None:
    app = apps()
    apps.dispatcher(app)
    apps.worker(app)
    refund = app.tasks["t.refund"]
    failed = refund.apply_async(kwargs={"order_id": 9, "fail": True})
    wait_for(lambda: failed.state == "FAILURE", timeout=20, what="the failure")
    state = installation_for(app).idempotency.state("refund:9")  # type: ignore[union-attr]
    assert state["state"] == "failed" and "payment provider" in state["outcome"]
    again = refund.apply_async(kwargs={"order_id": 9})
    time.sleep(1.5)
    assert again.state == "PENDING"  # ignored: the body did not run, no result was stored
    assert len(tags(apps, "refund.started")) == 1


def test_idempotent_task_as_the_apps_task_class(apps: AppFactory) -> None:
    app = apps(install=False)
    from celery import Celery

    wide = Celery("wide", set_as_current=False, task_cls="celery_zset_scheduler:IdempotentTask")
    wide.conf.update(app.conf)
    celery_zset_scheduler.install(wide)
    recorder = redis.Redis.from_url(apps.record_url)

    @wide.task(bind=True, name="wide.noted", shared=False)
    def noted(self: Any, n: int) -> int:
        recorder.rpush("wide", n)
        return n

    assert noted.acks_late and noted.reject_on_worker_lost
    message = built_message(noted, (5,))
    publish_by_hand(KombuPublisher(wide), [message, message])
    apps.worker(wide)
    assert wide.AsyncResult(message.task_id).get(timeout=20) == 5
    time.sleep(1.0)
    assert recorder.lrange("wide", 0, -1) == [b"5"]  # the default key (the task id) ran it once

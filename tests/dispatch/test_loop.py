"""The dispatcher's sleeping and waking, observed at the broker queue (no worker needed)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence

import pytest
import redis

from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher
from celery_zset_scheduler.dispatch.config import DispatcherConfig
from celery_zset_scheduler.dispatch.handoff import Guard, Outgoing, PublishReport
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.store.schedule import NewEntry

from ..support.helpers import BROKER_DB, AppFactory, wait_for


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


@pytest.mark.default_user("a queue its app does not declare")
def test_a_queue_only_the_sender_knew_is_declared_and_used(apps: AppFactory, r: redis.Redis) -> None:
    from kombu import Queue

    sender = apps()
    result = sender.tasks["t.record"].apply_async(kwargs={"tag": "reports"}, countdown=0.2, queue=Queue("reports"))
    other = sender.tasks["t.record"].apply_async(kwargs={"tag": "plain"}, countdown=0.4)
    # The dispatcher's app knows only "celery" and would not create a missing queue.
    dispatching = apps(task_queues=[Queue("celery")], task_create_missing_queues=False)
    apps.dispatcher(dispatching)
    apps.worker(apps(), queues=["celery", "reports"])
    assert result.get(timeout=20) == "reports" and other.get(timeout=20) == "plain"


class RefusingPublisher(KombuPublisher):
    """Kombu's publisher, except that the broker "refuses" messages of one task name (as it would a
    message it can never accept); everything else is really published."""

    def publish(self, batch: Sequence[Outgoing], guard: Guard) -> PublishReport:
        refused = {i: ValueError("refused by the broker") for i, o in enumerate(batch)
                   if o.message.task_name == "t.retry_once"}
        rest = [o for i, o in enumerate(batch) if i not in refused]
        report = super().publish(rest, guard)
        assert report.error is None and report.published == len(rest)
        return PublishReport(len(batch), unpublishable=refused)


def test_an_unpublishable_message_is_dead_lettered_and_its_shard_goes_on(apps: AppFactory) -> None:
    app = apps(shards=1)
    bad = app.tasks["t.retry_once"].apply_async(countdown=0.2)  # due first, ahead of the good one
    good = app.tasks["t.record"].apply_async(kwargs={"tag": "fine"}, countdown=0.3)
    store = apps.store(app)
    dispatcher = Dispatcher(store, RefusingPublisher(app), DispatcherConfig(lock_timeout=1.5, max_interval=0.5),
                            dead_letters=installation_for(app).dead_letters)  # type: ignore[union-attr]
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    try:
        apps.worker(app)
        assert good.get(timeout=20) == "fine"
        letter = wait_for(lambda: installation_for(app).dead_letters.get(bad.id),  # type: ignore[union-attr]
                          what="the refused message in the dead-letter store")
        assert (letter.reason, letter.exc_type, letter.worker) == ("unpublishable", "ValueError", "dispatcher")
        assert letter.original().task_name == "t.retry_once"
        assert store.get(bad.id) is None  # acked: it does not come back to block the shard
    finally:
        dispatcher.stop()
        thread.join(timeout=30)

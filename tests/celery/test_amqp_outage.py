"""RabbitMQ outages under a dispatcher publishing with confirms: nothing is lost, duplicates stay
within I2's bound (at most the unconfirmed part of the batch being published, once), and the
dispatcher recovers by itself. Every task id is read back from the queue."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from celery import Celery

import celery_zset_scheduler

from ..support.amqp import amqp_app, classic, count, drain_ids, quorum, vhost
from ..support.helpers import AppFactory, wait_for
from ..support.rabbitmq import RabbitMQ
from ..support.tools import counts

__all__ = ["vhost"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
BATCH = 500
SHARDS = 4  # the apps' shard count: one pass publishes up to BATCH from each shard


def schedule(app: Celery, n: int, spread: float) -> list[str]:
    record = app.tasks["t.record"]
    results = celery_zset_scheduler.schedule_many(
        record, [((), {"tag": i}, 0.2 + spread * i / n) for i in range(n)])
    return [str(r) for r in results]


def drained(apps: AppFactory, app: Celery) -> bool:
    return all(c.pending == 0 and c.inflight == 0 for c in counts(apps.store(app)))


def check(ids: list[str], arrived: list[str], cuts: int) -> Counter[str]:
    seen = Counter(arrived)
    assert set(seen) == set(ids), f"{len(set(ids) - set(seen))} tasks lost"
    extra = sum(n - 1 for n in seen.values())
    assert extra <= cuts * BATCH * SHARDS, f"{extra} duplicates for {cuts} cut(s) of passes of {BATCH * SHARDS}"
    print(f"\n{len(ids)} tasks, {extra} duplicates")
    return seen


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_connection_cut_mid_batch_loses_nothing(rabbitmq: RabbitMQ, vhost: str, apps: AppFactory,
                                                   queue_type: str) -> None:
    queue = (quorum if queue_type == "quorum" else classic)("zt.q")
    app = amqp_app(apps, vhost, [queue], zset_scheduler_batch_size=BATCH)
    ids = schedule(app, 20_000, 0.0)
    dispatcher = apps.dispatcher(app)
    wait_for(lambda: count(vhost, "zt.q") >= 3000, timeout=60, interval=0.01, what="the first batches")
    rabbitmq.close_connections("cut mid-batch", vhost=vhost.rsplit("/", 1)[1])
    wait_for(lambda: drained(apps, app), timeout=120, what="the store to drain")
    check(ids, drain_ids(vhost, "zt.q"), cuts=1)
    assert dispatcher.thread.is_alive() and dispatcher.error is None  # type: ignore[attr-defined]


def test_rabbitmq_down_for_ten_seconds(rabbitmq: RabbitMQ, vhost: str, apps: AppFactory) -> None:
    if not rabbitmq.own_node:
        pytest.skip("stopping RabbitMQ needs the suite's own node; this run uses a vhost on a shared server")
    app = amqp_app(apps, vhost, [quorum("zt.q")], zset_scheduler_batch_size=BATCH)
    ids = schedule(app, 6000, 8.0)  # due over 8 s: most of them fall due during the outage
    dispatcher = apps.dispatcher(app)
    wait_for(lambda: count(vhost, "zt.q") >= 300, timeout=60, interval=0.01, what="the first tasks")
    rabbitmq.stop_app()
    stopped_at = time.monotonic()
    try:
        time.sleep(10)
        assert not drained(apps, app)  # nothing was acked without RabbitMQ confirming it
    finally:
        rabbitmq.start_app()
    back = time.monotonic()
    wait_for(lambda: drained(apps, app), timeout=60, what="the store to drain after the outage")
    recovered = time.monotonic() - back
    check(ids, drain_ids(vhost, "zt.q"), cuts=1)
    assert dispatcher.thread.is_alive() and dispatcher.error is None  # type: ignore[attr-defined]
    assert threading.active_count() < 100
    print(f"\noutage {back - stopped_at:.1f}s, drained {recovered:.1f}s after RabbitMQ was back")

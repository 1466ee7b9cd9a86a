"""The store write honours Celery's publish retry options; task protocol 1 is refused, not bypassed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

import celery_zset_scheduler
from celery_zset_scheduler.errors import ConfigurationError, StoreUnavailable
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import AppFactory
from ..support.tools import pending

SLOW_POLICY = {"max_retries": 6, "interval_start": 0.5, "interval_step": 0.5, "interval_max": 0.5}


@pytest.fixture
def store_server() -> Iterator[RedisServer]:
    with RedisServer(appendonly=True) as server:
        yield server


def test_the_retry_policy_carries_a_send_over_a_store_outage(apps: AppFactory, store_server: RedisServer) -> None:
    app = apps(zset_scheduler_url=store_server.url)
    record = app.tasks["t.record"]
    record.apply_async(countdown=60)  # connected, store created
    store_server.stop()
    restart = threading.Timer(1.0, store_server.start)
    restart.start()
    try:
        started = time.monotonic()
        result = record.apply_async(kwargs={"tag": "patient"}, countdown=60, retry_policy=SLOW_POLICY)
        waited = time.monotonic() - started
    finally:
        restart.join()
    assert waited >= 0.9  # it waited for the store, as a publish waits for the broker
    assert celery_zset_scheduler.lookup(app, result.id) is not None
    assert pending(apps.store(app)) == 2


def test_the_policy_ends_with_store_unavailable_and_retry_false_tries_once(
        apps: AppFactory, store_server: RedisServer) -> None:
    app = apps(zset_scheduler_url=store_server.url)
    record = app.tasks["t.record"]
    record.apply_async(countdown=60)
    store_server.stop()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="cannot store task 't.record'"):
        record.apply_async(countdown=60, retry_policy={**SLOW_POLICY, "max_retries": 2})
    assert time.monotonic() - started >= 1.0  # two retries, 0.5 s apart
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        record.apply_async(countdown=60, retry=False, retry_policy=SLOW_POLICY)
    assert time.monotonic() - started < 0.5  # no policy: one attempt


def test_task_protocol_1_timed_sends_are_refused_not_sent_to_the_broker(apps: AppFactory) -> None:
    app = apps(task_protocol=1)
    record = app.tasks["t.record"]
    for send in (lambda: record.apply_async(countdown=60),
                 lambda: app.send_task("t.record", eta=datetime.now(timezone.utc) + timedelta(seconds=60)),
                 lambda: celery_zset_scheduler.schedule_many(record, [((), {}, 60)])):
        with pytest.raises(ConfigurationError, match="task_protocol=1"):
            send()
    assert pending(apps.store(app)) == 0
    broker = apps.server.client(1)
    assert broker.llen("celery") == 0  # nothing waits in worker memory either
    record.apply_async()  # an untimed send is not the store's: it goes to the broker as usual
    assert broker.llen("celery") == 1

"""Timed sends reach the store before Celery's native delayed delivery rewrites them.

With a RabbitMQ broker and a quorum queue among the app's queues, Celery's ``send_task`` turns a
countdown into a message for its delay exchanges (``celery_delayed_27``, 28 delay bits in the
routing key, the queue dropped) before ``send_task_message``. These tests need no running broker:
the store takes the task without the broker being contacted (the port is closed on purpose).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from kombu.entity import Exchange, Queue

import celery_zset_scheduler
from celery_zset_scheduler.model.codec import StoredMessage
from celery_zset_scheduler.model.times import eta_ms
from celery_zset_scheduler.testing import free_port

from ..support.helpers import AppFactory

EXCHANGE = Exchange("zt.tasks", type="topic")


def quorum_app(apps: AppFactory, **conf: Any) -> Celery:
    queues = [
        Queue("zt.qq", EXCHANGE, routing_key="zt.qq", queue_arguments={"x-queue-type": "quorum"}),
        Queue("zt.cq", EXCHANGE, routing_key="zt.cq"),
    ]
    options = {"broker_url": f"amqp://guest:guest@127.0.0.1:{free_port()}//", "task_queues": queues,
               "task_default_queue": "zt.qq", "task_default_exchange": "zt.tasks",
               "task_default_exchange_type": "topic", "task_default_routing_key": "zt.qq",
               "broker_connection_retry": False, **conf}
    return apps(**options)


def stored(app: Celery, task_id: str) -> tuple[int, StoredMessage]:
    found = celery_zset_scheduler.lookup(app, task_id)
    assert found is not None, "not in the store"
    entry, message = found
    return entry.score_ms, message


def test_a_countdown_for_a_quorum_queue_is_stored_with_its_own_routing(apps: AppFactory) -> None:
    app = quorum_app(apps)
    before = time.time()
    result = app.tasks["t.record"].apply_async(kwargs={"tag": "q"}, countdown=3)
    due_ms, message = stored(app, result.id)
    # Not celery_delayed_27 with a 28-bit key: the queue's own exchange, routing key and queue.
    assert (message.exchange, message.routing_key, message.queue) == ("zt.tasks", "zt.qq", "zt.qq")
    assert before * 1000 + 3000 <= due_ms <= time.time() * 1000 + 3000
    assert eta_ms(message.headers["eta"]) == due_ms  # the header Celery writes, for self.request.eta


def test_classic_and_quorum_queues_on_one_app_keep_their_routing(apps: AppFactory) -> None:
    app = quorum_app(apps)
    to_classic = app.tasks["t.record"].apply_async(countdown=5, queue="zt.cq")
    by_signature = app.tasks["t.record"].s(tag="sig").set(countdown=5).apply_async()
    by_name = app.send_task("t.record", eta=datetime.now(timezone.utc) + timedelta(seconds=7))
    assert stored(app, to_classic.id)[1].routing_key == "zt.cq"
    assert stored(app, to_classic.id)[1].queue == "zt.cq"
    for result in (by_signature, by_name):
        assert (stored(app, result.id)[1].exchange, stored(app, result.id)[1].routing_key) == ("zt.tasks", "zt.qq")


def test_countdowns_under_a_second_and_fractions_are_kept(apps: AppFactory) -> None:
    app = quorum_app(apps)
    # Celery's rewrite raises "countdown must be a positive number" for int(0.5) == 0 and cuts an
    # ETA to whole seconds; the store keeps the time as given.
    short = app.tasks["t.record"].apply_async(countdown=0.5)
    eta = datetime.now(timezone.utc) + timedelta(seconds=10.9)
    fractional = app.tasks["t.record"].apply_async(eta=eta)
    assert stored(app, short.id)[1].routing_key == "zt.qq"
    assert stored(app, fractional.id)[0] == eta_ms(eta)


def test_a_retry_that_came_through_native_delayed_delivery_gets_its_routing_back(apps: AppFactory) -> None:
    app = quorum_app(apps)
    # What Task.retry passes for a task delivered through the delay queues: that delivery's exchange
    # and the delay bits before the routing key.
    result = app.send_task("t.record", countdown=2, retries=1, exchange="celery_delayed_delivery",
                           routing_key="0." * 26 + "1.1.zt.qq")
    _, message = stored(app, result.id)
    assert (message.exchange, message.routing_key, message.queue) == ("zt.tasks", "zt.qq", "zt.qq")
    assert message.headers["retries"] == 1


def test_the_due_option_never_reaches_the_message(apps: AppFactory) -> None:
    app = quorum_app(apps)
    result = app.tasks["t.record"].apply_async(countdown=30)
    _, message = stored(app, result.id)
    assert "zset_due" not in message.properties and "zset_due" not in message.headers


@pytest.mark.parametrize("protocol", [1])
def test_task_protocol_1_is_still_refused(apps: AppFactory, protocol: int) -> None:
    app = quorum_app(apps, task_protocol=protocol)
    with pytest.raises(celery_zset_scheduler.ConfigurationError, match="task protocol 2"):
        app.tasks["t.record"].apply_async(countdown=30)


def test_a_send_the_store_takes_needs_no_producer_from_the_broker_pool(apps: AppFactory) -> None:
    app = apps(broker_pool_limit=1)
    record = app.tasks["t.record"]
    ids: list[str] = []

    def send() -> None:  # with the pool's only producer held, an acquire would wait for ever
        ids.extend(record.apply_async(kwargs={"tag": n}, countdown=3600).id for n in range(3))

    with app.producer_or_acquire():
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        sender.join(timeout=10)
        assert not sender.is_alive(), "the timed sends waited for a producer from the broker pool"
    assert len(ids) == 3 and all(celery_zset_scheduler.lookup(app, i) is not None for i in ids)


def test_a_backend_that_uses_the_producer_gets_one_from_the_pool(apps: AppFactory) -> None:
    app = apps(result_backend="rpc://")
    result = app.tasks["t.record"].apply_async(kwargs={"tag": "rpc"}, countdown=3600)
    assert celery_zset_scheduler.lookup(app, result.id) is not None

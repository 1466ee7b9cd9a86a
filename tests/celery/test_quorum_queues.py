"""RabbitMQ classic and quorum queues end to end: a real RabbitMQ (the session's own node), the
suite's Redis as the store, a real worker and a dispatcher publishing with confirms.

Before the ``send_task`` interception, a countdown for a quorum queue was stored already rewritten
for Celery's native delayed delivery: published into the delay exchanges when due, it waited a
second time (``countdown=4`` ran after 8 s), and ``schedule_many``'s template was routed there
with a ten-year key (nothing arrived).
"""

from __future__ import annotations

import time

import pytest
from kombu.entity import Exchange

import celery_zset_scheduler
from celery_zset_scheduler.celery.publishers.amqp_confirms import ConfirmPublisher

from ..support.amqp import amqp_app, classic, count, quorum, vhost
from ..support.helpers import AppFactory, wait_for

__all__ = ["vhost"]

pytestmark = pytest.mark.timeout(180)


def ran(apps: AppFactory, n: int, timeout: float = 60.0) -> list[dict[str, object]]:
    return list(wait_for(lambda: len(apps.executions()) >= n and apps.executions(), timeout=timeout,
                         what=f"{n} executions"))


def test_a_countdown_to_a_quorum_queue_runs_once_at_its_eta(vhost: str, apps: AppFactory) -> None:
    app = amqp_app(apps, vhost, [quorum("zt.qq")])
    dispatcher = apps.dispatcher(app)
    assert isinstance(dispatcher.handoff.publisher, ConfirmPublisher)  # type: ignore[attr-defined]
    apps.worker(app)
    sent = time.time()
    app.tasks["t.record"].apply_async(kwargs={"tag": "four"}, countdown=4)
    app.tasks["t.record"].apply_async(kwargs={"tag": "half"}, countdown=0.5)  # Celery itself raises here
    runs = {r["tag"]: r for r in ran(apps, 2)}
    assert 0.5 <= float(runs["half"]["at"]) - sent < 3.0  # type: ignore[arg-type]
    assert 4.0 <= float(runs["four"]["at"]) - sent < 6.5, "waited twice (store, then delay queues)"  # type: ignore[arg-type]
    time.sleep(1.0)
    assert len(apps.executions()) == 2
    for level in (0, 1, 2):  # nothing parked in Celery's delay ladder
        assert count(vhost, f"celery_delayed_{level}") == 0


def test_a_retry_in_a_quorum_queue_waits_once(vhost: str, apps: AppFactory) -> None:
    app = amqp_app(apps, vhost, [quorum("zt.qq")])
    apps.dispatcher(app)
    apps.worker(app)
    app.tasks["t.retry_once"].apply_async(kwargs={"countdown": 2.0})
    first, second = ran(apps, 2)
    waited = float(second["at"]) - float(first["at"])  # type: ignore[arg-type]
    assert second["retries"] == 1
    assert 2.0 <= waited < 4.0, f"the retry waited {waited:.1f}s for a 2 s countdown"


def test_schedule_many_to_a_quorum_queue_arrives(vhost: str, apps: AppFactory) -> None:
    app = amqp_app(apps, vhost, [quorum("zt.qq")])
    record = app.tasks["t.record"]
    n = 400
    celery_zset_scheduler.schedule_many(record, [((), {"tag": i}, 1.0) for i in range(n)])
    apps.dispatcher(app)
    apps.worker(app)
    runs = ran(apps, n, timeout=120)
    assert sorted(int(r["tag"]) for r in runs) == list(range(n))  # type: ignore[call-overload]


def test_classic_and_quorum_queues_on_one_app(vhost: str, apps: AppFactory) -> None:
    # x-queue-type declared by the user on one queue; a classic queue on the same topic exchange
    # (any quorum queue makes Celery rewrite every timed send to a non-direct exchange).
    app = amqp_app(apps, vhost, [quorum("zt.qq"), classic("zt.cq")])
    apps.dispatcher(app)
    apps.worker(app)
    sent = time.time()
    app.tasks["t.record"].apply_async(kwargs={"tag": "quorum"}, countdown=3)
    app.tasks["t.record"].apply_async(kwargs={"tag": "classic"}, countdown=3, queue="zt.cq")
    runs = {r["tag"]: float(r["at"]) - sent for r in ran(apps, 2)}  # type: ignore[arg-type]
    assert set(runs) == {"quorum", "classic"}
    assert all(3.0 <= at < 5.0 for at in runs.values()), runs  # not 6 s: no second wait


def test_a_quorum_queue_declared_by_celery(vhost: str, apps: AppFactory) -> None:
    # No task_queues: Celery declares the default queue as a quorum queue itself.
    app = amqp_app(apps, vhost, task_default_queue="zt.dq", task_default_queue_type="quorum",
                   task_default_exchange="zt.dx", task_default_exchange_type="topic",
                   task_default_routing_key="zt.dq")
    assert app.amqp.queues["zt.dq"].queue_arguments == {"x-queue-type": "quorum"}
    assert app.amqp.queues["zt.dq"].exchange == Exchange("zt.dx", type="topic")
    apps.dispatcher(app)
    apps.worker(app)
    sent = time.time()
    app.tasks["t.record"].apply_async(countdown=3)
    (run,) = ran(apps, 1)
    assert 3.0 <= float(run["at"]) - sent < 5.5  # type: ignore[arg-type]

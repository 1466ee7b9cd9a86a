# mypy: disallow-untyped-calls=False
"""The confirms publisher against a real RabbitMQ: each message's fate becomes the report the
dispatcher settles (confirmed: published; returned, missing exchange: dead-lettered; nacked,
unconfirmed: back to due), the guard holds back lapsed and revoked messages, and what arrives is
the stored message with its ``eta`` moved aside and its ``expiration`` set at dispatch."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import pytest
from celery import Celery
from kombu.connection import Connection
from kombu.entity import Exchange, Queue

from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.dispatcher.build import publisher_for
from celery_zset_scheduler.celery.publishers.amqp_confirms import (
    BrokerRefused,
    ConfirmPublisher,
    MessageReturned,
    MissingExchange,
)
from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher
from celery_zset_scheduler.dispatch.handoff import Outgoing, PublishReport
from celery_zset_scheduler.model.codec import StoredMessage
from celery_zset_scheduler.model.times import eta_ms
from celery_zset_scheduler.testing import free_port

from ..support.amqp import amqp_app, classic, count, get_one, quorum, vhost
from ..support.helpers import AppFactory, HeldForever, built_message, wait_for

__all__ = ["vhost"]


class Guard(HeldForever):
    """A hand-made guard: some shards lapsed, some task ids revoked."""

    def __init__(self, lapsed: Sequence[int] = (), revoked: Sequence[str] = ()) -> None:
        self.lapsed = set(lapsed)
        self.revoked_ids = set(revoked)

    def still_ours(self, shard: int) -> bool:
        return shard not in self.lapsed

    def revoked(self, batch: Any, *, now: bool = False) -> frozenset[int]:
        return frozenset(i for i, o in enumerate(batch) if o.message.task_id in self.revoked_ids)


def messages(app: Celery, n: int, **options: Any) -> list[StoredMessage]:
    return [built_message(app.tasks["t.record"], kwargs={"tag": i}, countdown=60, **options) for i in range(n)]


def publish(app: Celery, batch: list[StoredMessage], guard: Any = None, shards: Sequence[int] = ()) -> PublishReport:
    publisher = ConfirmPublisher(app)
    try:
        out = [Outgoing(m, shards[i] if shards else 0) for i, m in enumerate(batch)]
        return publisher.publish(out, guard or HeldForever())
    finally:
        publisher.close()


def test_the_broker_transport_chooses_the_publisher(apps: AppFactory) -> None:
    closed = f"amqp://guest:guest@127.0.0.1:{free_port()}//"
    assert isinstance(publisher_for(apps(broker_url=closed)), ConfirmPublisher)
    assert isinstance(publisher_for(apps(broker_url=closed, zset_scheduler_amqp_confirms=False)), KombuPublisher)
    assert isinstance(publisher_for(apps()), KombuPublisher)  # a Redis broker


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_confirmed_messages_arrive_as_stored(vhost: str, apps: AppFactory, queue_type: str) -> None:
    queue = (quorum if queue_type == "quorum" else classic)("zt.q")
    app = amqp_app(apps, vhost, [queue])
    [m] = messages(app, 1, priority=3, expires=120)
    report = publish(app, [m])
    assert (report.published, report.error, report.unconfirmed, report.unpublishable) == (1, None, frozenset(), {})
    got = get_one(vhost, "zt.q")
    assert got is not None
    assert got.properties["application_headers"]["id"] == m.task_id
    headers = {k: v for k, v in got.properties["application_headers"].items() if k != "x-delivery-count"}
    # The eta moved aside (no worker holds it by its own clock), all else as stored.
    assert headers == {**m.headers, "eta": None, "zset_eta": m.headers["eta"]}
    body = got.body if isinstance(got.body, bytes) else got.body.encode()
    assert body == m.body
    assert (got.properties["correlation_id"], got.properties["priority"]) == (m.task_id, 3)
    assert got.properties["delivery_mode"] == 2
    # expires (an absolute header) became what was left of it at dispatch, in milliseconds.
    left = eta_ms(m.headers["expires"]) - time.time() * 1000
    assert left - 2000 <= int(got.properties["expiration"]) <= left + 50


def test_unroutable_messages_and_missing_exchanges_are_unpublishable(vhost: str, apps: AppFactory) -> None:
    app = amqp_app(apps, vhost, [classic("zt.q")])
    batch = messages(app, 4)
    batch[1] = dataclasses.replace(batch[1], routing_key="bound.to.nothing", queue=None)
    batch[2] = dataclasses.replace(batch[2], exchange="zt.no-such-exchange", queue=None)
    report = publish(app, batch)
    assert report.published == 4 and report.error is None and not report.unconfirmed
    assert sorted(report.unpublishable) == [1, 2]
    assert isinstance(report.unpublishable[1], MessageReturned)
    assert "312 NO_ROUTE" in str(report.unpublishable[1])
    assert isinstance(report.unpublishable[2], MissingExchange)
    assert count(vhost, "zt.q") == 2  # the channel survived: messages 0 and 3 are there


def test_a_nacked_message_goes_back_and_the_dispatcher_backs_off(vhost: str, apps: AppFactory) -> None:
    app = amqp_app(apps, vhost, [classic("zt.q")])
    full = Queue("zt.full", Exchange("zt.full", type="direct"), "zt.full",
                 queue_arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    with Connection(vhost) as conn:
        full(conn.default_channel).declare()
    batch = [dataclasses.replace(m, exchange="zt.full", routing_key="zt.full", queue=None) for m in messages(app, 5)]
    report = publish(app, batch)
    assert report.unconfirmed == {2, 3, 4} and not report.unpublishable
    assert isinstance(report.error, BrokerRefused)
    assert count(vhost, "zt.full") == 2


def test_lapsed_shards_and_revoked_messages_are_held_back(vhost: str, apps: AppFactory) -> None:
    app = amqp_app(apps, vhost, [classic("zt.q")])
    batch = messages(app, 6)
    report = publish(app, batch, Guard(lapsed=[1], revoked=[batch[0].task_id]), shards=[0, 1, 0, 1, 0, 1])
    assert (report.lapsed, report.revoked) == ({1, 3, 5}, {0})
    assert report.error is None and not report.unconfirmed
    assert count(vhost, "zt.q") == 2


def test_a_connection_closed_between_batches_is_replaced(rabbitmq: Any, vhost: str, apps: AppFactory) -> None:
    app = amqp_app(apps, vhost, [quorum("zt.q")])
    publisher = ConfirmPublisher(app)
    try:
        first = publisher.publish([Outgoing(m, 0) for m in messages(app, 10)], HeldForever())
        assert first.error is None
        rabbitmq.close_connections("between batches", vhost=vhost.rsplit("/", 1)[1])
        time.sleep(0.5)  # the broker's close frame is on its way
        second = publisher.publish([Outgoing(m, 0) for m in messages(app, 10)], HeldForever())
        assert (second.error, second.unconfirmed) == (None, frozenset())
    finally:
        publisher.close()
    assert count(vhost, "zt.q") == 20


def test_an_unroutable_task_is_dead_lettered_by_the_dispatcher(vhost: str, apps: AppFactory) -> None:
    app = amqp_app(apps, vhost, [classic("zt.q")])
    with Connection(vhost) as conn:
        Exchange("zt.tasks", type="topic")(conn.default_channel).declare()
    lost = app.tasks["t.record"].apply_async(countdown=0.3, exchange="zt.tasks", routing_key="nowhere")
    fine = app.tasks["t.record"].apply_async(countdown=0.3)
    apps.dispatcher(app)
    inst = installation_for(app)
    assert inst is not None
    letter = wait_for(lambda: inst.dead_letters.get(lost.id), what="the dead letter")
    assert letter.reason == "unpublishable" and "NO_ROUTE" in letter.exc_message
    wait_for(lambda: count(vhost, "zt.q") == 1, what="the routable task in its queue")
    assert get_one(vhost, "zt.q").properties["application_headers"]["id"] == fine.id


def test_an_expired_task_is_dropped_by_rabbitmq(vhost: str, apps: AppFactory) -> None:
    app = amqp_app(apps, vhost, [classic("zt.q")])
    app.tasks["t.record"].apply_async(countdown=0.3, expires=1.5)
    apps.dispatcher(app)
    wait_for(lambda: count(vhost, "zt.q") == 1, what="the dispatched task")
    # No worker: RabbitMQ itself drops it when its expiration (what was left of expires) passes.
    wait_for(lambda: count(vhost, "zt.q") == 0, timeout=5, what="RabbitMQ to expire it")

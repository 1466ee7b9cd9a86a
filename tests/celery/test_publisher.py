"""The publisher writes exactly what Kombu's Redis transport writes, on every path it takes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kombu import Exchange, Queue

from celery_zset_scheduler.celery.publishers import redis_queue
from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher
from celery_zset_scheduler.dispatch.handoff import Outgoing
from celery_zset_scheduler.model.codec import StoredMessage

from ..support.helpers import BROKER_DB, AppFactory, HeldForever, publish_by_hand

TAG = re.compile(rb'"delivery_tag": "[0-9a-f-]{36}"')
QUEUES = (
    Queue("celery"),
    Queue("bound", Exchange("direct_ex", type="direct"), routing_key="rk1"),
    Queue("topical", Exchange("topic_ex", type="topic"), routing_key="jobs.*"),
    Queue("expiring", queue_arguments={"x-expires": 60_000}),
)


def stored(n: int, **changes: Any) -> StoredMessage:
    tid = f"00000000-0000-4000-8000-{n:012d}"
    fields: dict[str, Any] = {
        "task_id": tid,
        "body": b'[[%d], {"k": "\xc3\xa9"}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]' % n,
        "headers": {"lang": "py", "task": "t.record", "id": tid, "root_id": tid, "argsrepr": f"({n},)",
                    "eta": None, "timelimit": [None, None], "stamps": {}},
        "properties": {"correlation_id": tid, "reply_to": "r-1", "delivery_mode": 2},
        "exchange": "", "routing_key": "celery", "queue": "celery",
    }
    fields.update(changes)
    return StoredMessage(**fields)


MESSAGES = [
    stored(1),
    stored(2, properties={"correlation_id": "x", "delivery_mode": 1, "priority": 5}),  # a priority sub-queue
    stored(3, exchange="direct_ex", routing_key="rk1", queue="bound"),  # routed by _kombu.binding.direct_ex
    stored(4, exchange="topic_ex", routing_key="jobs.a", queue="topical"),
    stored(5, routing_key="expiring", queue="expiring", properties={"priority": 9}),
    stored(6, content_type="application/x-python-serialize", content_encoding="binary", body=b"\x80\x04\x95"),
    stored(7),
]


def queue_contents(client: Any) -> dict[bytes, list[bytes]]:
    keys = sorted(k for k in client.keys("*") if client.type(k) == b"list")
    return {k: [TAG.sub(b'"delivery_tag": "-"', v) for v in client.lrange(k, 0, -1)] for k in keys}


def publish_batched(publisher: KombuPublisher, messages: list[StoredMessage]) -> int:
    with publisher.app.producer_or_acquire() as producer:
        return publisher._publish_batched(producer, [Outgoing(m, 0) for m in messages], HeldForever()).published


@pytest.mark.parametrize("path", ["redis_queue", "kombu_batch"])
@pytest.mark.parametrize("options", [{}, {"global_keyprefix": "pfx:"}])
def test_batched_paths_write_what_kombu_writes(apps: AppFactory, options: dict[str, Any], path: str) -> None:
    app = apps(task_queues=QUEUES, broker_transport_options=options)
    broker = apps.server.client(BROKER_DB)
    publisher = KombuPublisher(app)
    with app.producer_or_acquire() as producer:
        # Kombu's producer pool (per broker URL) and its transport's binding state outlive an app,
        # and every test starts on a flushed Redis: forget them and bind for real.
        producer.channel.state.clear()
        for queue in QUEUES:
            queue(producer.channel).declare()
        assert redis_queue.can_publish(producer, MESSAGES)
        for m in MESSAGES:  # Kombu's own path, one message at a time
            publisher._publish_one(producer, m, declare=True)
    by_kombu = queue_contents(broker)
    prefix = b"pfx:" if options else b""
    expiring = prefix + b"expiring\x06\x169"
    ttl_by_kombu = broker.pttl(expiring)
    for key in by_kombu:
        broker.delete(key)
    if path == "redis_queue":
        assert publish_by_hand(publisher, MESSAGES).published == len(MESSAGES)  # the path a Redis broker takes
    else:
        assert publish_batched(publisher, MESSAGES) == len(MESSAGES)
    assert queue_contents(broker) == by_kombu
    assert 0 < ttl_by_kombu <= 60_000 and 0 < broker.pttl(expiring) <= 60_000  # x-expires, as Kombu sets it
    assert set(by_kombu) == {prefix + k for k in (b"celery", b"celery\x06\x163", b"bound", b"topical",
                                                  b"expiring\x06\x169")}
    assert len(by_kombu[prefix + b"celery"]) == 3  # in publish order: LPUSH puts the newest first
    assert b'"correlation_id": "00000000-0000-4000-8000-000000000007"' in by_kombu[prefix + b"celery"][0]


def test_fanout_and_single_messages_go_through_kombu(apps: AppFactory) -> None:
    fan = Exchange("fan_ex", type="fanout")
    app = apps(task_queues=[Queue("celery"), Queue("fan_a", fan), Queue("fan_b", fan)])
    broker = apps.server.client(BROKER_DB)
    with app.producer_or_acquire() as producer:
        producer.maybe_declare(app.amqp.queues["fan_a"])
        assert not redis_queue.can_publish(producer, [stored(1, exchange="fan_ex", queue=None)])
    pubsub = broker.pubsub()
    pubsub.psubscribe("*fan_ex*")
    report = publish_by_hand(KombuPublisher(app), [stored(1, exchange="fan_ex", routing_key="", queue=None), stored(2)])
    assert (report.published, report.error) == (2, None)
    assert broker.llen("celery") == 1
    pubsub.close()

"""The publisher writes exactly what Kombu's Redis transport writes, on every path it takes."""

from __future__ import annotations

import itertools
import json
import re
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import kombu
import pytest
import redis
from kombu import Exchange, Producer, Queue

from celery_zset_scheduler.celery.publishers import redis_queue
from celery_zset_scheduler.celery.publishers.envelope import expiration_of
from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher
from celery_zset_scheduler.celery.publishers.templates import Templates, delivery_tags, same_json
from celery_zset_scheduler.dispatch.handoff import Outgoing
from celery_zset_scheduler.model.codec import StoredMessage, decode, encode

from ..support.helpers import BROKER_DB, AppFactory, HeldForever, built_message, publish_by_hand

VARYING = {"id", "root_id", "parent_id", "group", "group_index", "retries", "argsrepr", "kwargsrepr", "eta",
           "expires", "zset_eta"}

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
    if path == "kombu_batch" and not hasattr(Producer, "batch"):
        pytest.skip("Producer.batch() is new in Kombu 5.7: the publisher never takes this path before it")
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
    if kombu.VERSION[:2] >= (5, 7):
        assert 0 < ttl_by_kombu <= 60_000 and 0 < broker.pttl(expiring) <= 60_000  # x-expires, as Kombu sets it
    else:
        assert ttl_by_kombu == broker.pttl(expiring) == -1  # Kombu before 5.7 never expires a Redis queue
    assert set(by_kombu) == {prefix + k for k in (b"celery", b"celery\x06\x163", b"bound", b"topical",
                                                  b"expiring\x06\x169")}
    assert len(by_kombu[prefix + b"celery"]) == 3  # in publish order: LPUSH puts the newest first
    assert b'"correlation_id": "00000000-0000-4000-8000-000000000007"' in by_kombu[prefix + b"celery"][0]


@pytest.mark.default_user("exchanges and queues declared by hand")
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


# -- envelopes from templates ------------------------------------------------------------------

EXPIRATION = re.compile(rb'"expiration": "\d+"')


def _calls(app: Any) -> list[StoredMessage]:
    """The messages apply_async stores for a varied set of calls, as a dispatcher reads them back."""
    record, sleep = app.tasks["t.record"], app.tasks["t.sleep"]
    eta = datetime.now(timezone.utc) + timedelta(hours=1)
    calls = [
        (record, {"args": ("a",)}),
        (record, {"args": ("b",), "kwargs": {"pad": "é\u2028\"x\\"}}),  # escapes in argsrepr and body
        (record, {"args": (1,), "priority": 3}),
        (record, {"args": (2,), "priority": 9, "queue": "expiring"}),
        (record, {"args": (3,), "queue": "bound"}),
        (record, {"kwargs": {"tag": "t"}, "queue": "topical", "routing_key": "jobs.x"}),
        (record, {"args": (4,), "eta": eta}),
        (record, {"args": (5,), "eta": eta, "expires": eta + timedelta(minutes=5)}),
        (record, {"args": (6,), "expires": 600}),
        (record, {"args": (7,), "headers": {"tenant": "acme", "n": 1, "flag": True}}),
        (record, {"args": (8,), "headers": {"tenant": "other", "n": True, "flag": 1}}),  # same keys, other JSON
        (record, {"args": (9,), "headers": {"tenant": "acme", "n": 1.0, "flag": True}}),
        (record, {"args": (10,), "link": sleep.si(0.1), "link_error": sleep.si(0.2)}),
        (record, {"args": (11,), "expiration": 30}),
        (sleep, {"args": (0.1,)}),  # another task, same queue
        (sleep, {"args": (0.2,), "queue": "bound"}),
        (record, {"args": (12,), "shadow": "renamed"}),
        (record, {"args": (13,), "headers": {"stamps": {"a": [1, 2]}, "timelimit": [1, 2.5]}}),
        (record, {"args": (14,)}),
        (record, {"args": (15,), "priority": 3}),
        (record, {"args": (16,), "headers": {"tenant": "acme", "n": 1, "flag": True}}),
        (record, {"args": (17,), "priority": 6}),  # the shape of priority 3's, another sub-queue
        (record, {"args": (18,), "priority": 5}),  # the sub-queue of priority 3's, another value
    ]
    return [decode(m.task_id, encode(m)) for m in (built_message(task, **options) for task, options in calls)]


def _contents(client: Any) -> dict[bytes, list[bytes]]:
    return {k: [EXPIRATION.sub(b'"expiration": "-"', v) for v in values]
            for k, values in queue_contents(client).items()}


@pytest.mark.parametrize("options", [{}, {"global_keyprefix": "pfx:"}])
def test_templated_envelopes_are_kombus_own(apps: AppFactory, options: dict[str, Any]) -> None:
    app = apps(task_queues=QUEUES, broker_transport_options=options)
    broker = apps.server.client(BROKER_DB)
    messages = _calls(app)
    publisher = KombuPublisher(app)
    with app.producer_or_acquire() as producer:
        producer.channel.state.clear()
        for queue in QUEUES:
            queue(producer.channel).declare()
        for m in messages:  # Producer.publish, one message at a time
            publisher._publish_one(producer, m, declare=True)
    by_kombu = _contents(broker)
    raw_kombu = queue_contents(broker)
    for key in by_kombu:
        broker.delete(key)
    for _ in range(2):  # the first pass makes the templates, the second one uses them
        assert publish_by_hand(publisher, messages).published == len(messages)
        assert _contents(broker) == by_kombu
        for key, values in queue_contents(broker).items():  # TTLs: what is left until expires, both ways
            for mine, theirs in zip(values, raw_kombu[key], strict=True):
                a, b = EXPIRATION.search(mine), EXPIRATION.search(theirs)
                assert (a is None) == (b is None)
                if a and b:
                    assert abs(int(a.group()[15:-1]) - int(b.group()[15:-1])) < 5_000
        for key in by_kombu:
            broker.delete(key)
    prefix = b"pfx:" if options else b""
    assert {prefix + k for k in (b"celery", b"celery\x06\x163", b"celery\x06\x166", b"bound", b"topical",
                                 b"expiring\x06\x169")} <= set(by_kombu)


def test_a_template_is_never_shared_between_tasks_queues_or_json_types(apps: AppFactory) -> None:
    app = apps(task_queues=QUEUES)
    messages = _calls(app)
    templates = Templates()
    with app.producer_or_acquire() as producer:
        made = []
        for m in messages:
            def envelope(m: StoredMessage, h: dict[str, Any], p: dict[str, Any], e: str | None) -> Any:
                return redis_queue.kombu_message(producer, producer.channel, m, h, p, e)

            expiring = expiration_of(m) is not None
            template = templates.get(m, bool(m.headers.get("eta")), expiring, envelope)
            assert template is not None
            made.append(template)
    # Only messages of the same task, queue, routing and constant values share one.
    for (a, ta), (b, tb) in itertools.combinations(zip(messages, made, strict=True), 2):
        if ta is tb:
            assert (a.task_name, a.queue, a.exchange, a.routing_key) == \
                   (b.task_name, b.queue, b.exchange, b.routing_key)
            assert a.properties.get("priority") == b.properties.get("priority")
            assert json.dumps([(k, v) for k, v in a.headers.items() if k not in VARYING]) == \
                   json.dumps([(k, v) for k, v in b.headers.items() if k not in VARYING])
    assert made[0] is made[1] is made[18]  # the same shape and values reuse it (after another's)
    assert made[9] is not made[10] and made[9] is not made[11]  # 1 / True / 1.0: three JSON texts


def test_a_shape_that_cannot_be_cut_takes_kombus_path(apps: AppFactory) -> None:
    app = apps(task_queues=QUEUES)
    broker = apps.server.client(BROKER_DB)
    tricky = stored(1, headers={**stored(1).headers, "note": "\x00zset-slot-0-id\x00"})  # a marker's own text
    publisher = KombuPublisher(app)
    with app.producer_or_acquire() as producer:
        publisher._publish_one(producer, tricky, declare=True)
    by_kombu = queue_contents(broker)
    broker.delete(*by_kombu)
    assert publish_by_hand(publisher, [tricky, tricky]).published == 2
    assert queue_contents(broker) == {k: v * 2 for k, v in by_kombu.items()}


def test_delivery_tags_are_random_uuid4s() -> None:
    tags = [json.loads(t) for t in delivery_tags(200)]
    assert len(set(tags)) == 200
    assert all(uuid.UUID(t).version == 4 and str(uuid.UUID(t)) == t for t in tags)


def test_same_json_compares_json_types() -> None:
    assert same_json([None, None], [None, None]) and same_json({"a": [1]}, {"a": [1]})
    assert not same_json(1, True) and not same_json(1, 1.0) and not same_json(0.0, -0.0)
    assert not same_json({"a": 1, "b": 2}, {"b": 2, "a": 1})  # key order is text order
    assert not same_json([1, [True]], [1, [1]])


@pytest.mark.default_user("exchanges and queues declared by hand")
def test_the_hand_written_transaction_raises_what_redis_refused(apps: AppFactory) -> None:
    app = apps(task_queues=QUEUES, broker_transport_options={"global_keyprefix": "pfx:"})
    broker = apps.server.client(BROKER_DB)
    broker.set("pfx:taken", "a string")
    with app.producer_or_acquire() as producer, producer.channel.conn_or_acquire() as client:
        redis_queue.transaction(client, [("LPUSH", "q1", b"m1", b"m2"), ("PEXPIRE", "q1", 60_000)])
        assert broker.lrange("pfx:q1", 0, -1) == [b"m2", b"m1"] and 0 < broker.pttl("pfx:q1") <= 60_000
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):  # refused at EXEC
            redis_queue.transaction(client, [("LPUSH", "taken", b"m3")])
        with pytest.raises(redis.ResponseError, match="wrong number of arguments"):  # refused when queued
            redis_queue.transaction(client, [("LPUSH", "q2")])
        assert not broker.exists("pfx:q2")
        redis_queue.transaction(client, [("LPUSH", "q1", b"m4")])  # the connection is still in step
    assert broker.lrange("pfx:q1", 0, 0) == [b"m4"]

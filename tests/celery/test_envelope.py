"""What a worker receives from the store is what plain Celery sends, field by field, apart from
the ETA moved to ``zset_eta`` and the TTL computed at dispatch (real apps, dispatcher, broker)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from kombu import Queue

import celery_zset_scheduler
from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher

from ..support.helpers import BROKER_DB, AppFactory, wait_for

QUEUES = [Queue("celery"), Queue("q")]


def take(broker: redis.Redis, queue: str, timeout: float = 20.0) -> dict[str, Any]:
    """The next message of ``queue``, whichever of Kombu's priority sub-queues holds it."""
    def pop() -> bytes | None:
        for key in [queue.encode()] + [k for k in broker.keys(f"{queue}\x06*") if broker.type(k) == b"list"]:
            raw = broker.rpop(key)
            if raw:
                return raw  # type: ignore[no-any-return]
        return None

    return json.loads(wait_for(pop, timeout=timeout, what=f"a message in {queue!r}"))  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", ["redis_queue", "kombu"])
def test_a_dispatched_envelope_is_plain_celerys_but_for_the_eta_and_the_ttl(apps: AppFactory, path: str) -> None:
    broker = apps.server.client(BROKER_DB)
    plain = apps(install=False, task_queues=QUEUES)
    ours = apps(task_queues=QUEUES)
    task_id = str(uuid.uuid4())
    eta = datetime.now(timezone.utc) + timedelta(seconds=0.5)
    expires = eta + timedelta(seconds=60)
    call = {"kwargs": {"tag": "x"}, "task_id": task_id, "queue": "q", "eta": eta, "expires": expires,
            "headers": {"tenant": "acme"}, "priority": 3}
    sent = time.time()
    plain.tasks["t.record"].apply_async(**call)
    theirs = take(broker, "q")
    ours.tasks["t.record"].apply_async(**call)
    if path == "redis_queue":  # what a dispatcher does with a Redis broker
        apps.dispatcher(ours)
    else:  # through Producer.publish, as for any other broker
        time.sleep(max(0.0, eta.timestamp() - time.time()))
        found = celery_zset_scheduler.lookup(ours, task_id)
        assert found is not None and found[1] is not None
        with ours.producer_or_acquire() as producer:
            KombuPublisher(ours)._publish_one(producer, found[1], declare=True)
    mine = take(broker, "q")
    dispatched = time.time()

    # The eta moved aside (a worker must not hold it by its own clock), nothing else in the headers.
    assert theirs["headers"]["eta"] == eta.isoformat()
    assert mine["headers"]["eta"] is None and mine["headers"]["zset_eta"] == eta.isoformat()
    assert {k: v for k, v in mine["headers"].items() if k not in ("eta", "zset_eta")} == \
           {k: v for k, v in theirs["headers"].items() if k != "eta"}
    assert mine["body"] == theirs["body"]
    assert (mine["content-type"], mine["content-encoding"]) == (theirs["content-type"], theirs["content-encoding"])

    # Same properties, none of Producer.publish's own arguments (mandatory, immediate) among them.
    theirs_p, mine_p = theirs["properties"], mine["properties"]
    assert set(mine_p) == set(theirs_p)
    assert "mandatory" not in mine_p and "immediate" not in mine_p
    for key in set(theirs_p) - {"delivery_tag", "reply_to", "expiration"}:  # reply_to: each app's own id
        assert mine_p[key] == theirs_p[key], key
    # The TTL is what is left until `expires` when it is published, as Celery computes it at send.
    left_at_send = (expires.timestamp() - sent) * 1000
    assert left_at_send - 1000 <= int(theirs_p["expiration"]) <= left_at_send
    assert (expires.timestamp() - dispatched) * 1000 <= int(mine_p["expiration"])
    assert int(mine_p["expiration"]) <= (expires.timestamp() - eta.timestamp()) * 1000


def test_a_task_expired_at_dispatch_is_published_and_marked_expired(apps: AppFactory) -> None:
    broker = apps.server.client(BROKER_DB)
    app = apps()
    result = app.tasks["t.record"].apply_async(kwargs={"tag": "late"}, countdown=0.6, expires=0.2)
    apps.dispatcher(app)
    message = take(broker, "celery")
    assert message["properties"]["expiration"] == "0"  # as Celery sends one already expired
    broker.lpush("celery", json.dumps(message))
    apps.worker(app)
    wait_for(lambda: result.state == "REVOKED", what="the worker marking it expired")
    assert apps.executions() == []


def test_an_expiration_without_expires_is_kept_as_a_queue_ttl(apps: AppFactory) -> None:
    broker = apps.server.client(BROKER_DB)
    app = apps()
    app.tasks["t.record"].apply_async(countdown=0.3, expiration=30)
    apps.dispatcher(app)
    assert take(broker, "celery")["properties"]["expiration"] == "30000"

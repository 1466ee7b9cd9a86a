"""Operations run against a real Redis: a store of 4 shards with real encoded messages."""

from __future__ import annotations

import pytest
import redis

from celery_zset_scheduler.model.codec import StoredMessage, encode
from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.deadletters import DeadLetters
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.testing import RedisServer


def message(task_id: str, task: str = "t.add", args: str = "[1, 2]") -> bytes:
    body = f'[{args}, {{}}, {{"callbacks": null, "errbacks": null, "chain": null, "chord": null}}]'
    return encode(StoredMessage(task_id, body.encode(), {"task": task, "id": task_id, "root_id": task_id,
                                                         "argsrepr": args, "kwargsrepr": "{}"},
                                properties={"correlation_id": task_id}, routing_key="celery", queue="celery"))


@pytest.fixture
def store(r: redis.Redis, redis_server: RedisServer) -> Store:
    return Store(make_client(redis_server.url), KeySpace("zo", 4))


@pytest.fixture
def letters(store: Store) -> DeadLetters:
    return DeadLetters(store.client, store.keys)

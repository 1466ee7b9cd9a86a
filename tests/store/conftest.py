"""The store's tests are a contract: each runs on every Redis deployment listed here.

A deployment gives a client of its own; the store's keys are hash-tagged per shard, so the same
tests hold on a standalone server and (once its fixture joins the list) on a Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.testing import RedisServer

Deployment = Callable[[], redis.Redis]


@pytest.fixture(params=["standalone"])
def deployment(request: pytest.FixtureRequest, r: redis.Redis, redis_server: RedisServer) -> Iterator[Deployment]:
    """Makes clients of the deployment under test (emptied before each test by ``r``)."""
    assert request.param == "standalone"
    yield lambda: make_client(redis_server.url)


@pytest.fixture
def store(deployment: Deployment) -> Store:
    return Store(deployment(), KeySpace("zt", 4))

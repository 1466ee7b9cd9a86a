"""The store's tests are a contract: each runs on every Redis deployment listed here.

A deployment gives a client of its own; the store's keys are hash-tagged per shard, so the same
tests hold on a standalone server and on a Redis Cluster (the session's shared cluster: three
masters with a replica each). ``r`` is a client of the deployment under test, emptied first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.pending import Store

Deployment = Callable[[], Any]


@pytest.fixture(params=["standalone", "cluster"])
def deployment(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    """Makes clients of the deployment under test (emptied before each test)."""
    if request.param == "standalone":
        server = request.getfixturevalue("redis_server")
        server.client().flushall()
        yield lambda: make_client(server.url)
    else:
        cluster = request.getfixturevalue("cluster")
        yield lambda: make_client(cluster.url, cluster="auto")


@pytest.fixture
def r(deployment: Deployment) -> Iterator[Any]:
    client = deployment()
    yield client
    client.close()


@pytest.fixture
def store(deployment: Deployment) -> Store:
    return Store(deployment(), KeySpace("zt", 4))

"""Shared fixtures: a real redis-server and a private RabbitMQ for the session, a clean store per
test, Celery apps."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.acl import ROLES, Rules, store_rules
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.testing import RedisServer
from celery_zset_scheduler.testing.cluster import RedisClusterServer, cluster_support
from celery_zset_scheduler.testing.sentinel import RedisSentinelSet

from .support import acl
from .support.helpers import AppFactory
from .support.rabbitmq import rabbitmq_fixture, rabbitmq_url_fixture

pytest_plugins = ("pytester",)  # the pytest plugin's own tests run pytest as a user would

# One private RabbitMQ for the whole session (its own node, else a vhost; started when first asked for).
rabbitmq = rabbitmq_fixture()
rabbitmq_url = rabbitmq_url_fixture()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    os.environ["ZSET_TEST_REDIS_PORT"] = str(server.port)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServer]:
    """One Redis Cluster (3 masters, 3 replicas, AOF) for the session, shared by every test that
    needs one; a test that breaks it (kills a master) must ``restore()`` it before it ends."""
    why = cluster_support()
    if why is not None:
        pytest.skip(f"no local Redis Cluster: {why}")
    cluster = RedisClusterServer().start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster(redis_cluster: RedisClusterServer) -> Iterator[RedisClusterServer]:
    """The session's cluster, whole and emptied for the test (and made whole again after it)."""
    redis_cluster.restore()
    redis_cluster.flushall()
    yield redis_cluster
    redis_cluster.restore()


@pytest.fixture(scope="session")
def redis_sentinels() -> Iterator[RedisSentinelSet]:
    """One Sentinel-managed Redis (a master, a replica, three sentinels, all with a password) for
    the session; a test that breaks it (kills the master) leaves it for the next ``sentinels``."""
    sentinels = RedisSentinelSet(password="s3nt-pw").start()
    try:
        yield sentinels
    finally:
        sentinels.close()


@pytest.fixture
def sentinels(redis_sentinels: RedisSentinelSet) -> Iterator[RedisSentinelSet]:
    """The session's Sentinel set, whole and emptied for the test."""
    redis_sentinels.reset()
    yield redis_sentinels


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of db 0 of the session server, emptied (all dbs) before each test."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def store(r: redis.Redis, redis_server: RedisServer, request: pytest.FixtureRequest) -> Store:
    keys = KeySpace("zt", 4)
    url = redis_server.url
    if acl.acl_mode() and not redis_server.password and request.node.get_closest_marker("default_user") is None:
        # the store's documented rules for every role, and nothing else
        rules = sum((store_rules(role, keys) for role in ROLES), Rules())
        url = acl.as_user(url, acl.create_user(r, rules))
    return Store(make_client(url), keys)


@pytest.fixture
def apps(r: redis.Redis, redis_server: RedisServer, request: pytest.FixtureRequest) -> Iterator[AppFactory]:
    factory = AppFactory(redis_server, acl_users=request.node.get_closest_marker("default_user") is None)
    try:
        yield factory
    finally:
        factory.close()

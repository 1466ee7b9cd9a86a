"""``zset_scheduler_wait_replicas``: a schedule returns once that many replicas have it (``WAIT``
on the connection that wrote it), else ``NotReplicated``, with the entry stored on the master."""

from __future__ import annotations

import time

import pytest
import redis

from celery_zset_scheduler.errors import NotReplicated, StoreUnavailable
from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry
from celery_zset_scheduler.testing import RedisServer
from celery_zset_scheduler.testing.cluster import RedisClusterServer

from ..support.tools import pending

NOW = int(time.time() * 1000) + 3_600_000


def test_a_server_without_replicas_cannot_confirm_and_says_so(redis_server: RedisServer) -> None:
    redis_server.client().flushall()
    store = Store(make_client(redis_server.url), KeySpace("zt", 4), wait=(1, 50))
    with pytest.raises(NotReplicated, match="0 of the 1 replicas") as caught:
        store.schedule("a", NOW, b"x")
    assert isinstance(caught.value, StoreUnavailable)
    assert store.get("a") is not None  # stored on the master, only not confirmed
    with pytest.raises(NotReplicated):
        store.schedule_many([NewEntry(f"m{i}", NOW, b"x") for i in range(10)])
    with pytest.raises(NotReplicated):
        store.add_many((f"s{i}", NOW, b"x") for i in range(10))
    assert pending(store) == 21
    plain = Store(make_client(redis_server.url), KeySpace("zt", 4))  # no WAIT asked: no WAIT sent
    assert plain.schedule("b", NOW, b"x").status == "scheduled"


def test_every_master_confirms_its_own_writes(cluster: RedisClusterServer) -> None:
    store = Store(make_client(cluster.url, cluster="true"), KeySpace("zt", 12), wait=(1, 2000))
    assert store.schedule("a", NOW, b"x").status == "scheduled"
    results = store.schedule_many([NewEntry(f"m{i}", NOW, b"x") for i in range(300)])  # every master
    assert {r.status for r in results} == {"scheduled"}
    assert store.add_many((f"s{i}", NOW, b"x") for i in range(3000)) == 3000
    assert pending(store) == 3301


def test_a_master_without_its_replica_refuses_only_its_own_shards(cluster: RedisClusterServer) -> None:
    store = Store(make_client(cluster.url, cluster="true"), KeySpace("zt", 12), wait=(1, 200))
    master = cluster.master_of(store.keys.shard(0).due)
    cluster.kill(cluster.replica_of(master))  # the fixture starts it again after the test
    there = next(f"t{i}" for i in range(1000) if store.keys.shard_of(f"t{i}") == 0)
    elsewhere = next(f"t{i}" for i in range(1000)
                     if cluster.master_of(store.keys.shard(store.keys.shard_of(f"t{i}")).due) != master)
    assert store.schedule(elsewhere, NOW, b"x").status == "scheduled"
    with pytest.raises(NotReplicated):
        store.schedule(there, NOW, b"x")
    assert store.get(there) is not None


def test_a_claim_needs_the_replicas_a_schedule_waits_for(redis_server: RedisServer) -> None:
    """With ``wait_replicas`` n, nothing is claimed from a master with fewer than n replicas in
    sync (after a Sentinel failover, the old master until it is reconfigured): the claim fails as
    an outage of the shard and leaves every entry where it was."""
    from celery_zset_scheduler.dispatch.leadership import Leadership
    from celery_zset_scheduler.store.claims import Claims

    redis_server.client().flushall()
    plain = Store(make_client(redis_server.url), KeySpace("zt", 1))
    plain.schedule("a", 1, b"x")
    waiting = Store(make_client(redis_server.url), KeySpace("zt", 1), wait=(1, 50))
    leadership = Leadership(waiting, "m1", 5.0, pinned={0})
    leadership.beat()
    lease = leadership.lease(0)
    assert lease is not None
    results = Claims(waiting).claim_many([lease.fence], 10, 30_000).results
    assert isinstance(results[0], redis.ResponseError)
    assert "NOREPLICAS 0 of the 1 replicas asked for (zset_scheduler_wait_replicas)" in str(results[0])
    assert pending(plain) == 1 and plain.client.zcard(plain.keys.shard(0).inflight) == 0
    claimed = Claims(plain).claim_many([lease.fence], 10, 30_000).results[0]
    assert not isinstance(claimed, Exception) and [c.task_id for c in claimed.entries] == ["a"]

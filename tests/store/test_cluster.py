"""The store's calls on a Redis Cluster through a failover: the scripts are sent again where the
promoted replica's cache is empty, and a master that is down fails only its own shards' calls."""

from __future__ import annotations

import time

import pytest
import redis

from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.entries import get_call
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry
from celery_zset_scheduler.testing.cluster import RedisClusterServer

from ..support.tools import pending

NOW = int(time.time() * 1000) + 3_600_000
SHARDS = 12


def spread(cluster: RedisClusterServer, count: int = 600) -> list[NewEntry]:
    """Entries on every shard, each confirmed by its master's replica (WAIT 1)."""
    confirmed = Store(make_client(cluster.url, cluster="true"), KeySpace("zt", SHARDS), wait=(1, 5000))
    entries = [NewEntry(f"id-{i}", NOW, b"x") for i in range(count)]
    confirmed.schedule_many(entries)
    return entries


def test_a_cluster_failover_is_followed_and_the_scripts_loaded_on_the_new_master(
    cluster: RedisClusterServer,
) -> None:
    store = Store(make_client(cluster.url, cluster="true"), KeySpace("zt", SHARDS))
    entries = spread(cluster)
    old = cluster.master_of(store.keys.shard(0).due)
    new = cluster.failover(old)
    new.client().config_resetstat()
    # The client still has the old slot map: MOVED, then NOSCRIPT on the promoted replica.
    calls = [get_call(store.keys, store.keys.shard_of(e.task_id), e.task_id) for e in entries]
    found = store.scripts.run_many(calls)
    assert all(f is not None for f in found)
    assert store.schedule("after", NOW, b"y").status == "scheduled"
    errors = new.client().info("errorstats")
    assert errors.get("errorstat_NOSCRIPT", {}).get("count", 0) >= 1  # its cache was empty: loaded there
    assert pending(store) == len(entries) + 1


def test_a_master_down_fails_only_its_shards_and_its_replica_takes_over(cluster: RedisClusterServer) -> None:
    store = Store(make_client(cluster.url, cluster="true"), KeySpace("zt", SHARDS))
    entries = spread(cluster)
    victim = cluster.master_of(store.keys.shard(0).due)
    replica = cluster.replica_of(victim)
    on_victim = {s for s in range(SHARDS) if cluster.master_of(store.keys.shard(s).due) == victim}
    cluster.kill(victim)
    calls = [get_call(store.keys, s, "id-0") for s in range(SHARDS)]
    started = time.monotonic()
    replies = store.scripts.settle(calls)
    elapsed = time.monotonic() - started
    failed = {s for s, r in enumerate(replies) if isinstance(r, Exception)}
    assert failed == on_victim and on_victim
    assert all(isinstance(replies[s], redis.ConnectionError) for s in failed)
    assert elapsed < 2.0  # the other shards' answers are not held up by the dead master
    cluster.wait_promoted(replica)
    deadline = time.monotonic() + 30
    while any(isinstance(r, Exception) for r in store.scripts.settle(calls)):
        assert time.monotonic() < deadline, "the promoted replica never answered"
        time.sleep(0.2)
    assert pending(store) == len(entries)  # each write was on the replica before the kill


def test_a_call_to_a_slot_being_migrated_follows_the_ask_redirection(cluster: RedisClusterServer) -> None:
    client = make_client(cluster.url, cluster="true")
    store = Store(client, KeySpace("zt", SHARDS))
    store.check_meta()
    sk = store.keys.shard(5)  # empty: every key of the slot is "not here yet" on its source
    slot = client.keyslot(sk.due)
    source = cluster.master_of(sk.due)
    target = next(cluster.node(p) for p in cluster.master_ports() if p != source.port)
    source_id = source.client().execute_command("CLUSTER", "MYID").decode()
    target_id = target.client().execute_command("CLUSTER", "MYID").decode()
    target.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    source.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    for node in (source, target):
        node.client().config_resetstat()
    task_id = next(f"a{i}" for i in range(10_000) if store.keys.shard_of(f"a{i}") == 5)
    try:
        # The source answers ASK (the keys are not there); the call goes with ASKING to the
        # importing node, which refuses a script over keys it does not all have yet (TRYAGAIN):
        # the call did not run anywhere, and the shard waits until the slot has moved.
        with pytest.raises(redis.exceptions.TryAgainError):
            store.schedule(task_id, NOW, b"x")
        assert source.client().info("errorstats").get("errorstat_ASK", {}).get("count", 0) >= 1
        assert target.client().info("errorstats").get("errorstat_TRYAGAIN", {}).get("count", 0) >= 1
    finally:
        for port in cluster.master_ports():
            cluster.node(port).client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    cluster.wait_healthy()
    assert store.get(task_id) is None  # it ran nowhere
    assert store.schedule(task_id, NOW, b"x").status == "scheduled"  # MOVED to the slot's new node
    assert target.client().zscore(sk.due, task_id) == NOW

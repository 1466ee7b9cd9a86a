"""The store on Redis Cluster under load: a master killed (-9) and a ``CLUSTER FAILOVER``
while tasks are scheduled and dispatched, with a real worker and two dispatcher processes
(I1, I2). The broker is the standalone test server (Kombu has no cluster transport).

Producers ask for ``WAIT`` 1 (``zset_scheduler_wait_replicas``): a schedule is acknowledged
only once the master's replica has it, so the replica promoted in its place has every
acknowledged task. A schedule refused during the failover (``StoreUnavailable``, or
``NotReplicated`` while the promoted master has no replica yet) is not acknowledged; the
producer sends it again (same id), as an application would.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator

import pytest

from celery_zset_scheduler.testing import RedisServer
from celery_zset_scheduler.testing.cluster import RedisClusterServer

from ..support.helpers import FAST, AppFactory, wait_for
from ..support.procs import Cluster
from ..support.producer import Producer

pytestmark = pytest.mark.slow

SHARDS = 12  # four per master
BATCH = 50
CONF = {**FAST, "zset_scheduler_wait_replicas": 1, "zset_scheduler_wait_timeout": 2.0,
        "zset_scheduler_batch_size": BATCH}


@pytest.fixture
def procs(redis_server: RedisServer, r: object, cluster: RedisClusterServer) -> Iterator[Cluster]:
    made = Cluster(redis_server, shards=SHARDS, conf=CONF, store_url=cluster.url)
    yield made
    made.close()


def run_under_load(apps: AppFactory, procs: Cluster, cluster: RedisClusterServer,
                   disrupt: Callable[[], None]) -> tuple[Producer, collections.Counter[str]]:
    procs.worker()
    procs.dispatcher()
    procs.dispatcher()
    producer = Producer(apps(shards=SHARDS, zset_scheduler_url=cluster.url, **CONF), count=1200, pace=0.005)
    producer.start()
    wait_for(lambda: len(producer.acked) >= 400, timeout=60, what="the first 400 schedules")
    wait_for(lambda: len(apps.executions()) >= 100, timeout=60, what="dispatching under way")
    disrupt()
    producer.join(timeout=180)
    assert not producer.is_alive() and producer.error is None, producer.error
    acked = set(producer.acked)
    runs = lambda: collections.Counter(run["id"] for run in apps.executions())  # noqa: E731
    wait_for(lambda: acked <= set(runs()), timeout=120, interval=0.2,
             what=f"every acknowledged task to run ({len(acked - set(runs()))} missing)")
    time.sleep(2 * FAST["zset_scheduler_inflight_timeout"])  # let a re-published batch show up
    return producer, runs()


def check(producer: Producer, counts: collections.Counter[str], procs: Cluster) -> None:
    acked = set(producer.acked)
    assert len(acked) == producer.count
    assert acked <= set(counts)  # lost = 0
    assert set(counts) <= acked  # nothing invented
    # A send refused during the failover may have been stored anyway (NotReplicated says so; a
    # lost reply cannot tell): each send of it can run once, as with any retried publish.
    resent = producer.attempts
    assert all(counts[i] <= n for i, n in resent.items()), {i: (counts[i], n) for i, n in resent.items()}
    once = {i: n for i, n in counts.items() if i not in resent}
    assert max(once.values()) <= 2  # I2: a batch published twice at most, never more
    duplicated = [i for i, n in once.items() if n > 1]
    # At most the batches in hand on the failed master's shards: batch size x shards led there.
    assert len(duplicated) <= BATCH * SHARDS
    for proc in procs.procs:
        assert proc.alive, proc.output[-3000:]  # recovered by itself, no restart
    for proc in procs.procs[1:]:  # the dispatchers
        # Only the shards of the master that was replaced waited: never the whole dispatcher.
        assert "outage.started what=redis store=" not in proc.output, proc.output[-5000:]


def test_a_master_killed_under_load_loses_no_acknowledged_task(
    apps: AppFactory, procs: Cluster, cluster: RedisClusterServer
) -> None:
    store = apps(shards=SHARDS, zset_scheduler_url=cluster.url)
    keys = apps.store(store).keys
    victim = cluster.master_of(keys.shard(0).due)
    replica = cluster.replica_of(victim)

    def kill() -> None:
        cluster.kill(victim)
        cluster.wait_promoted(replica)
        # Until the killed node is back (it rejoins as the new master's replica), no write to its
        # shards can be acknowledged with WAIT 1: the producer's schedules there are refused.
        time.sleep(1.0)
        cluster.restore()

    producer, counts = run_under_load(apps, procs, cluster, kill)
    check(producer, counts, procs)


def test_a_cluster_failover_under_load_loses_nothing(
    apps: AppFactory, procs: Cluster, cluster: RedisClusterServer
) -> None:
    store = apps(shards=SHARDS, zset_scheduler_url=cluster.url)
    victim = cluster.master_of(apps.store(store).keys.shard(0).due)
    producer, counts = run_under_load(apps, procs, cluster, lambda: cluster.failover(victim) and None)
    check(producer, counts, procs)
    # A manual failover waits for the replica to catch up and loses no reply: no duplicate.
    assert [i for i, n in counts.items() if n > 1 and i not in producer.attempts] == []

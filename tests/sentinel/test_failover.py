"""The store and the broker on one Sentinel-managed master under load: the master killed (-9)
until a sentinel promotes the replica, and a graceful ``SENTINEL FAILOVER``, while a producer
schedules, two dispatcher processes dispatch and a worker process runs the tasks (I1, I2).

The broker is the same master (Celery's Sentinel transport), the store its default: the broker's
master and database, so the fast path applies. Producers ask for ``WAIT`` 1
(``zset_scheduler_wait_replicas``): a schedule is acknowledged only once the replica has it, so
the replica promoted in the master's place has every acknowledged task. A schedule refused
during the failover (``StoreUnavailable``, or ``NotReplicated`` while the master has no replica)
is not acknowledged; the producer sends it again (same id), as an application would. Executions
are recorded on another Redis server (the session's standalone one), out of the failover's way.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from celery_zset_scheduler.testing import RedisServer
from celery_zset_scheduler.testing.sentinel import RedisSentinelSet

from ..support.helpers import BROKER_DB, FAST, AppFactory, wait_for
from ..support.procs import Cluster
from ..support.producer import Producer

pytestmark = pytest.mark.slow

SHARDS = 4
BATCH = 50
PASSWORD = "s3nt-pw"


def conf(sentinels: RedisSentinelSet) -> dict[str, Any]:
    return {
        **FAST, "zset_scheduler_wait_replicas": 1, "zset_scheduler_wait_timeout": 2.0,
        "zset_scheduler_batch_size": BATCH,
        "broker_transport_options": {"master_name": sentinels.master_name, "sentinel_kwargs": {"password": PASSWORD}},
    }


@pytest.fixture
def procs(redis_server: RedisServer, r: object, sentinels: RedisSentinelSet) -> Iterator[Cluster]:
    made = Cluster(redis_server, shards=SHARDS, conf=conf(sentinels), store_url="",
                   broker_url=sentinels.url(BROKER_DB))
    yield made
    made.close()


def run_under_load(apps: AppFactory, procs: Cluster, sentinels: RedisSentinelSet, disrupt: Callable[[], float],
                   worker_conf: dict[str, Any] | None = None) -> tuple[Producer, collections.Counter[str], float]:
    """``disrupt`` returns when the new master was promoted (``time.time()``)."""
    procs.worker(conf=worker_conf)
    procs.dispatcher()
    procs.dispatcher()
    app = apps(shards=SHARDS, broker_url=sentinels.url(BROKER_DB), zset_scheduler_url=None, **conf(sentinels))
    producer = Producer(app, count=1500, pace=0.005)
    producer.start()
    wait_for(lambda: len(producer.acked) >= 400, timeout=60, what="the first 400 schedules")
    wait_for(lambda: len(apps.executions()) >= 100, timeout=60, what="dispatching under way")
    promoted = disrupt()
    producer.join(timeout=180)
    assert not producer.is_alive() and producer.error is None, producer.error
    acked = set(producer.acked)
    runs = lambda: collections.Counter(run["id"] for run in apps.executions())  # noqa: E731
    wait_for(lambda: acked <= set(runs()), timeout=120, interval=0.2,
             what=f"every acknowledged task to run ({len(acked - set(runs()))} missing)")
    time.sleep(2 * FAST["zset_scheduler_inflight_timeout"])  # let a re-published batch show up
    return producer, runs(), promoted


def check(producer: Producer, counts: collections.Counter[str], procs: Cluster) -> list[str]:
    """Lost 0 and nothing invented; returns the ids that ran more than once though sent once."""
    acked = set(producer.acked)
    assert len(acked) == producer.count
    assert acked <= set(counts)  # lost = 0
    assert set(counts) <= acked  # nothing invented
    # A send refused during the failover may have been stored anyway (NotReplicated says so; a
    # lost reply cannot tell): each send of it can run once, as with any retried publish.
    resent = producer.attempts
    assert all(counts[i] <= n for i, n in resent.items()), {i: (counts[i], n) for i, n in resent.items()}
    for proc in procs.procs:
        assert proc.alive, proc.output[-3000:]  # recovered by itself, no restart
    once = {i: n for i, n in counts.items() if i not in resent}
    assert max(once.values()) <= 2  # I2: a batch published twice at most, never more
    return sorted(i for i, n in once.items() if n > 1)


def resumed_after(apps: AppFactory, producer: Producer, promoted: float) -> tuple[float, float]:
    """Seconds from the promotion to the first schedule acknowledged and to the first run after it."""
    scheduled = min(t for t in producer.acked_at if t > promoted) - promoted
    ran = min(run["at"] for run in apps.executions() if run["at"] > promoted) - promoted
    return scheduled, ran


def test_the_master_killed_under_load_loses_nothing(
    apps: AppFactory, procs: Cluster, sentinels: RedisSentinelSet
) -> None:
    def kill() -> float:
        old = sentinels.kill_master()
        sentinels.wait_new_master(old.port)
        promoted = time.time()
        time.sleep(1.0)
        sentinels.restore()  # the old master comes back as the new one's replica
        return promoted

    # Kombu's fetch with ack emulation (BRPOP, then a second write of the unacked record) loses
    # the message a worker is taking when the master dies between the two (1 task in 1 of 5 runs
    # here; Kombu's own, plugin or not): this worker takes messages with BRPOP alone, so that the
    # count is the store's and the hand-off's (docs/sentinel.md).
    worker_conf = {"broker_transport_options": {**conf(sentinels)["broker_transport_options"], "ack_emulation": False}}
    producer, counts, promoted = run_under_load(apps, procs, sentinels, kill, worker_conf)
    duplicated = check(producer, counts, procs)
    assert len(duplicated) <= BATCH * SHARDS  # at most the batches in hand at the kill
    print("resumed after the promotion (schedule, run):", resumed_after(apps, producer, promoted),
          "duplicates:", len(duplicated), "resent:", producer.attempts)


def test_a_graceful_failover_under_load_loses_nothing(
    apps: AppFactory, procs: Cluster, sentinels: RedisSentinelSet
) -> None:
    promoted: list[float] = []

    def failover() -> float:
        sentinels.failover()
        promoted.append(time.time())
        sentinels.wait_healthy()
        return promoted[0]

    producer, counts, when = run_under_load(apps, procs, sentinels, failover)
    duplicated = check(producer, counts, procs)
    tags = collections.defaultdict(set)
    for run in apps.executions():
        tags[run["id"]].add(run["delivery_tag"])
    handed_twice = sorted(i for i in duplicated if len(tags[i]) > 1)
    print("resumed after the promotion (schedule, run):", resumed_after(apps, producer, when),
          "duplicates:", len(duplicated), "handed off twice:", handed_twice[:20], "resent:", producer.attempts)
    # The old master refuses to hand off from the instant its replica leaves it to be promoted
    # (57 tasks ran twice here without that fence). What remains is asynchronous replication: a
    # move made a moment before, still on its way to the replica, is made again by the new master.
    assert len(handed_twice) <= BATCH * SHARDS  # one pass at most


@pytest.fixture(scope="module")
def two_replicas() -> Iterator[RedisSentinelSet]:
    """The recommended setup: two replicas, so that the new master has one at once."""
    with RedisSentinelSet(replicas=2, password=PASSWORD) as made:
        yield made


def test_with_two_replicas_a_killed_master_is_replaced_without_a_long_pause(
    apps: AppFactory, redis_server: RedisServer, r: object, two_replicas: RedisSentinelSet
) -> None:
    """With a second replica the sentinels point it at the promoted one at once: ``WAIT 1`` is
    answered again, and schedules and hand-offs resume, without waiting for the old master."""
    two_replicas.reset()
    procs = Cluster(redis_server, shards=SHARDS, conf=conf(two_replicas), store_url="",
                    broker_url=two_replicas.url(BROKER_DB))
    try:
        def kill() -> float:
            old = two_replicas.kill_master()
            two_replicas.wait_new_master(old.port)
            return time.time()  # the old master stays down until the end

        worker_conf = {"broker_transport_options": {**conf(two_replicas)["broker_transport_options"],
                                                    "ack_emulation": False}}
        producer, counts, promoted = run_under_load(apps, procs, two_replicas, kill, worker_conf)
        duplicated = check(producer, counts, procs)
        assert len(duplicated) <= BATCH * SHARDS
        print("two replicas, resumed after the promotion (schedule, run):",
              resumed_after(apps, producer, promoted), "duplicates:", len(duplicated))
    finally:
        procs.close()
        two_replicas.restore()

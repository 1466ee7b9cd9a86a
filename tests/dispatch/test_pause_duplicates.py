"""A dispatcher paused past its lease in the middle of its hand-off (SIGSTOP at a random moment of
a backlog, over several rounds), then resumed: at most one batch of tasks goes out twice, however
many shards it led, and it publishes nothing once its lease has lapsed beyond the one write it
may have been making. The broker on a Redis server of its own (the built lane) and on RabbitMQ
(publisher confirms); two real dispatcher processes on 8 shards, the store on the suite's Redis."""

from __future__ import annotations

import collections
import json
import random
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest

from celery_zset_scheduler import schedule_many
from celery_zset_scheduler.testing import RedisServer

from ..support.amqp import count, drain_ids, vhost
from ..support.helpers import BROKER_DB, FAST, AppFactory, wait_for
from ..support.procs import Cluster, Proc, owned_shards

__all__ = ["vhost"]

pytestmark = pytest.mark.slow

SHARDS, BATCH, QUEUE = 8, 200, "zt.dup"
CONF = {**FAST, "zset_scheduler_batch_size": BATCH, "task_default_queue": QUEUE}
PAUSE_S = 4.0  # past the lock (1.5 s) and in-flight (2 s) leases of FAST


@pytest.fixture(scope="module")
def broker_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


class Arrivals:
    """Every task id that reached the queue, duplicates kept."""

    def __init__(self, read: Callable[[], list[str]], queued: Callable[[], int]) -> None:
        self._read = read
        self.queued = queued  # messages in the queue now, without taking them

    def take(self) -> collections.Counter[str]:
        return collections.Counter(self._read())


def redis_arrivals(server: RedisServer) -> Arrivals:
    client = server.client(BROKER_DB)

    def read() -> list[str]:
        pipe = client.pipeline(transaction=True)  # what arrives meanwhile stays for the next read
        raw, _ = pipe.lrange(QUEUE, 0, -1).delete(QUEUE).execute()
        return [json.loads(m)["headers"]["id"] for m in raw]

    return Arrivals(read, lambda: int(client.llen(QUEUE)))


def rabbit_arrivals(url: str) -> Arrivals:
    return Arrivals(lambda: drain_ids(url, QUEUE, idle=1.0), lambda: count(url, QUEUE))


def run_rounds(apps: AppFactory, cluster: Cluster, arrivals: Arrivals, rounds: int, tasks: int,
               conf: dict[str, object]) -> list[tuple[int, int, int]]:
    """``rounds`` times: ``tasks`` due at once, the dispatcher leading half the shards paused
    (SIGSTOP) at a random moment of their hand-off, past its leases, then resumed once the other
    one published everything. Returns (shards it led, ran twice, published after SIGCONT) a round."""
    task = apps(shards=SHARDS, **conf).tasks["t.record"]
    paused, other = cluster.dispatcher(), cluster.dispatcher()
    rng = random.Random(20261207)
    found = []
    for n in range(rounds):
        wait_for(lambda: len(owned_shards(paused.output)) == SHARDS // 2 == len(owned_shards(other.output)),
                 timeout=30, what="the shards shared between the two dispatchers")
        led = len(owned_shards(paused.output))
        eta = datetime.now(timezone.utc) + timedelta(seconds=1.0)
        ids = set(schedule_many(task, [((), {"tag": f"{n}-{i}"}, eta) for i in range(tasks)]))
        # In the middle of the backlog: both dispatchers are handing off passes of full batches.
        delay = (eta - datetime.now(timezone.utc)).total_seconds() + rng.uniform(0.02, 0.3)
        twice, after = pause_once(paused, other, arrivals, ids, delay)
        found.append((led, twice, after))
        print(f"round {n + 1}: led {led} shards, {twice} ran twice, {after} published after SIGCONT")
    return found


def pause_once(paused: Proc, other: Proc, arrivals: Arrivals, ids: set[str], delay: float) -> tuple[int, int]:
    """SIGSTOP ``paused`` after ``delay`` seconds, SIGCONT it once ``other`` has published every
    one of ``ids`` and its leases have lapsed: (tasks that arrived twice, arrivals after SIGCONT)."""
    time.sleep(max(0.0, delay))
    paused.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    seen: collections.Counter[str] = collections.Counter()

    def everything_arrived() -> bool:
        seen.update(arrivals.take())
        return ids <= set(seen)

    try:
        wait_for(everything_arrived, timeout=30, interval=0.5, what="the other dispatcher to publish everything")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {len(ids - set(seen))} left; it logged {other.output[-3000:]}") from None
    # Past its leases (shard and in-flight): the other one has taken its shards and batches.
    time.sleep(max(0.0, stopped + PAUSE_S - time.monotonic()))
    seen.update(arrivals.take())
    lost = paused.output.count("leader.lost")
    paused.signal(signal.SIGCONT)
    wait_for(lambda: paused.output.count("leader.lost") > lost, timeout=20,
             what="the resumed dispatcher to find its leases gone")
    time.sleep(1.0)  # what it would publish after its pause has gone out by now
    after = arrivals.take()
    seen.update(after)
    assert set(seen) == ids  # nothing lost, nothing foreign
    return sum(c - 1 for c in seen.values()), sum(after.values())


def assert_within_one_batch(found: list[tuple[int, int, int]]) -> None:
    for led, twice, after in found:
        assert led == SHARDS // 2
        assert twice <= BATCH, found
        assert after <= BATCH, found


def test_a_paused_dispatcher_runs_at_most_one_batch_twice_with_a_redis_broker_elsewhere(
        apps: AppFactory, redis_server: RedisServer, broker_server: RedisServer) -> None:
    broker_server.client(BROKER_DB).delete(QUEUE)
    cluster = Cluster(broker_server, redis_server, shards=SHARDS, conf=CONF)
    try:
        found = run_rounds(apps, cluster, redis_arrivals(broker_server), rounds=4, tasks=16_000, conf=CONF)
    finally:
        cluster.close()
    assert_within_one_batch(found)


def test_a_paused_dispatcher_runs_at_most_one_batch_twice_with_rabbitmq(
        apps: AppFactory, redis_server: RedisServer, vhost: str) -> None:
    cluster = Cluster(redis_server, shards=SHARDS, conf=CONF)
    cluster.env["ZSET_TEST_BROKER"] = vhost
    try:
        found = run_rounds(apps, cluster, rabbit_arrivals(vhost), rounds=3, tasks=8_000, conf=CONF)
    finally:
        cluster.close()
    assert_within_one_batch(found)


def test_the_rounds_pause_a_dispatcher_that_holds_a_backlog(
        apps: AppFactory, redis_server: RedisServer, broker_server: RedisServer) -> None:
    """The harness itself: paused with more than a batch in flight (claimed, not yet acked), so a
    bound of one batch is something the hand-off has to keep, not a property of the load."""
    broker_server.client(BROKER_DB).delete(QUEUE)
    cluster = Cluster(broker_server, redis_server, shards=SHARDS, conf=CONF)
    try:
        paused = cluster.dispatcher()
        wait_for(lambda: len(owned_shards(paused.output)) == SHARDS, timeout=30, what="the shards")
        app = apps(shards=SHARDS, **CONF)
        eta = datetime.now(timezone.utc) + timedelta(seconds=1.0)
        schedule_many(app.tasks["t.record"], [((), {"tag": i}, eta) for i in range(16_000)])
        time.sleep(max(0.0, (eta - datetime.now(timezone.utc)).total_seconds() + 0.15))
        paused.signal(signal.SIGSTOP)
        store = apps.store(app)
        flying = sum(int(store.client.zcard(store.keys.shard(s).inflight)) for s in range(SHARDS))
        assert flying > BATCH
        paused.signal(signal.SIGCONT)
    finally:
        cluster.close()



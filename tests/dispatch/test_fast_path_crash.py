"""Kill -9 of a dispatcher on the same-Redis fast path, at every point: nothing is lost and
nothing runs twice (I1, I2 "on the fast path, never"), with real dispatcher processes and a
real worker."""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Iterator

import pytest

from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import BROKER_DB, FAST, AppFactory, wait_for
from ..support.procs import Cluster

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(redis_server: RedisServer, r: object) -> Iterator[Cluster]:
    # The store is the broker's own database: the fast path's condition.
    made = Cluster(redis_server, shards=2, conf=dict(FAST), store_url=redis_server.url_db(BROKER_DB))
    yield made
    made.close()


def schedule(apps: AppFactory, server: RedisServer, count: int, spread: float, start: float = 0.3) -> list[str]:
    app = apps(shards=2, zset_scheduler_url=server.url_db(BROKER_DB))
    record = app.tasks["t.record"]
    return [record.apply_async(kwargs={"tag": i}, countdown=start + spread * i / count).id for i in range(count)]


def run_once_each(apps: AppFactory, server: RedisServer, cluster: Cluster, ids: list[str]) -> None:
    """A healthy dispatcher and a worker: every task runs, exactly once."""
    apps.worker(apps(shards=2, zset_scheduler_url=server.url_db(BROKER_DB)))
    survivor = cluster.dispatcher()

    def ran() -> collections.Counter[str]:
        return collections.Counter(run["id"] for run in apps.executions())

    wait_for(lambda: set(ids) <= set(ran()), timeout=120, what=f"all {len(ids)} tasks to run")
    time.sleep(1.0)  # let any duplicate show up
    counts = ran()
    assert set(counts) == set(ids)  # nothing lost, nothing invented
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]  # nothing twice
    survivor.terminate()  # its log is complete once it exited
    assert "fast_path.on" in survivor.output


@pytest.mark.parametrize("point", ["before_push", "after_push"])
def test_kill_9_around_the_script_loses_nothing_and_duplicates_nothing(
    point: str, apps: AppFactory, redis_server: RedisServer, cluster: Cluster
) -> None:
    ids = schedule(apps, redis_server, 300, spread=2.0)
    crashing = cluster.hooked_dispatcher(point)
    crashing.wait_for_output(r"PAUSED ", timeout=30)
    crashing.kill9()
    run_once_each(apps, redis_server, cluster, ids)


def test_kill_9_at_random_moments_loses_nothing_and_duplicates_nothing(
    apps: AppFactory, redis_server: RedisServer, cluster: Cluster
) -> None:
    ids = schedule(apps, redis_server, 3000, spread=8.0)
    rng = random.Random(7)
    for _ in range(4):  # each one killed while it leads and pushes, at a moment of its pass
        victim = cluster.dispatcher()
        victim.wait_for_output(r"leader\.acquired", timeout=30)
        time.sleep(rng.uniform(0.0, 0.4))
        victim.kill9()
    run_once_each(apps, redis_server, cluster, ids)

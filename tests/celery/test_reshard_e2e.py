"""Resharding a live store with real processes: two dispatchers, a worker, a producer scheduling
all along and a periodic entry firing every second; 8 -> 16 -> 4 shards, the second reshard
killed with kill -9 mid-way and run again. Nothing is lost, nothing runs twice or early."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Iterator

import pytest

from celery_zset_scheduler.errors import ShardCountMismatch
from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store import meta
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import FAST, STORE_DB, AppFactory, wait_for
from ..support.procs import CELERY, Cluster, Proc, owned_shards

pytestmark = pytest.mark.slow

PREFIX = "zrs"
BEAT = {"tick": {"task": "t.record", "schedule": 1.0, "kwargs": {"tag": "tick"}}}


@pytest.fixture(params=["standalone", "cluster"])
def store_url(request: pytest.FixtureRequest, redis_server: RedisServer, r: object) -> str:
    """Where the store lives: the suite's redis-server, or the session's Redis Cluster."""
    if request.param == "standalone":
        return redis_server.url_db(STORE_DB)
    return str(request.getfixturevalue("cluster").url)


@pytest.fixture
def procs(redis_server: RedisServer, store_url: str) -> Iterator[Cluster]:
    made = Cluster(redis_server, shards=8, conf=FAST, prefix=PREFIX, store_url=store_url)
    made.env["ZSET_TEST_BEAT"] = json.dumps(BEAT)
    yield made
    made.close()


class Producer(threading.Thread):
    """Schedules a task every few milliseconds (countdowns of 0.3 to 3 s) until stopped; keeps
    each id with the earliest instant it may run."""

    def __init__(self, apps: AppFactory, store_url: str) -> None:
        super().__init__(daemon=True)
        self.app = apps(shards=8, prefix=PREFIX, zset_scheduler_url=store_url)
        self.due: dict[str, float] = {}
        self.errors: list[BaseException] = []
        self._halt = threading.Event()

    def run(self) -> None:
        record = self.app.tasks["t.record"]
        i = 0
        while not self._halt.is_set():
            countdown = 0.3 + (i % 10) * 0.3
            due = time.time() + countdown
            try:
                self.due[record.apply_async(kwargs={"tag": f"p{i}", "due": due}, countdown=countdown).id] = due
            except BaseException as exc:  # the test fails on any
                self.errors.append(exc)
                return
            i += 1
            time.sleep(0.005)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


def reshard(cluster: Cluster, to: int, *extra: str, shards: int = 8) -> Proc:
    """The command in a process of its own, configured with ``shards`` (the count the store has)."""
    return cluster.spawn([CELERY, "-A", "tests.support.proc_app", "zset", "reshard", "--to", str(to), "--yes",
                          *extra], env={"ZSET_TEST_SHARDS": str(shards)})


def wait_exit(proc: Proc, timeout: float = 120) -> str:
    wait_for(lambda: not proc.alive, timeout=timeout, what="the reshard to end")
    assert proc.popen.returncode == 0, proc.output[-3000:]
    return proc.output


def test_reshard_8_16_4_under_load_with_a_crash_loses_nothing_and_runs_nothing_twice_or_early(
        apps: AppFactory, procs: Cluster, store_url: str) -> None:
    cluster = procs
    store = make_client(store_url, cluster="auto")
    preload = apps(shards=8, prefix=PREFIX, zset_scheduler_url=store_url)
    record = preload.tasks["t.record"]
    due: dict[str, float] = {}
    for i in range(1500):  # enough entries for a reshard to be caught half-way
        countdown = 6.0 + (i % 100) * 0.06
        at = time.time() + countdown
        due[record.apply_async(kwargs={"tag": f"pre{i}", "due": at}, countdown=countdown).id] = at

    dispatchers = [cluster.dispatcher(), cluster.dispatcher()]
    cluster.worker()
    for d in dispatchers:
        d.wait_for_output(r"leader\.acquired")
    producer = Producer(apps, store_url)
    producer.start()
    time.sleep(1.0)

    out = wait_exit(reshard(cluster, 16, "--batch", "50"))
    assert "reshard finished" in out
    assert meta.read(store, KeySpace(PREFIX, 16)).shards == 16
    # The running dispatchers (configured with 8) lead all 16 shards between them.
    wait_for(lambda: set().union(*(owned_shards(d.output) for d in dispatchers)) == set(range(16)),
             timeout=20, what="16 shards led")

    # 16 -> 4, killed after its first batches, then run again: it resumes and ends.
    crashing = reshard(cluster, 4, "--batch", "10", shards=16)
    crashing.wait_for_output(r"reshard moved shard=\d+ entries=\d+")
    crashing.kill9()
    assert meta.read(store, KeySpace(PREFIX, 4)).moving_to == 4  # killed mid-way
    out = wait_exit(reshard(cluster, 4, "--batch", "200", shards=4))  # either end of the move may resume it
    assert "resumed=True" in out and "reshard finished" in out
    assert meta.read(store, KeySpace(PREFIX, 4)).shards == 4
    try:
        wait_for(lambda: set().union(*(owned_shards(d.output) for d in dispatchers)) == set(range(4)),
                 timeout=20, what="the shards beyond 4 released")
    except AssertionError:
        print([owned_shards(d.output) for d in dispatchers], dispatchers[0].output[-5000:])
        raise

    time.sleep(1.5)
    producer.stop()
    assert producer.errors == []
    due.update(producer.due)
    wait_for(lambda: set(due) <= {run["id"] for run in apps.executions()}, timeout=90,
             what=f"all {len(due)} tasks to run")
    time.sleep(1.5)  # let any duplicate show up
    runs = apps.executions()
    counts = collections.Counter(run["id"] for run in runs)
    assert {i for i, n in counts.items() if n > 1} == set()  # no task twice, periodic occurrences included
    assert set(due) <= set(counts)  # nothing lost
    early = [(run["id"], due[run["id"]] - run["at"]) for run in runs if run["id"] in due and run["at"] < due[run["id"]]]
    assert early == []
    ticks = sorted(run["at"] for run in runs if run["tag"] == "tick")
    assert ticks and ticks[-1] > time.time() - 5  # the periodic entry moved and still fires
    for s in range(16):
        assert not store.exists(f"{{{PREFIX}:{s}}}:mv", f"{{{PREFIX}:{s}}}:mv:msg", f"{{{PREFIX}:{s}}}:mv:in")
    for s in range(4, 16):
        assert store.zcard(f"{{{PREFIX}:{s}}}:due") == 0 and store.zcard(f"{{{PREFIX}:{s}}}:p:names") == 0

    # Processes started now with the old count refuse, naming the setting to change.
    with pytest.raises(ShardCountMismatch, match="set zset_scheduler_shards=4 and restart"):
        apps(shards=8, prefix=PREFIX, zset_scheduler_url=store_url).tasks["t.record"].apply_async(countdown=5)
    stale = cluster.spawn([CELERY, "-A", "tests.support.proc_app", "zset", "run"], env={"ZSET_TEST_SHARDS": "16"})
    wait_for(lambda: not stale.alive, timeout=30, what="the dispatcher with the old count to refuse")
    assert stale.popen.returncode != 0
    assert "set zset_scheduler_shards=4 and restart" in stale.output

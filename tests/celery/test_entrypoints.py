"""The ways to run a dispatcher: `beat -S zset`, the full class path, `zset run`; clean SIGTERM."""

from __future__ import annotations

import collections
import itertools
import signal
import time
from collections.abc import Iterator

import pytest
import redis

from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import FAST, STORE_DB, AppFactory, wait_for
from ..support.procs import CELERY, Cluster, owned_shards

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(redis_server: RedisServer, r: redis.Redis) -> Iterator[Cluster]:
    made = Cluster(redis_server, shards=2, conf=FAST)
    yield made
    made.close()


@pytest.mark.parametrize("scheduler", ["zset", "celery_zset_scheduler.ZSetScheduler"])
def test_beat_runs_a_dispatcher(scheduler: str, apps: AppFactory, cluster: Cluster, r: redis.Redis) -> None:
    app = apps(shards=2)
    results = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=0.5) for i in range(20)]
    beat = cluster.spawn([CELERY, "-A", "tests.support.proc_app", "beat", "-S", scheduler, "--loglevel", "INFO",
                          "--schedule", "/tmp/zset-test-beat-schedule"])
    apps.worker(apps(shards=2))
    assert [res.get(timeout=20) for res in results] == list(range(20))
    beat.wait_for_output(r"zset leader\.acquired shard=1")
    # SIGTERM: beat closes the scheduler, which stops the dispatcher and releases its leases.
    assert beat.terminate() == 0, beat.output[-3000:]
    store = redis.Redis(port=r.connection_pool.connection_kwargs["port"], db=STORE_DB)
    assert store.exists("{zt:0}:lock", "{zt:1}:lock") == 0
    assert store.zcard("{zt:members}:dispatchers") == 0
    assert "zset leader.released shard=0" in beat.output and "zset dispatcher.stopped" in beat.output


def test_zset_run_stops_cleanly_on_sigterm_after_its_batch(apps: AppFactory, cluster: Cluster, r: redis.Redis) -> None:
    app = apps(shards=2)
    ids = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=0.2).id for i in range(2000)]
    dispatcher = cluster.dispatcher()
    dispatcher.wait_for_output(r"zset leader\.acquired")
    time.sleep(0.3)
    dispatcher.signal(signal.SIGTERM)  # most likely in the middle of handing 2000 entries over
    assert dispatcher.popen.wait(timeout=30) == 0
    store = redis.Redis(port=r.connection_pool.connection_kwargs["port"], db=STORE_DB)
    assert store.zcard("{zt:0}:inflight") + store.zcard("{zt:1}:inflight") == 0  # nothing left half done
    assert store.exists("{zt:0}:lock", "{zt:1}:lock") == 0
    apps.worker(apps(shards=2))
    cluster.dispatcher()
    wait_for(lambda: len(apps.executions()) >= 2000, timeout=60, what="every task to run")
    time.sleep(0.5)
    counts = collections.Counter(run["id"] for run in apps.executions())
    assert set(counts) == set(ids) and max(counts.values()) == 1


def test_periodic_entries_run_once_with_two_beats(redis_server: RedisServer, r: redis.Redis,
                                                   apps: AppFactory) -> None:
    conf = {**FAST, "beat_schedule": {"tick": {"task": "t.record", "schedule": 1.0, "kwargs": {"tag": "tick"}}}}
    cluster = Cluster(redis_server, shards=2, conf=conf)
    try:
        beats = [cluster.spawn([CELERY, "-A", "tests.support.proc_app", "beat", "-S", "zset", "--loglevel", "INFO",
                                "--schedule", f"/tmp/zset-test-beat-{i}"]) for i in range(2)]
        apps.worker(apps(shards=2))
        wait_for(lambda: any(0 in owned_shards(b.output) for b in beats), what="a leader of shard 0")
        time.sleep(6.0)
        ticks = [run for run in apps.executions() if run["tag"] == "tick"]
        # One process (the leader of shard 0) sends the entry: about 6, not about 12.
        assert 4 <= len(ticks) <= 8, len(ticks)
        gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(ticks)]
        assert min(gaps) > 0.5, gaps
    finally:
        cluster.close()


def test_a_dispatcher_with_another_shard_count_refuses_to_start(
    apps: AppFactory, redis_server: RedisServer, r: redis.Redis,
) -> None:
    apps(shards=2).tasks["t.record"].apply_async(countdown=60)  # the store now has 2 shards
    cluster = Cluster(redis_server, shards=3, conf=FAST)
    try:
        dispatcher = cluster.dispatcher()
        assert dispatcher.popen.wait(timeout=30) != 0
        assert "has 2 shards but this client is configured with zset_scheduler_shards=3" in dispatcher.output
        assert "Traceback" not in dispatcher.output  # one clear line, not a stack dump
    finally:
        cluster.close()


@pytest.mark.parametrize(("conf", "message"), [
    ({"zset_scheduler_lok_timeout": 3}, "unknown setting 'zset_scheduler_lok_timeout'; did you mean "
                                        "zset_scheduler_lock_timeout?"),
    ({"beat_schedule": {"bad": {"task": "t.record", "schedule": 60, "overlap": "never"}}}, "periodic entry 'bad'"),
])
def test_beat_with_a_configuration_error_prints_one_line(redis_server: RedisServer, r: redis.Redis,
                                                         conf: dict[str, object], message: str) -> None:
    cluster = Cluster(redis_server, shards=2, conf=conf)
    try:
        for quiet in ([], ["--quiet"]):
            proc = cluster.spawn([CELERY, "-A", "tests.support.proc_app", *quiet, "beat", "-S", "zset",
                                  "--schedule", "/tmp/zset-test-beat-typo"])
            assert proc.popen.wait(timeout=60) == 1
            lines = proc.output.strip().splitlines()
            assert len(lines) <= 2, proc.output  # beat's "is starting" line, then ours
            assert lines[-1].startswith("Error: ") and message in lines[-1]
    finally:
        cluster.close()


def test_beat_with_another_shard_count_exits_with_one_line(apps: AppFactory, redis_server: RedisServer,
                                                           r: redis.Redis) -> None:
    apps(shards=2).tasks["t.record"].apply_async(countdown=60)
    cluster = Cluster(redis_server, shards=3, conf=FAST)
    try:
        proc = cluster.spawn([CELERY, "-A", "tests.support.proc_app", "beat", "-S", "zset",
                              "--schedule", "/tmp/zset-test-beat-shards"])
        assert proc.popen.wait(timeout=60) == 1
        assert "Error: zset dispatcher stopped: the store" in proc.output
        assert "Traceback" not in proc.output
    finally:
        cluster.close()


def test_beat_banner_shows_the_dispatcher_its_periodic_entries_and_their_leaders(
    redis_server: RedisServer, r: redis.Redis,
) -> None:
    conf = {**FAST, "beat_schedule": {"tick": {"task": "t.record", "schedule": 30.0}}}
    cluster = Cluster(redis_server, shards=2, conf=conf)
    try:
        first = cluster.spawn([CELERY, "-A", "tests.support.proc_app", "beat", "-S", "zset", "--loglevel", "INFO",
                               "--schedule", "/tmp/zset-test-beat-banner-1"])
        first.wait_for_output(r"zset periodic\.synced added=1")
        member = first.wait_for_output(r"zset dispatcher\.started dispatcher=(\S+)").group(1)
        assert f". zset dispatcher -> {member}" in first.output  # the same id the dispatcher runs with
        assert ". periodic entries -> 1 in beat_schedule, 0 in the store" in first.output
        first.wait_for_output(r"zset leader\.acquired shard=1")
        second = cluster.spawn([CELERY, "-A", "tests.support.proc_app", "beat", "-S", "zset", "--loglevel", "INFO",
                                "--schedule", "/tmp/zset-test-beat-banner-2"])
        second.wait_for_output(r"zset dispatcher\.started")
        assert ". periodic entries -> 1 in beat_schedule, 1 in the store (1 scheduled), on 2 shards" in second.output
        assert f": {member}" in second.output.split(". periodic leader -> ", 1)[1].splitlines()[0]
        assert "zset dispatcher -> -" not in first.output + second.output
    finally:
        cluster.close()

"""I11 with real processes: two ``beat -S zset``, the one leading the periodic entries killed -9
just before a minute boundary. No occurrence runs twice, none is skipped, the crontab occurrence
due during the takeover runs once (late by at most the lock timeout), history survives."""

from __future__ import annotations

import collections
import json
import time
import zlib
from collections.abc import Iterator

import pytest
import redis

from celery_zset_scheduler import periodic
from celery_zset_scheduler.model.periodic import occurrence_id
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import FAST, AppFactory, wait_for
from ..support.procs import CELERY, Cluster, Proc, owned_shards

pytestmark = pytest.mark.slow

SHARDS = 2
LOCK_TIMEOUT = FAST["zset_scheduler_lock_timeout"]


def on_shard(prefix: str, shard: int) -> str:
    return next(f"{prefix}-{i}" for i in range(100) if zlib.crc32(f"{prefix}-{i}".encode()) % SHARDS == shard)


@pytest.fixture
def cluster(redis_server: RedisServer, r: redis.Redis) -> Iterator[Cluster]:
    made = Cluster(redis_server, shards=SHARDS, conf=FAST)
    yield made
    made.close()


def beat(cluster: Cluster, n: int, schedule: dict[str, object]) -> Proc:
    return cluster.spawn([CELERY, "-A", "tests.support.proc_app", "beat", "-S", "zset", "--loglevel", "INFO",
                          "--schedule", f"/tmp/zset-test-periodic-beat-{n}"],
                         env={"ZSET_TEST_BEAT": json.dumps(schedule)})


def test_kill_9_of_the_periodic_leader_before_a_minute_boundary(apps: AppFactory, cluster: Cluster) -> None:
    second, minute = on_shard("every-second", 0), on_shard("every-minute", 0)
    schedule = {second: {"task": "t.record", "schedule": 1.0, "kwargs": {"tag": "s"}},
                minute: {"task": "t.record", "schedule": {"crontab": {"minute": "*"}}, "kwargs": {"tag": "m"}}}
    app = apps(shards=SHARDS)
    apps.worker(apps(shards=SHARDS))
    beats = [beat(cluster, n, schedule) for n in range(2)]
    wait_for(lambda: any(0 in owned_shards(b.output) for b in beats), timeout=30, what="a leader of shard 0")
    wait_for(lambda: periodic.get(app, minute) is not None, what="the sync")
    # Kill the leader one second before the next minute boundary that is at least 8 s away.
    boundary = (int(time.time()) // 60 + 1) * 60
    if boundary - time.time() < 8:
        boundary += 60
    time.sleep(max(0.0, boundary - 1.0 - time.time()))
    leader = next(b for b in beats if 0 in owned_shards(b.output))
    survivor = next(b for b in beats if b is not leader)
    before = periodic.get(app, second)
    assert before is not None and before.state.total_run_count >= 3
    leader.kill9()
    survivor.wait_for_output(r"zset leader\.acquired shard=0 epoch=\d+", timeout=10)
    time.sleep(4.0)
    survivor.terminate()  # stop firing; let the worker drain what was handed over
    time.sleep(2.0)

    runs = apps.executions()
    counts = collections.Counter(e["id"] for e in runs)
    assert max(counts.values()) == 1  # no occurrence ran twice
    sec = periodic.get(app, second)
    assert sec is not None and sec.state.last_run_ms is not None
    # History survived the kill, and the chain has no hole: the last `count` fire times, each run once.
    assert sec.state.total_run_count >= before.state.total_run_count + 4
    expected = {occurrence_id(second, sec.state.last_run_ms - k * 1000) for k in range(sec.state.total_run_count)}
    assert {e["id"] for e in runs if e["tag"] == "s"} == expected
    # The crontab occurrence due during the takeover ran once, late by at most the lock timeout.
    boundary_ms = boundary * 1000
    ran = [e for e in runs if e["tag"] == "m" and e["id"] == occurrence_id(minute, boundary_ms)]
    assert len(ran) == 1, [e for e in runs if e["tag"] == "m"]
    assert 0 <= ran[0]["at"] - boundary < LOCK_TIMEOUT + 0.5  # dispatch + the worker's pickup
    mins = periodic.get(app, minute)
    assert mins is not None and mins.state.last_run_ms == boundary_ms
    assert mins.state.total_run_count == len([e for e in runs if e["tag"] == "m"])

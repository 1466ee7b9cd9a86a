"""End to end with the store on Redis Cluster (the session's cluster) and the broker on the
standalone test server: countdowns, a revoke, a retry and a periodic entry, with a real worker
and two dispatchers sharing the shards."""

from __future__ import annotations

import collections
import time

import pytest

import celery_zset_scheduler
from celery_zset_scheduler import periodic
from celery_zset_scheduler.testing.cluster import RedisClusterServer

from ..support.helpers import AppFactory, wait_for
from ..support.tools import pending

pytestmark = pytest.mark.slow

SHARDS = 12


def test_tasks_revokes_retries_and_periodic_entries_on_a_cluster(apps: AppFactory, cluster: RedisClusterServer) -> None:
    app = apps(shards=SHARDS, zset_scheduler_url=cluster.url)
    record = app.tasks["t.record"]
    ids = [record.apply_async(kwargs={"tag": i}, countdown=0.5 + (i % 30) * 0.05).id for i in range(300)]
    doomed = record.apply_async(kwargs={"tag": "doomed"}, countdown=1.5)
    doomed.revoke()
    retried = app.tasks["t.retry_once"].apply_async(kwargs={"countdown": 0.5}, countdown=0.5)
    store = apps.store(app)
    assert pending(store) == 301  # everything waits in the cluster (the revoked one cancelled)
    first, second = apps.dispatcher(app), apps.dispatcher(app)
    apps.worker(app)
    periodic.add(app, "tick", "t.record", 0.5, kwargs={"tag": "tick"})
    wait_for(lambda: set(ids) <= {e["id"] for e in apps.executions()}, timeout=60, what="300 tasks")
    wait_for(lambda: sum(1 for e in apps.executions() if e["tag"] == "attempt") >= 2, timeout=30, what="the retry")
    wait_for(lambda: sum(1 for e in apps.executions() if e["tag"] == "tick") >= 3, timeout=30, what="periodic runs")
    time.sleep(1.0)
    runs = apps.executions()
    counts = collections.Counter(e["id"] for e in runs if e["id"] in ids)
    assert set(counts) == set(ids) and set(counts.values()) == {1}  # each exactly once
    assert not any(e["id"] == doomed.id for e in runs)
    assert [e["retries"] for e in runs if e["id"] == retried.id] == [0, 1]
    ticks = [e["id"] for e in runs if e["tag"] == "tick"]
    assert len(ticks) == len(set(ticks))  # one run per occurrence
    # Both dispatchers lead a fair share of the shards.
    owned = [len(first.leadership.owned), len(second.leadership.owned)]
    assert sorted(owned) == [SHARDS // 2, SHARDS // 2], owned
    # The claim on each shard's own node built the envelopes (dispatch/built.py), periodic ones aside.
    assert sum(getattr(d.handoff, "prebuilt", 0) for d in (first, second)) >= len(ids)
    assert celery_zset_scheduler.lookup(app, doomed.id) is None

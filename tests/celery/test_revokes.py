"""Revokes hold (I10), with real dispatcher, worker and ``celery`` CLI processes: a revoke cancels a
pending task, stops an in-flight one from being published, and a worker that was down or busy
when a dispatched task was revoked drops it when it arrives."""

from __future__ import annotations

import collections
import json
import re
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
import redis

import celery_zset_scheduler
from celery_zset_scheduler.model.reshard import shard_for
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import BROKER_DB, FAST, AppFactory, wait_for
from ..support.procs import CELERY, Cluster, Proc

pytestmark = pytest.mark.slow

# Leases long enough that a dispatcher paused on purpose keeps its shard while the test revokes.
PATIENT = {"zset_scheduler_lock_timeout": 20.0, "zset_scheduler_inflight_timeout": 60.0}


@pytest.fixture
def clusters(redis_server: RedisServer, r: object) -> Iterator[list[Cluster]]:
    made: list[Cluster] = []
    yield made
    for cluster in made:
        cluster.close()


def make_cluster(made: list[Cluster], server: RedisServer, shards: int = 2, store_url: str | None = None,
                 **conf: object) -> Cluster:
    cluster = Cluster(server, shards=shards, conf={**FAST, **conf}, store_url=store_url)
    made.append(cluster)
    return cluster


def worker(cluster: Cluster, pool: str = "solo") -> Proc:
    concurrency = ["--concurrency", "2"] if pool == "prefork" else []
    return cluster.spawn([CELERY, "-A", "tests.support.proc_app", "worker", "--pool", pool, *concurrency,
                          "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"])


def tags_run(apps: AppFactory) -> list[Any]:
    return [run["tag"] for run in apps.executions() if run["tag"] != "sleep"]


def queued_ids(server: RedisServer, queue: str = "celery") -> list[str]:
    """The ids of the task messages waiting in a Redis broker queue."""
    client = redis.Redis.from_url(server.url_db(BROKER_DB))
    return [json.loads(m)["headers"]["id"] for m in client.lrange(queue, 0, -1)]


def paused_batch(output: str) -> list[str]:
    match = re.search(r"PAUSED \w+ (\[.*\])", output)
    assert match, output[-2000:]
    return list(json.loads(match.group(1)))


@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_a_worker_down_at_revoke_time_drops_the_task_when_it_starts(
    pool: str, apps: AppFactory, redis_server: RedisServer, clusters: list[Cluster]
) -> None:
    cluster = make_cluster(clusters, redis_server)
    app = apps(shards=2)
    record = app.tasks["t.record"]
    doomed = [record.apply_async(kwargs={"tag": f"doomed-{i}"}, countdown=0.2) for i in range(6)]
    kept = record.apply_async(kwargs={"tag": "kept"}, countdown=0.2)
    cluster.dispatcher()
    wait_for(lambda: len(queued_ids(redis_server)) == 7, what="every task handed to the broker")
    doomed[0].revoke()  # each of Celery's ways: AsyncResult.revoke, control.revoke, a list of ids
    app.control.revoke(doomed[1].id)
    app.control.revoke([d.id for d in doomed[2:4]], terminate=True)
    app.GroupResult("group", results=doomed[4:]).revoke()
    running = worker(cluster, pool)  # started after every revoke: it heard no broadcast
    assert kept.get(timeout=30) == "kept"
    wait_for(lambda: all(d.state == "REVOKED" for d in doomed), what="every doomed task REVOKED")
    assert tags_run(apps) == ["kept"]
    assert "Discarding revoked task" in running.output


@pytest.mark.parametrize("worker_state", ["down", "busy"])
def test_a_revoke_at_due_time_never_lets_the_task_run(
    worker_state: str, apps: AppFactory, redis_server: RedisServer, clusters: list[Cluster]
) -> None:
    # Each task is revoked at its due time plus an offset from -50 to +50 ms: before its claim
    # (pending), while it is being handed over (in flight) or once it waits in the queue. The
    # worker is down, or busy with a long task, so every revoke comes before the task could start.
    count, spacing = 40, 0.15
    cluster = make_cluster(clusters, redis_server)
    app = apps(shards=2)
    window = 1.5 + count * spacing
    cluster.dispatcher().wait_for_output(r"zset leader\.acquired shard=1")
    if worker_state == "busy":
        # Busy from before the first due time to after the last revoke, however long the processes
        # took to start on a loaded machine: a free worker could run a task before its revoke.
        busy = worker(cluster)
        sleeper = app.tasks["t.sleep"].delay(window + 10.0)
        wait_for(lambda: "sleep" in [run["tag"] for run in apps.executions()], timeout=30, what="the worker busy")
    start = time.time() + 1.0
    planned = []
    for i in range(count):
        due = start + spacing * i
        offset = -0.05 + 0.1 * i / (count - 1)
        result = app.tasks["t.record"].apply_async(kwargs={"tag": i}, eta=datetime.fromtimestamp(due, timezone.utc))
        planned.append((due + offset, result))
    for at, result in planned:
        time.sleep(max(0.0, at - time.time()))
        result.revoke()
    if worker_state == "down":
        worker(cluster)
    else:
        assert time.time() < start + window + 5.0  # the revokes all came while it slept
        assert sleeper.get(timeout=60) == window + 10.0
        assert busy.alive
    wait_for(lambda: all(result.state == "REVOKED" for _, result in planned), timeout=60,
             what="every task REVOKED")
    time.sleep(0.5)
    assert tags_run(apps) == []


def test_celery_control_revoke_cli_cancels_a_stored_task(
    apps: AppFactory, redis_server: RedisServer, clusters: list[Cluster]
) -> None:
    cluster = make_cluster(clusters, redis_server)
    app = apps(shards=2)
    record = app.tasks["t.record"]
    doomed = record.apply_async(kwargs={"tag": "doomed"}, countdown=1.5)
    terminated = record.apply_async(kwargs={"tag": "terminated"}, countdown=1.5)
    kept = record.apply_async(kwargs={"tag": "kept"}, countdown=1.5)
    cli = cluster.spawn([CELERY, "-A", "tests.support.proc_app", "control", "revoke", doomed.id])
    cli.popen.wait(timeout=60)
    cli2 = cluster.spawn([CELERY, "-A", "tests.support.proc_app", "control", "terminate", "KILL", terminated.id])
    cli2.popen.wait(timeout=60)
    assert celery_zset_scheduler.lookup(app, doomed.id) is None, cli.output
    assert celery_zset_scheduler.lookup(app, terminated.id) is None, cli2.output
    assert doomed.state == "REVOKED" and terminated.state == "REVOKED"
    cluster.dispatcher()
    worker(cluster)
    assert kept.get(timeout=30) == "kept"
    time.sleep(1.0)
    assert tags_run(apps) == ["kept"]


@pytest.mark.parametrize(("point", "store"), [("claimed", "own_db"), ("handing", "own_db"), ("handing", "broker_db")])
def test_a_revoked_in_flight_entry_is_not_published(
    point: str, store: str, apps: AppFactory, redis_server: RedisServer, clusters: list[Cluster]
) -> None:
    # "handing": paused at the publish call itself, past every check but the publisher's own;
    # "broker_db": the store is the broker's database, where the check runs inside its transaction.
    # The generic path there: the fast path (the default on the broker's database) filters revokes
    # in its one script (tests/celery/test_fast_path.py).
    url = redis_server.url_db(BROKER_DB) if store == "broker_db" else None
    same = {"zset_scheduler_url": url, "zset_scheduler_fast_path": False}
    conf: dict[str, Any] = {**PATIENT, **({} if url is None else same)}
    cluster = make_cluster(clusters, redis_server, shards=1, store_url=url, **conf)
    app = apps(shards=1, **conf)
    # One due instant for all ten: on a loaded machine the calls can take longer than a countdown,
    # and the dispatcher's first claim would then hold only the ones due by then.
    due = datetime.fromtimestamp(time.time() + 0.3, timezone.utc)
    ids = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, eta=due).id for i in range(10)]
    stale = cluster.hooked_dispatcher(point)
    stale.wait_for_output(r"PAUSED ")
    batch = paused_batch(stale.output)
    assert sorted(batch) == sorted(ids)
    if point == "handing" and url is None:  # a Redis broker elsewhere: the claim script built them
        assert re.search(r"BUILT 10\b", stale.output), stale.output[-2000:]
    doomed, kept = batch[::2], batch[1::2]
    assert celery_zset_scheduler.cancel(app, doomed[0]) == {doomed[0]: "inflight"}  # too late to cancel
    app.control.revoke(doomed)
    stale.signal(signal.SIGCONT)
    wait_for(lambda: len(queued_ids(redis_server)) == len(kept), what="the rest published")
    stale.wait_for_output(r"zset revoked\.dropped shard=0 count=5 .*at=handoff")
    time.sleep(0.5)
    assert sorted(queued_ids(redis_server)) == sorted(kept)  # none of the revoked ones
    assert all(app.AsyncResult(i).state == "REVOKED" for i in doomed)
    assert all(celery_zset_scheduler.lookup(app, i) is None for i in batch)  # nothing left behind


def test_a_revoke_on_one_shard_holds_back_only_its_entries_at_handoff(
    apps: AppFactory, redis_server: RedisServer, clusters: list[Cluster]
) -> None:
    # The built lane reads the revoke records only of shards whose revoke count moved since the
    # claim: the entries of the others go without a look-up, the revoked shard's are still held.
    shards = 4
    cluster = make_cluster(clusters, redis_server, shards=shards, **PATIENT)
    app = apps(shards=shards, **PATIENT)
    due = datetime.fromtimestamp(time.time() + 0.3, timezone.utc)
    ids = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, eta=due).id for i in range(24)]
    stale = cluster.hooked_dispatcher("handing")
    stale.wait_for_output(r"PAUSED ")
    batch = paused_batch(stale.output)
    assert sorted(batch) == sorted(ids)
    assert re.search(r"BUILT 24\b", stale.output), stale.output[-2000:]
    by_shard = collections.defaultdict(list)
    for task_id in batch:
        by_shard[shard_for(task_id, shards)].append(task_id)
    assert len(by_shard) > 1, by_shard  # 24 random ids on one shard of 4: practically never
    shard, on_it = max(by_shard.items(), key=lambda item: len(item[1]))
    doomed = on_it[::2]
    app.control.revoke(doomed)
    stale.signal(signal.SIGCONT)
    kept = [i for i in batch if i not in doomed]
    wait_for(lambda: len(queued_ids(redis_server)) == len(kept), what="the rest published")
    stale.wait_for_output(rf"zset revoked\.dropped shard={shard} count={len(doomed)} .*at=handoff")
    time.sleep(0.5)
    assert queued_ids(redis_server)[::-1] == kept  # in hand-off order (LPUSH: the newest first)
    dropped = re.findall(r"revoked\.dropped shard=(\d+) count=(\d+) .*at=handoff", stale.output)
    assert dropped == [(str(shard), str(len(doomed)))]  # no other shard's entry held back
    assert all(app.AsyncResult(i).state == "REVOKED" for i in doomed)
    assert all(celery_zset_scheduler.lookup(app, i) is None for i in batch)


def test_a_task_revoked_in_flight_while_the_next_claim_runs_ahead_never_runs(
    apps: AppFactory, redis_server: RedisServer, clusters: list[Cluster]
) -> None:
    # In a backlog the built lane reads the revoke counts before it sends the next claim ahead
    # (Redis would answer the hand-off's read only once that claim has run): a revoke landing
    # after that read, as here while the dispatcher is paused, is held by the revoke record,
    # which the worker reads. Either way the task never runs; the others run once.
    conf = {**PATIENT, "zset_scheduler_batch_size": 10}
    cluster = make_cluster(clusters, redis_server, shards=1, **conf)
    app = apps(shards=1, **conf)
    due = datetime.fromtimestamp(time.time() + 0.3, timezone.utc)
    ids = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, eta=due).id for i in range(200)]
    stale = cluster.hooked_dispatcher("claimed_ahead")
    stale.wait_for_output(r"PAUSED ")
    assert "AHEAD True" in stale.output, stale.output[-2000:]
    batch = paused_batch(stale.output)
    doomed = batch[::2]
    app.control.revoke(doomed)
    stale.signal(signal.SIGCONT)
    worker(cluster)
    wait_for(lambda: len(tags_run(apps)) >= len(ids) - len(doomed), timeout=60, what="the rest to run")
    wait_for(lambda: all(app.AsyncResult(i).state == "REVOKED" for i in doomed), what="the revoked ones REVOKED")
    time.sleep(1.0)
    ran = collections.Counter(run["id"] for run in apps.executions())
    assert set(ran) == set(ids) - set(doomed) and max(ran.values()) == 1
    assert all(celery_zset_scheduler.lookup(app, i) is None for i in ids)


def test_an_entry_revoked_in_flight_does_not_come_back_after_its_dispatcher_dies(
    apps: AppFactory, redis_server: RedisServer, clusters: list[Cluster]
) -> None:
    cluster = make_cluster(clusters, redis_server, shards=1)
    app = apps(shards=1)
    ids = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=0.3).id for i in range(6)]
    crashing = cluster.hooked_dispatcher("claimed")
    crashing.wait_for_output(r"PAUSED ")
    batch = paused_batch(crashing.output)
    doomed = batch[:3]
    app.control.revoke(doomed)
    crashing.kill9()  # its in-flight lease expires: the reap would put the batch back in due
    cluster.dispatcher()
    worker(cluster)
    wait_for(lambda: len(tags_run(apps)) == len(ids) - len(doomed), timeout=30, what="the rest to run")
    time.sleep(1.0)
    ran = collections.Counter(run["id"] for run in apps.executions())
    assert set(ran) == set(ids) - set(doomed) and max(ran.values()) == 1


def test_a_running_worker_follows_records_it_heard_no_broadcast_of(
    apps: AppFactory, redis_server: RedisServer, clusters: list[Cluster]
) -> None:
    # A record written without a broadcast (as one made while this worker was disconnected from the
    # broker would be): the worker reads it from the store's revoke channel.
    cluster = make_cluster(clusters, redis_server)
    app = apps(shards=2)
    running = worker(cluster)
    running.wait_for_output(r"zset revokes\.loaded")
    from celery_zset_scheduler.celery.producer.revokes import revokes_of

    revokes = revokes_of(app)
    assert revokes is not None
    assert revokes.revoke(["silent"]).status == {"silent": "recorded"}
    time.sleep(0.3)
    dropped = app.tasks["t.record"].apply_async(kwargs={"tag": "dropped"}, task_id="silent")
    kept = app.tasks["t.record"].apply_async(kwargs={"tag": "kept"})
    assert kept.get(timeout=30) == "kept"
    wait_for(lambda: dropped.state == "REVOKED", what="the silent revoke to hold")
    assert tags_run(apps) == ["kept"]


def test_revoke_of_a_pending_task_is_revoked_at_once_without_a_worker(apps: AppFactory) -> None:
    app = apps()
    result = app.tasks["t.record"].apply_async(countdown=60)
    assert result.state == "PENDING"
    result.revoke()
    assert celery_zset_scheduler.lookup(app, result.id) is None
    assert result.state == "REVOKED"  # a running worker would say so too; here nobody had to


def test_a_record_leaves_the_workers_revoked_set_when_it_expires_in_redis(apps: AppFactory) -> None:
    from celery.utils.collections import LimitedSet
    from celery.worker import state as celery_worker_state

    from celery_zset_scheduler.celery.worker.revokes import RevokeFollower

    # A set like the worker's own (same limits), so the test leaves the process's set alone.
    revoked = LimitedSet(maxlen=celery_worker_state.REVOKES_MAX, expires=celery_worker_state.REVOKE_EXPIRES)
    follower = RevokeFollower(apps(), revoked)
    follower._add("expires-soon", 2.0)  # as loaded or announced: 2 s left on its record
    follower._add("expires-late", 7200.0)  # longer than Celery's own revoke expiry, 3 h by default
    assert "expires-soon" in revoked and "expires-late" in revoked
    revoked.purge(now=time.monotonic() + 3.0)
    assert "expires-soon" not in revoked and "expires-late" in revoked
    revoked.purge(now=time.monotonic() + 7100.0)
    assert "expires-late" in revoked
    revoked.purge(now=time.monotonic() + 7300.0)
    assert "expires-late" not in revoked

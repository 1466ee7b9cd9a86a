"""Crashes, pauses, outages and skewed clocks, with real dispatcher processes (I1, I2, I3, I5)."""

from __future__ import annotations

import collections
import json
import re
import signal
import sys
import time
from collections.abc import Iterator

import pytest

from celery_zset_scheduler.errors import StoreUnavailable
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import BROKER_DB, FAST, AppFactory, wait_for
from ..support.procs import CELERY, Cluster, leader_events, owned_shards

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster_factory(redis_server: RedisServer, r: object) -> Iterator[list[Cluster]]:
    made: list[Cluster] = []
    yield made
    for cluster in made:
        cluster.close()


def make_cluster(made: list[Cluster], server: RedisServer, store: RedisServer | None = None,
                 shards: int = 2, store_url: str | None = None, **conf: object) -> Cluster:
    cluster = Cluster(server, store, shards=shards, conf={**FAST, **conf}, store_url=store_url)
    made.append(cluster)
    return cluster


def schedule(apps: AppFactory, count: int, spread: float, start: float = 0.3, **conf: object) -> list[str]:
    app = apps(**conf)
    record = app.tasks["t.record"]
    return [record.apply_async(kwargs={"tag": i}, countdown=start + spread * i / count).id for i in range(count)]


def run_counts(apps: AppFactory) -> collections.Counter[str]:
    return collections.Counter(run["id"] for run in apps.executions())


def wait_all_ran(apps: AppFactory, ids: list[str], timeout: float = 60) -> collections.Counter[str]:
    wait_for(lambda: set(ids) <= set(run_counts(apps)), timeout=timeout, what=f"all {len(ids)} tasks to run")
    time.sleep(1.0)  # let any duplicate show up
    return run_counts(apps)


def paused_batch(proc_output: str) -> list[str]:
    match = re.search(r"PAUSED \w+ (\[.*\])", proc_output)
    assert match, proc_output[-2000:]
    return list(json.loads(match.group(1)))


@pytest.mark.parametrize("point", ["claimed", "published"])
def test_kill_9_between_claim_and_ack_loses_nothing(
    point: str, apps: AppFactory, redis_server: RedisServer, cluster_factory: list[Cluster]
) -> None:
    cluster = make_cluster(cluster_factory, redis_server, shards=2)
    ids = schedule(apps, 200, spread=2.0, shards=2)
    crashing = cluster.hooked_dispatcher(point)
    crashing.wait_for_output(r"PAUSED ")
    batch = paused_batch(crashing.output)
    assert batch
    if point == "published":  # a Redis broker elsewhere: the claim script built the envelopes
        assert re.search(r"BUILT [1-9]", crashing.output), crashing.output[-2000:]
    crashing.kill9()
    apps.worker(apps(shards=2))
    cluster.dispatcher()
    counts = wait_all_ran(apps, ids)
    duplicates = {task_id for task_id, n in counts.items() if n > 1}
    assert set(counts) == set(ids)  # nothing lost, nothing invented
    if point == "claimed":
        assert duplicates == set()  # never published: reaped once and published once
    else:
        # Published but not acked: the batch in hand (and only it) goes out a second time.
        assert duplicates == set(batch)
        assert max(counts.values()) == 2


def test_kill_9_with_the_next_claim_sent_ahead_loses_nothing(
    apps: AppFactory, redis_server: RedisServer, cluster_factory: list[Cluster]
) -> None:
    """A burst on the built lane: each claim goes while the batch before it is published. Killed
    right after a publish, the dispatcher holds that batch unacked and the next one claimed: the
    first goes out a second time, the second once, when its in-flight lease ends."""
    conf = {"zset_scheduler_batch_size": 20}
    cluster = make_cluster(cluster_factory, redis_server, shards=2, **conf)
    # All due before the dispatcher is up: its first claim takes a full batch, so the next goes ahead.
    ids = schedule(apps, 400, spread=0.05, start=0.05, shards=2, **conf)
    crashing = cluster.hooked_dispatcher("published")
    crashing.wait_for_output(r"PAUSED ")
    batch = paused_batch(crashing.output)
    assert "AHEAD True" in crashing.output and re.search(r"BUILT [1-9]", crashing.output), crashing.output[-2000:]
    crashing.kill9()
    apps.worker(apps(shards=2, **conf))
    cluster.dispatcher()
    counts = wait_all_ran(apps, ids)
    assert set(counts) == set(ids)  # nothing lost, nothing invented
    assert {task_id for task_id, n in counts.items() if n > 1} == set(batch)  # the unacked batch only
    assert max(counts.values()) == 2


def test_a_paused_leader_is_fenced_and_its_batch_in_hand_is_not_published(
    apps: AppFactory, redis_server: RedisServer, cluster_factory: list[Cluster]
) -> None:
    # A long in-flight lease: the batch can only come back through the stale leader's release.
    cluster = make_cluster(cluster_factory, redis_server, shards=1, zset_scheduler_inflight_timeout=60)
    ids = schedule(apps, 60, spread=3.0, shards=1, zset_scheduler_inflight_timeout=60)
    stale = cluster.hooked_dispatcher("claimed")  # stops itself (SIGSTOP) with a batch in hand
    stale.wait_for_output(r"PAUSED ")
    stale_epoch = max(epoch for event, _, epoch in leader_events(stale.output) if event == "acquired")
    batch = paused_batch(stale.output)
    apps.worker(apps(shards=1, zset_scheduler_inflight_timeout=60))
    fresh = cluster.dispatcher()
    fresh.wait_for_output(rf"zset leader\.acquired shard=0 epoch={stale_epoch + 1}\b")
    wait_for(lambda: set(ids) - set(batch) <= set(run_counts(apps)), what="the fresh leader to dispatch")
    stale.signal(signal.SIGCONT)
    stale.wait_for_output(r"zset batch\.abandoned .*reason=lease_lapsed")
    stale.wait_for_output(r"zset leader\.lost shard=0 .*reason=(renew_refused|claim_fenced|reap_fenced)")
    counts = wait_all_ran(apps, ids)
    assert counts == collections.Counter(dict.fromkeys(ids, 1))  # exactly once, batch included
    assert stale.alive  # losing the lease re-enters the election; it does not exit


def test_a_paused_leader_puts_back_the_claim_it_sent_ahead(
    apps: AppFactory, redis_server: RedisServer, cluster_factory: list[Cluster]
) -> None:
    """Paused in a burst with a batch in hand and the next claim sent ahead, both under a 60 s
    in-flight lease: only the stale leader's own release can bring them back, once it resumes."""
    conf = {"zset_scheduler_inflight_timeout": 60, "zset_scheduler_batch_size": 10}
    cluster = make_cluster(cluster_factory, redis_server, shards=1, **conf)
    ids = schedule(apps, 300, spread=0.05, start=0.05, shards=1, **conf)  # all due at its start
    stale = cluster.hooked_dispatcher("claimed_ahead")
    stale.wait_for_output(r"PAUSED ")
    assert "AHEAD True" in stale.output, stale.output[-2000:]
    batch = paused_batch(stale.output)
    apps.worker(apps(shards=1, **conf))
    cluster.dispatcher()
    # Everything but the stale leader's two claims (its batch and the one sent ahead) runs.
    wait_for(lambda: len(run_counts(apps)) >= len(ids) - len(batch) - 10, timeout=60, what="the fresh leader")
    time.sleep(1.0)
    assert len(run_counts(apps)) <= len(ids) - len(batch) - 1  # the claim sent ahead waits too
    stale.signal(signal.SIGCONT)
    stale.wait_for_output(r"zset batch\.abandoned .*reason=lease_lapsed")
    counts = wait_all_ran(apps, ids)
    assert counts == collections.Counter(dict.fromkeys(ids, 1))  # exactly once, both claims included


@pytest.mark.parametrize("store", ["own_db", "broker_db"])
def test_a_leader_paused_at_the_hand_off_does_not_publish_what_its_successor_did(
    apps: AppFactory, redis_server: RedisServer, cluster_factory: list[Cluster], store: str
) -> None:
    # Paused after every early check, at the publish call itself, past its lease and the batch's
    # in-flight lease: the new leader reaps and publishes the batch, so the stale one must not.
    # "broker_db": the store is the broker's own database (the default), where the lease is
    # checked inside the broker's transaction; "own_db": by the dispatcher's clock right before it.
    # The generic path there: the fast path (the default on the broker's database) has no publish
    # call to pause at (tests/dispatch/test_fast_path_crash.py).
    url = redis_server.url_db(BROKER_DB) if store == "broker_db" else None
    conf = {} if url is None else {"zset_scheduler_url": url, "zset_scheduler_fast_path": False}
    cluster = make_cluster(cluster_factory, redis_server, shards=1, store_url=url, **conf)
    ids = schedule(apps, 60, spread=2.0, shards=1, **conf)
    stale = cluster.hooked_dispatcher("handing")
    stale.wait_for_output(r"PAUSED ")
    batch = paused_batch(stale.output)
    assert batch
    if store == "own_db":  # the claim script built the envelopes (fast_path False: not there)
        assert re.search(r"BUILT [1-9]", stale.output), stale.output[-2000:]
    apps.worker(apps(shards=1, **conf))
    cluster.dispatcher()
    wait_for(lambda: set(ids) <= set(run_counts(apps)), timeout=30, what="the new leader to run everything")
    stale.signal(signal.SIGCONT)
    stale.wait_for_output(r"zset batch\.abandoned .*reason=lease_lapsed_at_handoff")
    counts = wait_all_ran(apps, ids)
    assert counts == collections.Counter(dict.fromkeys(ids, 1))  # the paused batch too: exactly once


def test_dispatchers_share_shards_and_hand_over_on_join_and_leave(
    apps: AppFactory, redis_server: RedisServer, cluster_factory: list[Cluster]
) -> None:
    cluster = make_cluster(cluster_factory, redis_server, shards=6)
    ids = schedule(apps, 300, spread=9.0, start=0.5, shards=6)
    apps.worker(apps(shards=6))
    first, second = cluster.dispatcher(), cluster.dispatcher()
    wait_for(lambda: sorted(len(owned_shards(p.output)) for p in (first, second)) == [3, 3], what="a 3/3 split")
    third = cluster.dispatcher()  # joins: gets its share
    wait_for(lambda: sorted(len(owned_shards(p.output)) for p in (first, second, third)) == [2, 2, 2],
             what="a 2/2/2 split")
    assert third.terminate() == 0  # leaves cleanly: hands its shards back
    assert "zset leader.released" in third.output
    wait_for(lambda: sorted(len(owned_shards(p.output)) for p in (first, second)) == [3, 3],
             what="the leaver's shards taken over")
    held = [owned_shards(p.output) for p in (first, second)]
    assert held[0] | held[1] == set(range(6)) and not held[0] & held[1]
    counts = wait_all_ran(apps, ids)
    assert counts == collections.Counter(dict.fromkeys(ids, 1))


def test_a_killed_dispatchers_shards_are_taken_over(
    apps: AppFactory, redis_server: RedisServer, cluster_factory: list[Cluster]
) -> None:
    cluster = make_cluster(cluster_factory, redis_server, shards=4)
    ids = schedule(apps, 200, spread=6.0, start=0.5, shards=4)
    apps.worker(apps(shards=4))
    first, second = cluster.dispatcher(), cluster.dispatcher()
    wait_for(lambda: sorted(len(owned_shards(p.output)) for p in (first, second)) == [2, 2], what="a 2/2 split")
    second.kill9()
    killed_at = time.monotonic()
    wait_for(lambda: owned_shards(first.output) == {0, 1, 2, 3}, what="the survivor to take every shard")
    takeover = time.monotonic() - killed_at
    # A correctness bound, not a speed figure: shards move once the dead leader's lease expires.
    assert takeover < float(FAST["zset_scheduler_lock_timeout"]) + 2.0, takeover
    counts = wait_all_ran(apps, ids)
    assert set(counts) == set(ids)
    assert all(n <= 2 for n in counts.values())


def test_redis_outage_under_a_running_dispatcher(
    apps: AppFactory, redis_server: RedisServer, cluster_factory: list[Cluster]
) -> None:
    store_server = RedisServer(appendonly=True).start()
    try:
        cluster = make_cluster(cluster_factory, redis_server, store_server, shards=2)
        app = apps(shards=2, zset_scheduler_url=store_server.url_db(0))
        ids = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=0.5 + 6.0 * i / 200).id
               for i in range(200)]
        apps.worker(apps(shards=2))
        dispatcher = cluster.dispatcher()
        wait_for(lambda: len(run_counts(apps)) >= 20, what="dispatching to start")
        store_server.stop(kill=True)  # kill -9 the store's Redis; AOF with fsync always keeps it
        time.sleep(3.0)
        store_server.start()
        counts = wait_all_ran(apps, ids)
        assert set(counts) == set(ids)
        assert max(counts.values()) == 1
        assert dispatcher.alive
        output = dispatcher.output
        assert "zset outage.started what=redis" in output and "zset outage.ended what=redis" in output
    finally:
        store_server.close()


@pytest.mark.parametrize("offset_hours", [3, -3])
def test_a_dispatcher_with_a_skewed_clock_dispatches_on_redis_time(
    offset_hours: int, apps: AppFactory, redis_server: RedisServer, cluster_factory: list[Cluster]
) -> None:
    cluster = make_cluster(cluster_factory, redis_server, shards=2)
    app = apps(shards=2)
    started = time.time()
    ids = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=1.0 + i * 0.1).id for i in range(20)]
    due = {task_id: started + 1.0 + i * 0.1 for i, task_id in enumerate(ids)}
    skewed = cluster.spawn(
        [sys.executable, "-m", "tests.support.skewed", str(offset_hours * 3600), CELERY, "-A", "tests.support.proc_app",
         "zset", "run"],
    )
    apps.worker(apps(shards=2))
    counts = wait_all_ran(apps, ids, timeout=30)
    assert set(counts) == set(ids)
    assert "clock skewed by" in skewed.output
    for run in apps.executions():
        # Not early (a fast clock would dispatch at once), not hours late (a slow clock would wait
        # 3 h): a correctness bound, with room for a loaded machine's worker start and backlog.
        assert due[run["id"]] - 0.05 <= run["at"] <= due[run["id"]] + 30.0


def test_a_full_store_is_drained_not_abandoned(apps: AppFactory, redis_server: RedisServer) -> None:
    # noeviction at maxmemory: new schedules are refused, but dispatchers (even ones started now)
    # must still be elected and drain what is there, since that is what frees memory.
    full = RedisServer(extra=["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]).start()
    try:
        app = apps(shards=2, zset_scheduler_url=full.url)
        ids = []
        with pytest.raises(StoreUnavailable, match="used memory > 'maxmemory'"):
            for i in range(100_000):
                ids.append(app.tasks["t.record"].apply_async(kwargs={"tag": i, "pad": "x" * 200}, countdown=1).id)
        assert len(ids) > 1000
        dispatcher = apps.dispatcher(app)
        apps.worker(apps(shards=2), pool="threads", concurrency=4)
        counts = wait_all_ran(apps, ids, timeout=120)
        assert set(counts) == set(ids)
        assert dispatcher.thread.is_alive() and dispatcher.error is None  # type: ignore[attr-defined]
        assert app.tasks["t.record"].apply_async(countdown=1).id  # drained: accepting again
    finally:
        full.close()


def test_a_full_store_with_a_shard_that_has_nothing_due_is_still_drained(apps: AppFactory) -> None:
    # At maxmemory the claim of a shard with nothing due must not fail the other shards' claims in
    # the same round trip, and a dispatcher of a fresh process (its own meta check) must be elected.
    full = RedisServer(extra=["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]).start()
    try:
        app = apps(shards=2, zset_scheduler_url=full.url)
        keys = apps.store(app).keys
        record = app.tasks["t.record"]
        due_ids = [i for i in (f"due-{n}" for n in range(3000)) if keys.shard_of(i) == 0][:300]
        for task_id in due_ids:
            record.apply_async(kwargs={"tag": task_id}, countdown=1.5, task_id=task_id)
        with pytest.raises(StoreUnavailable, match="used memory > 'maxmemory'"):
            for n in range(100_000):  # fill shard 1 with tasks due in a day
                task_id = f"far-{n}"
                if keys.shard_of(task_id) == 1:
                    record.apply_async(kwargs={"pad": "x" * 200}, countdown=86400, task_id=task_id)
        fresh = apps(shards=2, zset_scheduler_url=full.url)  # a new installation: checks the meta itself
        dispatcher = apps.dispatcher(fresh)
        apps.worker(apps(shards=2), pool="threads", concurrency=4)
        counts = wait_all_ran(apps, due_ids, timeout=60)
        assert set(counts) >= set(due_ids)
        assert dispatcher.thread.is_alive() and dispatcher.error is None  # type: ignore[attr-defined]
    finally:
        full.close()

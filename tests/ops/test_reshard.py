"""Resharding on a real Redis: every kind of data ends in its new shard, each step survives a crash
after it, a dry run writes nothing, and clients follow (running) or refuse (started with the old count)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from celery_zset_scheduler.errors import ShardCountMismatch
from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.model.reshard import shard_for
from celery_zset_scheduler.ops.reshard import ReshardError, plan, reshard
from celery_zset_scheduler.store import meta
from celery_zset_scheduler.store.claims import ClaimResult, Claims, Fence
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.leases import Leases
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.periodic import PeriodicStore
from celery_zset_scheduler.store.reshard import put_call, take_call
from celery_zset_scheduler.store.revokes import Revokes
from celery_zset_scheduler.store.schedule import NewEntry
from celery_zset_scheduler.testing import RedisServer

from .conftest import message

PREFIX = "zr"


@pytest.fixture(params=["standalone", "cluster"])
def client(request: pytest.FixtureRequest, redis_server: RedisServer) -> Any:
    """A client of the deployment under test (emptied for the test)."""
    if request.param == "standalone":
        request.getfixturevalue("r")
        return make_client(redis_server.url)
    cluster = request.getfixturevalue("cluster")
    return make_client(cluster.url, cluster="auto")


def new_store(client: Any, shards: int) -> Store:
    store = Store(client, KeySpace(PREFIX, shards))
    store.check_meta()
    return store


def snapshot(r: Any) -> dict[bytes, bytes]:
    return {k: r.dump(k) for k in sorted(r.keys(f"*{PREFIX}*"))}


def where(r: Any, shards: int, task_id: str) -> list[int]:
    return [s for s in range(shards) if r.zscore(f"{{{PREFIX}:{s}}}:due", task_id) is not None]


@pytest.fixture
def store8(client: Any) -> Store:
    return new_store(client, 8)


def fill(store: Store, n: int = 300, keyed: int = 40) -> dict[str, str]:
    """``n`` entries (the first ``keyed`` under an idempotency key); id -> routing key."""
    entries = [NewEntry(f"t{i}", 10_000_000 + i, message(f"t{i}"), f"k{i}" if i < keyed else None)
               for i in range(n)]
    assert all(r.created for r in store.schedule_many(entries))
    return {e.task_id: e.idempotency_key or e.task_id for e in entries}


@pytest.mark.parametrize("to", [16, 3, 1])
def test_every_entry_moves_to_the_shard_of_its_key_with_its_message_and_bookkeeping(
        store8: Store, client: Any, to: int) -> None:
    routing = fill(store8)
    before = {i: client.hget(f"{{{PREFIX}:{where(client, 8, i)[0]}}}:msg", i) for i in routing}
    report = reshard(store8, to, batch=37)
    assert report.moved["entries"] == sum(1 for i, k in routing.items() if shard_for(k, 8) != shard_for(k, to))
    span = max(8, to)
    for task_id, key in routing.items():
        (shard,) = where(client, span, task_id)
        assert shard == shard_for(key, to)
        assert client.hget(f"{{{PREFIX}:{shard}}}:msg", task_id) == before[task_id]  # stamp and all
        if key != task_id:
            assert client.hget(f"{{{PREFIX}:{shard}}}:pkeys", key) == task_id.encode()
            assert client.hget(f"{{{PREFIX}:{shard}}}:idkeys", task_id) == key.encode()
    for s in range(span):
        for suffix in ("mv", "mv:msg", "mv:p", "mv:in"):
            assert not client.exists(f"{{{PREFIX}:{s}}}:{suffix}")
    assert meta.read(client, KeySpace(PREFIX, to)).shards == to
    # An idempotency key still refuses a second entry, and a lookup finds each entry.
    fresh = new_store(client, to)
    assert fresh.schedule("other", 1, b"x", idempotency_key="k3").status == "duplicate_key"
    assert fresh.get("t5") is not None and fresh.get("t100") is not None
    # Each message reads back whole in its new shard (a value referring to a shared prefix finds
    # it there: the move wrote it first).
    for task_id in ("t5", "t100", "t299"):
        found = new_store(client, to).get(task_id)
        assert found is not None and found.payload == message(task_id)


def test_a_dry_run_counts_what_would_move_and_writes_nothing(store8: Store, client: Any) -> None:
    routing = fill(store8)
    before = snapshot(client)
    report = plan(store8, 16)
    assert snapshot(client) == before
    assert report.dry_run and report.shards_from == 8 and report.shards_to == 16
    moving = sum(m.entries.moving for m in report.shards)
    assert moving == sum(1 for k in routing.values() if shard_for(k, 16) != shard_for(k, 8))
    assert sum(m.entries.kept for m in report.shards) == len(routing) - moving
    for m in report.shards:
        assert set(m.entries.out) <= {m.shard + 8}  # 8 -> 16: an entry stays or moves up by 8
        assert m.entries.kept == sum(1 for k in routing.values() if shard_for(k, 8) == shard_for(k, 16) == m.shard)


def test_a_run_killed_after_a_take_or_a_put_resumes_without_loss_or_a_second_put(store8: Store, client: Any) -> None:
    routing = fill(store8, n=60, keyed=10)
    keys16 = KeySpace(PREFIX, 16, 16)
    # Pretend a run began and died: the move is recorded, shard 0 and shard 1 had a batch taken,
    # shard 1's was put too (and its entries then ran in the new shard) but not dropped.
    store8.scripts.run(meta.begin_call(keys16, 8, 16))
    for s in range(16):
        client.set(keys16.shard(s).layout, 16)
    leaving0 = [i for i, k in routing.items() if shard_for(k, 8) == 0 and shard_for(k, 16) != 0]
    leaving1 = [i for i, k in routing.items() if shard_for(k, 8) == 1 and shard_for(k, 16) == 9]
    assert leaving0 and leaving1
    store8.scripts.run(take_call(keys16, 0, leaving0))
    held1 = store8.scripts.run(take_call(keys16, 1, leaving1))
    assert store8.scripts.run(put_call(keys16, 9, held1)) == [1] * len(held1)
    ran = held1[0].task_id
    client.zrem(keys16.shard(9).due, ran)  # dispatched and acked from its new shard
    client.hdel(keys16.shard(9).msg, ran)

    report = reshard(new_store(client, 8), 16)
    assert report.resumed
    assert where(client, 16, ran) == []  # not put a second time
    for task_id in leaving0 + leaving1[1:]:
        assert where(client, 16, task_id) == [shard_for(routing[task_id], 16)]
    assert client.zcard(keys16.shard(0).moving) == 0 and client.zcard(keys16.shard(1).moving) == 0


def test_running_clients_follow_a_reshard_and_new_ones_with_the_old_count_refuse(store8: Store, client: Any) -> None:
    producer = new_store(client, 8)  # started before the reshard
    reshard(new_store(client, 8), 16)
    # The running producer's write is refused by the layout, routed again, and lands right.
    assert producer.schedule("late", 5, message("late")).created
    assert where(client, 16, "late") == [shard_for("late", 16)]
    assert producer.schedule_many([NewEntry("m1", 5, b"x"), NewEntry("m2", 5, b"y")])[1].created
    assert producer.add_many((f"s{i}", 5, b"z") for i in range(50)) == 50
    for task_id in ["m1", "m2"] + [f"s{i}" for i in range(50)]:
        assert where(client, 16, task_id) == [shard_for(task_id, 16)]
    # A process started now with the old count refuses, saying what to set.
    with pytest.raises(ShardCountMismatch, match=r"resharded from 8.*set zset_scheduler_shards=16 and restart"):
        new_store(client, 8)
    new_store(client, 16)  # the new count is accepted


def test_a_second_move_cannot_begin_while_one_is_under_way(store8: Store, client: Any) -> None:
    store8.scripts.run(meta.begin_call(KeySpace(PREFIX, 16, 16), 8, 16))
    with pytest.raises(ReshardError, match="finish it first with `celery zset reshard --to 16`"):
        reshard(store8, 4)
    client.hdel(store8.keys.meta, "moving_to")
    with pytest.raises(ReshardError, match="already has 8 shards"):
        plan(store8, 8)


def test_periodic_entries_and_revoke_records_move_and_keep_their_state(store8: Store, client: Any) -> None:
    ps = PeriodicStore(store8)
    names = [f"entry-{i}" for i in range(40)]
    for n, name in enumerate(names):
        ok, _ = ps.write(name, mode="new", expected=None, definition=b"def:" + name.encode(), template=b"TPL",
                         state=b"state-" + name.encode(), look_ms=20_000_000 + n, plan=b"plan")
        assert ok
    Revokes(store8, ttl=3600, most=10_000).revoke([f"gone-{i}" for i in range(30)])
    reshard(store8, 4)
    keys4 = KeySpace(PREFIX, 4)
    for n, name in enumerate(names):
        sk = keys4.shard(shard_for(name, 4))
        assert client.hget(sk.periodic_state, name) == b"state-" + name.encode()
        assert client.hget(sk.periodic_tpl, name) == b"TPL"
        assert client.zscore(sk.periodic_next, name) == 20_000_000 + n
        assert client.zscore(sk.periodic_names, name) == 0
    assert sum(int(client.zcard(KeySpace(PREFIX, 8).shard(s).periodic_names)) for s in range(4, 8)) == 0
    for i in range(30):
        assert client.zscore(keys4.shard(shard_for(f"gone-{i}", 4)).revoked, f"gone-{i}") is not None
    assert PeriodicStore(new_store(client, 4)).read(names[7]).state == b"state-" + names[7].encode()


def test_entries_in_flight_beyond_the_new_count_are_moved_once_acked_or_reaped(store8: Store, client: Any) -> None:
    fill(store8, n=40, keyed=0)
    shard = 6  # gone with 4 shards
    epoch = Leases(store8).acquire(shard, "tok", 60_000)
    fence = Fence(shard, "tok", epoch)
    claimed = Claims(store8).claim_many([fence], limit=100, lease_ms=1, max_wait_ms=1).results[shard]
    assert isinstance(claimed, ClaimResult) and claimed.entries

    def reap_later() -> None:
        time.sleep(0.5)
        Claims(store8).reap(fence, 100)  # their lease (1 ms) has lapsed: back to due

    threading.Thread(target=reap_later).start()
    reshard(new_store(client, 8), 4)
    for entry in claimed.entries:
        assert where(client, 8, entry.task_id) == [shard_for(entry.task_id, 4)]


def test_an_idempotency_key_still_in_its_old_shard_during_the_move_refuses_a_second_entry(
        store8: Store, client: Any) -> None:
    keys16 = KeySpace(PREFIX, 16, 16)
    key = next(f"key{i}" for i in range(100) if shard_for(f"key{i}", 8) != shard_for(f"key{i}", 16))
    assert store8.schedule("first", 10_000_000, message("first"), idempotency_key=key).created
    store8.scripts.run(meta.begin_call(keys16, 8, 16))
    for s in range(16):
        client.set(keys16.shard(s).layout, 16)
    producer = new_store(client, 8)  # follows the move: writes go to the key's new shard
    found = producer.schedule("second", 10_000_000, message("second"), idempotency_key=key)
    assert (found.status, found.task_id) == ("duplicate_key", "first")
    old = shard_for(key, 8)
    store8.scripts.run(take_call(keys16, old, ["first"]))  # taken, not yet put: still refused
    many = producer.schedule_many([NewEntry("third", 1, b"x", key), NewEntry("free", 1, b"y", "other")])
    assert [(r.status, r.task_id) for r in many] == [("duplicate_key", "first"), ("scheduled", "free")]
    reshard(new_store(client, 8), 16)
    assert where(client, 16, "first") == [shard_for(key, 16)] and where(client, 16, "second") == []
    assert new_store(client, 16).schedule("fourth", 1, b"z", idempotency_key=key).task_id == "first"


@pytest.mark.parametrize("to", [16, 3])
def test_collecting_shared_prefixes_while_a_reshard_moves_entries_loses_no_prefix(
        store8: Store, client: Any, to: int) -> None:
    """Collection cycles back to back on every shard of both layouts while the move runs, then
    two more on the new layout: every entry reads back whole, and prefixes still in use stay."""
    from celery_zset_scheduler.store.shared_gc import collect

    routing = fill(store8)
    for task in ("t.other", "t.third"):  # more prefixes: one per task name in every shard
        more = [NewEntry(f"{task}-{i}", 10_000_000 + i, message(f"{task}-{i}", task=task)) for i in range(60)]
        assert all(r.created for r in store8.schedule_many(more))
        routing.update({e.task_id: e.task_id for e in more})
    stop = threading.Event()
    errors: list[BaseException] = []
    phases: list[str] = []
    runner = Store(store8.client, KeySpace(PREFIX, 8))
    span = max(8, to)

    def gc() -> None:
        try:
            while not stop.is_set():
                for shard in range(span):
                    phases.extend(s.phase for s in collect(runner.scripts, KeySpace(PREFIX, span), shard, 20, 13,
                                                           max_steps=5))
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=gc)
    thread.start()
    try:
        reshard(store8, to, batch=17)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    assert {"ended", "busy"} <= set(phases)  # cycles ended, and waited while entries moved
    for shard in range(to):
        for _ in range(2):
            done = collect(runner.scripts, KeySpace(PREFIX, to), shard, 0)
            while done[-1].phase != "ended":
                done = collect(runner.scripts, KeySpace(PREFIX, to), shard, 0)
    for shard in range(to, span):  # retired by a shrink: nothing left to refer to its prefixes
        sk = KeySpace(PREFIX, span).shard(shard)
        assert not any(client.exists(k) for k in (sk.shared, sk.shared_old, sk.shared_grave))
    fresh = new_store(client, to)
    for task_id in routing:
        found = fresh.get(task_id)
        task = task_id.split("-")[0] if task_id.startswith("t.") else "t.add"
        assert found is not None and found.payload == message(task_id, task=task), task_id

"""Values over 64 KB are marked in the shard's ``big`` hash while ``msg`` holds them, so the claim
sizes a big entry before it reads it: one the byte budget passes over is never read (counted in
Redis' own command statistics), and the marks follow every write and delete of a value."""

from __future__ import annotations

from typing import Any

import redis

from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.ops.reshard import reshard
from celery_zset_scheduler.store.claims import Claims
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.revokes import Revokes
from celery_zset_scheduler.store.schedule import NewEntry

from ..support.tools import claim, command_stats, reset_stats
from .test_claims import ids_in_shard, lead, redis_ms

BIG = b"B" * 300_000  # over the 64 KB mark, over the budget below
MID = b"M" * 80_000  # over the mark, within the budget
SMALL = b"s" * 1_000


def marks(r: Any, store: Store, shard: int) -> set[str]:
    return {bytes(k).decode() for k in r.hkeys(store.keys.shard(shard).big)}


def calls(r: Any, command: str) -> int:
    return int(command_stats(r).get(f"cmdstat_{command}", {}).get("calls", 0))


def test_only_values_over_64_kb_are_marked_and_the_ack_drops_the_marks(store: Store, r: redis.Redis) -> None:
    now = redis_ms(r)
    big, mid, small = ids_in_shard(store, 0, 3)
    store.schedule_many([NewEntry(big, now - 10, BIG), NewEntry(small, now - 10, SMALL)])
    store.schedule(mid, now - 5, MID)
    assert marks(r, store, 0) == {big, mid}
    result = claim(Claims(store), lead(store, 0), limit=10, lease_ms=30_000)
    assert {e.task_id: e.payload for e in result.entries} == {big: BIG, small: SMALL, mid: MID}
    assert marks(r, store, 0) == {big, mid}  # kept while in flight: a reaped entry is still sized first
    Claims(store).ack(result.entries)
    assert marks(r, store, 0) == set() and r.exists(store.keys.shard(0).big) == 0


def test_a_big_entry_the_budget_passes_over_is_sized_but_not_read(store: Store, r: redis.Redis) -> None:
    now = redis_ms(r)
    ids = ids_in_shard(store, 1, 5)
    store.schedule_many([NewEntry(i, now - 500, BIG) for i in ids[:3]] +
                        [NewEntry(i, now - 400, SMALL) for i in ids[3:]])
    claims, fence = Claims(store, budget=100_000), lead(store, 1)
    reset_stats(r)
    first = claim(claims, fence, limit=10, lease_ms=30_000)
    assert [e.task_id for e in first.entries] == ids[3:]  # the small ones, not behind the big ones
    assert calls(r, "hstrlen") == 3 and calls(r, "hget") == 0  # the three big values sized, none read
    reset_stats(r)
    second = claim(claims, fence, limit=10, lease_ms=30_000)
    assert [(e.task_id, e.payload) for e in second.entries] == [(ids[0], BIG)]  # alone
    assert calls(r, "hget") == 1  # only the one taken was read
    third, fourth = (claim(claims, fence, limit=10, lease_ms=30_000) for _ in range(2))
    assert [e.task_id for e in third.entries + fourth.entries] == ids[1:3]


def test_a_stale_mark_changes_how_the_claim_reads_never_what_it_takes(store: Store, r: redis.Redis) -> None:
    now = redis_ms(r)
    a, b, gone = ids_in_shard(store, 2, 3)
    store.schedule_many([NewEntry(a, now - 10, SMALL), NewEntry(b, now - 5, SMALL)])
    sk = store.keys.shard(2)
    r.hset(sk.big, mapping={a: 1, gone: 1})  # a mark on a small value, and on a value no longer stored
    claims, fence = Claims(store, budget=1_500), lead(store, 2)
    result = claim(claims, fence, limit=10, lease_ms=30_000)
    assert [(e.task_id, e.payload) for e in result.entries] == [(a, SMALL)]  # sized as it is: 1 KB
    rest = claim(claims, fence, limit=10, lease_ms=30_000)
    assert [(e.task_id, e.payload) for e in rest.entries] == [(b, SMALL)]


def test_cancel_revoke_and_replace_drop_the_marks_of_what_they_delete(store: Store, r: redis.Redis) -> None:
    now = redis_ms(r) + 60_000
    a, b, c = ids_in_shard(store, 3, 3)
    store.schedule_many([NewEntry(i, now, BIG) for i in (a, b, c)])
    assert marks(r, store, 3) == {a, b, c}
    assert store.cancel([a])[a] == "cancelled"
    Revokes(store, ttl=60.0, most=100).revoke([b])
    assert marks(r, store, 3) == {c}
    store.schedule(c, now, SMALL, replace=True)  # the same id, now small
    assert marks(r, store, 3) == set()
    store.schedule(c, now, BIG, replace=True)
    assert marks(r, store, 3) == {c}


def test_a_reshard_moves_the_marks_with_the_values(r: redis.Redis) -> None:
    store = Store(r, KeySpace("zt-big", 2))
    store.check_meta()
    due = redis_ms(r) + 60_000
    store.schedule_many([NewEntry(f"big{i}", due, BIG) for i in range(6)] +
                        [NewEntry(f"small{i}", due, SMALL) for i in range(20)])
    reshard(store, 5, settle=0.0)
    moved = Store(r, KeySpace("zt-big", 5))
    assert set().union(*(marks(r, moved, s) for s in range(5))) == {f"big{i}" for i in range(6)}
    for s in range(5):
        assert all(moved.keys.shard_of(i) == s for i in marks(r, moved, s))  # each in its entry's new shard

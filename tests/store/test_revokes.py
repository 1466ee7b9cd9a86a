"""Durable revokes in the store (I10): cancel what is pending, record the rest, bounded and expiring."""

from __future__ import annotations

import time

import redis

from celery_zset_scheduler.model.ids import task_id_of
from celery_zset_scheduler.store.claims import Claims
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.revokes import Revokes, load, parse_announcement, revoked_among
from celery_zset_scheduler.store.schedule import NewEntry

from ..support.tools import claim, pending
from .test_claims import ids_in_shard, lead, redis_ms


def records(r: redis.Redis, store: Store) -> dict[int, set[str]]:
    return {s: {task_id_of(m) for m in r.zrange(store.keys.shard(s).revoked, 0, -1)} for s in range(store.shards)}


def test_a_pending_entry_is_cancelled_and_leaves_no_record(store: Store, r: redis.Redis) -> None:
    (a,) = ids_in_shard(store, 1, 1)
    store.schedule(a, redis_ms(r) + 60_000, b"A")
    outcome = Revokes(store, 60, 100).revoke([a])
    assert outcome.status == {a: "cancelled"} and outcome.stopped == [a]
    assert store.get(a) is None and pending(store) == 0
    assert records(r, store) == {0: set(), 1: set(), 2: set(), 3: set()}


def test_an_in_flight_entry_is_taken_out_of_flight_and_recorded(store: Store, r: redis.Redis) -> None:
    a, b = ids_in_shard(store, 2, 2)
    store.schedule_many([NewEntry(a, redis_ms(r) - 10, b"A"), NewEntry(b, redis_ms(r) - 5, b"B")])
    fence = lead(store, 2)
    claims = Claims(store)
    claimed = claim(claims, fence, limit=10, lease_ms=1)  # a lease that lapses at once
    assert [e.task_id for e in claimed.entries] == [a, b]
    outcome = Revokes(store, 60, 100).revoke([a])
    assert outcome.status == {a: "inflight"} and outcome.stopped == [a]
    assert records(r, store)[2] == {a}
    assert store.get(a) is None
    # Neither a release nor the reap of the lapsed claim can put it back in due.
    assert claims.release(claimed.entries) == 1  # b only
    time.sleep(0.01)
    assert claims.reap(fence, 10) == []
    assert [e.task_id for e in claim(claims, fence, limit=10, lease_ms=30_000).entries] == [b]
    assert revoked_among(store.client, store.keys, {2: [a, b]}) == {(2, a)}


def test_an_unknown_id_is_recorded_once_in_its_own_shard(store: Store, r: redis.Redis) -> None:
    (a,) = ids_in_shard(store, 3, 1, prefix="gone")
    outcome = Revokes(store, 60, 100).revoke([a, a])
    assert outcome.status == {a: "recorded"} and outcome.stopped == []
    assert records(r, store) == {0: set(), 1: set(), 2: set(), 3: {a}}


def test_an_entry_under_an_idempotency_key_is_found_in_the_keys_shard(store: Store, r: redis.Redis) -> None:
    (a,) = ids_in_shard(store, 0, 1)
    key = next(f"k{i}" for i in range(100) if store.keys.shard_of(f"k{i}") == 3)
    store.schedule(a, redis_ms(r) + 60_000, b"A", idempotency_key=key)
    assert Revokes(store, 60, 100).revoke([a]).status == {a: "cancelled"}
    assert store.get(a) is None and r.hlen(store.keys.shard(3).pending_keys) == 0
    assert all(not ids for ids in records(r, store).values())


def test_a_retry_pending_while_its_first_copy_is_in_flight_is_cancelled_and_recorded(
    store: Store, r: redis.Redis
) -> None:
    (a,) = ids_in_shard(store, 1, 1)
    store.schedule(a, redis_ms(r) - 10, b"first")
    claim(Claims(store), lead(store, 1), limit=10, lease_ms=30_000)
    store.schedule(a, redis_ms(r) + 60_000, b"retry")  # scheduled again before the ack
    outcome = Revokes(store, 60, 100).revoke([a])
    assert outcome.status == {a: "cancelled"}
    assert records(r, store)[1] == {a} and store.get(a) is None


def test_a_claim_drops_a_due_entry_with_a_record(store: Store, r: redis.Redis) -> None:
    a, b = ids_in_shard(store, 0, 2)
    Revokes(store, 60, 100).revoke([a])  # not in the store yet: recorded
    store.schedule_many([NewEntry(a, redis_ms(r) - 10, b"A"), NewEntry(b, redis_ms(r) - 5, b"B")])
    result = claim(Claims(store), lead(store, 0), limit=10, lease_ms=30_000)
    assert [e.task_id for e in result.entries] == [b]
    assert result.revoked == [a]
    assert store.get(a) is None  # dropped with its message


def test_records_expire(store: Store, r: redis.Redis) -> None:
    (a,) = ids_in_shard(store, 0, 1)
    Revokes(store, 0.3, 100).revoke([a])
    assert set(load(store.client, store.keys).expiries) == {a}
    time.sleep(0.4)
    assert load(store.client, store.keys).expiries == {}
    claim(Claims(store), lead(store, 0), limit=10, lease_ms=30_000)  # a claim trims what expired
    assert r.zcard(store.keys.shard(0).revoked) == 0


def test_records_are_bounded(store: Store, r: redis.Redis) -> None:
    revokes = Revokes(store, 60, 8)  # 2 a shard
    for chunk in range(10):
        revokes.revoke([f"gone-{chunk}-{i}" for i in range(50)])
    sizes = [r.zcard(store.keys.shard(s).revoked) for s in range(store.shards)]
    assert sizes == [2, 2, 2, 2]
    kept = set(load(store.client, store.keys).expiries)
    assert all(i.startswith("gone-9-") for i in kept)  # the latest revokes stay, the oldest go


def test_each_record_is_announced(store: Store, r: redis.Redis) -> None:
    pubsub = store.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.revoke_channel)
    assert pubsub.get_message(timeout=1.0) is None  # the subscription's confirmation
    (a,) = ids_in_shard(store, 2, 1)
    (b,) = ids_in_shard(store, 1, 1, prefix="pending")
    store.schedule(b, redis_ms(r) + 60_000, b"B")
    Revokes(store, 60, 100).revoke([a, b])
    message = pubsub.get_message(timeout=2.0)
    assert message is not None
    assert parse_announcement(message["data"]) == (60.0, [a])  # the cancelled one needs no record
    assert pubsub.get_message(timeout=0.2) is None
    pubsub.close()

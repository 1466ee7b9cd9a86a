"""Claim / ack / release / reap and the wake-up, on a real Redis, with real leases."""

from __future__ import annotations

import time

import redis

from celery_zset_scheduler.dispatch.leadership import Leadership
from celery_zset_scheduler.store.claims import Claims, Fence
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry

from ..support.tools import claim


def lead(store: Store, shard: int, member: str = "m1", ttl: float = 5.0) -> Fence:
    leadership = Leadership(store, member, ttl, pinned={shard})
    leadership.beat()
    lease = leadership.lease(shard)
    assert lease is not None
    return lease.fence


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return sec * 1000 + usec // 1000


def ids_in_shard(store: Store, shard: int, n: int, prefix: str = "t") -> list[str]:
    out, i = [], 0
    while len(out) < n:
        if store.keys.shard_of(f"{prefix}{i}") == shard:
            out.append(f"{prefix}{i}")
        i += 1
    return out


def test_claim_takes_only_due_entries_by_redis_time(store: Store, r: redis.Redis) -> None:
    now = redis_ms(r)
    a, b, c = ids_in_shard(store, 0, 3)
    store.schedule_many([NewEntry(a, now - 10, b"A"), NewEntry(b, now - 5, b"B"), NewEntry(c, now + 60_000, b"C")])
    fence = lead(store, 0)
    result = claim(Claims(store), fence, limit=10, lease_ms=30_000)
    assert not result.fenced
    assert [(e.task_id, e.payload) for e in result.entries] == [(a, b"A"), (b, b"B")]
    assert result.next_due_ms == now + 60_000
    sk = store.keys.shard(0)
    assert r.zrange(sk.due, 0, -1) == [c.encode()]
    lease_deadlines = dict(r.zrange(sk.inflight, 0, -1, withscores=True))
    assert set(lease_deadlines) == {a.encode(), b.encode()}
    assert all(d >= result.now_ms + 30_000 for d in lease_deadlines.values())


def test_claim_of_the_largest_batch_with_and_without_idempotency_keys(store: Store, r: redis.Redis) -> None:
    # 5000 is the largest batch_size: more values than one Lua unpack() may take.
    now = redis_ms(r)
    ids = ids_in_shard(store, 2, 5000)
    store.schedule_many([NewEntry(i, now - 100 + n % 7, str(n).encode()) for n, i in enumerate(ids)])
    store.schedule(ids[0] + "-k", now - 200, b"keyed", idempotency_key="charge:1")
    keyed_shard = store.keys.shard_of("charge:1")
    claims = Claims(store)
    result = claim(claims, lead(store, 2), limit=5000, lease_ms=30_000)
    assert len(result.entries) == 5000 and r.zcard(store.keys.shard(2).inflight) == 5000
    assert {e.task_id: e.payload for e in result.entries} == {i: str(n).encode() for n, i in enumerate(ids)}
    assert [e.due_ms for e in result.entries] == sorted(e.due_ms for e in result.entries)
    keyed = result if keyed_shard == 2 else claim(claims, lead(store, keyed_shard), limit=5000, lease_ms=30_000)
    ks = store.keys.shard(keyed_shard)
    assert r.hlen(ks.id_keys) == 1  # kept while in flight: a reaped entry still holds its key
    claims.ack([e for e in keyed.entries if e.task_id == ids[0] + "-k"])
    assert r.hlen(ks.pending_keys) == 0 and r.hlen(ks.id_keys) == 0  # acked: the key is free again


def test_claim_respects_the_batch_limit(store: Store, r: redis.Redis) -> None:
    now = redis_ms(r)
    ids = ids_in_shard(store, 1, 25)
    store.schedule_many([NewEntry(i, now - 100, b"x") for i in ids])
    claims, fence = Claims(store), lead(store, 1)
    sizes = [len(claim(claims, fence, limit=10, lease_ms=1000).entries) for _ in range(4)]
    assert sizes == [10, 10, 5, 0]


def test_a_stale_leader_cannot_claim(store: Store, r: redis.Redis) -> None:
    ids = ids_in_shard(store, 2, 3)
    store.schedule_many([NewEntry(i, redis_ms(r) - 1, b"x") for i in ids])
    old = lead(store, 2, "old", ttl=0.3)
    time.sleep(0.4)  # the old lease expires; a new leader takes the shard
    new = lead(store, 2, "new")
    assert new.epoch == old.epoch + 1
    claims = Claims(store)
    assert claim(claims, old, limit=10, lease_ms=1000).fenced
    assert claims.reap(old, limit=10) is None
    assert r.zcard(store.keys.shard(2).due) == 3  # the refused claim moved nothing
    assert len(claim(claims, new, limit=10, lease_ms=1000).entries) == 3


def test_ack_forgets_published_entries(store: Store, r: redis.Redis) -> None:
    ids = ids_in_shard(store, 0, 2)
    store.schedule_many([NewEntry(i, redis_ms(r) - 1, b"x") for i in ids])
    claims = Claims(store)
    result = claim(claims, lead(store, 0), limit=10, lease_ms=1000)
    assert claims.ack(result.entries) == 2
    sk = store.keys.shard(0)
    assert r.zcard(sk.inflight) == 0 and r.hlen(sk.msg) == 0
    assert claims.ack(result.entries) == 0  # twice (a lost reply): nothing more happens


def test_a_retry_scheduled_before_the_ack_survives_it(store: Store, r: redis.Redis) -> None:
    # The worker can run a task and schedule its retry (same id) before the dispatcher acks.
    (tid,) = ids_in_shard(store, 0, 1)
    store.schedule(tid, redis_ms(r) - 1, b"first")
    claims = Claims(store)
    first = claim(claims, lead(store, 0), limit=10, lease_ms=1000)
    assert store.schedule(tid, redis_ms(r) + 60_000, b"retry").status == "scheduled"
    claims.ack(first.entries)
    entry = store.get(tid)
    assert entry is not None and (entry.state, entry.payload) == ("pending", b"retry")


def test_a_replayed_ack_cannot_touch_a_later_claim_of_the_same_id(store: Store, r: redis.Redis) -> None:
    # Published, acked, then a retry of the same id is claimed: the first ack arriving again (a
    # lost reply, a replayed pipeline) must leave the second claim in flight with its message.
    (tid,) = ids_in_shard(store, 0, 1)
    fence, claims = lead(store, 0), Claims(store)
    store.schedule(tid, redis_ms(r) - 1, b"first")
    first = claim(claims, fence, limit=10, lease_ms=1000)
    claims.ack(first.entries)
    store.schedule(tid, redis_ms(r) - 1, b"retry")
    time.sleep(0.002)
    second = claim(claims, fence, limit=10, lease_ms=1000)
    assert [e.task_id for e in second.entries] == [tid]
    assert claims.ack(first.entries) == 0
    entry = store.get(tid)
    assert entry is not None and (entry.state, entry.payload) == ("inflight", b"retry")
    assert claims.ack(second.entries) == 1 and store.get(tid) is None


def test_release_returns_entries_at_their_due_time(store: Store, r: redis.Redis) -> None:
    ids = ids_in_shard(store, 3, 2)
    due = redis_ms(r) - 50
    store.schedule_many([NewEntry(i, due, b"x") for i in ids])
    claims = Claims(store)
    result = claim(claims, lead(store, 3), limit=10, lease_ms=60_000)
    assert claims.release(result.entries) == 2
    assert dict(r.zrange(store.keys.shard(3).due, 0, -1, withscores=True)) == {i.encode(): due for i in ids}
    assert claims.release(result.entries) == 0  # only what is still in flight


def test_reap_returns_expired_leases_to_due(store: Store, r: redis.Redis) -> None:
    ids = ids_in_shard(store, 0, 3)
    store.schedule_many([NewEntry(i, redis_ms(r) - 1, b"x") for i in ids])
    claims, fence = Claims(store), lead(store, 0)
    claim(claims, fence, limit=10, lease_ms=100)
    assert claims.reap(fence, limit=10) == []
    time.sleep(0.15)
    assert sorted(claims.reap(fence, limit=10) or []) == sorted(ids)
    assert len(claim(claims, fence, limit=10, lease_ms=100).entries) == 3


def test_an_earlier_schedule_wakes_the_leader_once(store: Store, r: redis.Redis) -> None:
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.wake_channel)
    pubsub.get_message(timeout=1)
    now = redis_ms(r)
    far, a, b, c = ids_in_shard(store, 1, 4)
    store.schedule(far, now + 3_600_000, b"x")
    # The claim arms the wake key: the leader claims again in 10 s (its longest wait) at the latest.
    claim(Claims(store), lead(store, 1), limit=10, lease_ms=1000, max_wait_ms=10_000)
    armed = int(r.get(store.keys.shard(1).wake) or 0)
    assert now + 10_000 <= armed <= redis_ms(r) + 10_000
    store.schedule(a, now + 20_000, b"x")  # later than that: seen then, no message
    assert pubsub.get_message(timeout=0.2) is None
    store.schedule(b, now + 1_000, b"x")
    message = pubsub.get_message(timeout=1)
    assert message is not None and message["data"] == b"1"
    store.schedule(c, now + 500, b"x")  # the leader is already woken: no second message
    assert pubsub.get_message(timeout=0.2) is None
    pubsub.close()


def test_the_wake_key_follows_the_earliest_entry_and_a_full_batch_clears_it(store: Store, r: redis.Redis) -> None:
    now = redis_ms(r)
    ids = ids_in_shard(store, 2, 4)
    store.schedule_many([NewEntry(i, now - 10, b"x") for i in ids[:3]] + [NewEntry(ids[3], now + 2_000, b"x")])
    claims, fence, wake = Claims(store), lead(store, 2), store.keys.shard(2).wake
    claim(claims, fence, limit=3, lease_ms=1000, max_wait_ms=60_000)
    assert r.get(wake) is None  # a full batch: the leader claims again at once
    claim(claims, fence, limit=3, lease_ms=1000, max_wait_ms=60_000)
    assert int(r.get(wake) or 0) == now + 2_000  # the earliest entry, sooner than the longest wait


def test_big_batches_are_claimed_and_acked_in_slices(store: Store, r: redis.Redis) -> None:
    # More ids than Lua's unpack() takes at once (the scripts slice them by 1000).
    ids = ids_in_shard(store, 3, 2500, prefix="big")
    store.schedule_many([NewEntry(i, redis_ms(r) - 1, b"x") for i in ids])
    claims = Claims(store)
    result = claim(claims, lead(store, 3), limit=5000, lease_ms=60_000)
    assert sorted(e.task_id for e in result.entries) == sorted(ids)
    assert claims.ack(result.entries) == 2500
    sk = store.keys.shard(3)
    assert (r.zcard(sk.due), r.zcard(sk.inflight), r.hlen(sk.msg)) == (0, 0, 0)


def test_a_reaped_entry_keeps_its_idempotency_key(store: Store, r: redis.Redis) -> None:
    shard = store.keys.shard_of("refund:7")
    store.schedule("first", redis_ms(r) - 1, b"x", idempotency_key="refund:7")
    fence, claims = lead(store, shard), Claims(store)
    claim(claims, fence, limit=10, lease_ms=50)
    time.sleep(0.1)
    assert claims.reap(fence, limit=10) == ["first"]  # the dispatcher died before acking
    again = store.schedule("second", redis_ms(r) + 60_000, b"y", idempotency_key="refund:7")
    assert (again.status, again.task_id) == ("duplicate_key", "first")

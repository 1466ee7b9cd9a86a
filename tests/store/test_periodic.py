"""The periodic scripts on a real Redis with real leases: fencing, compare-and-set, schedule's
semantics for occurrences, wake-ups, the overlap mark, paging (I3, I4, I11)."""

from __future__ import annotations

import time

import redis

from celery_zset_scheduler.dispatch.leadership import Leadership
from celery_zset_scheduler.model.ids import member
from celery_zset_scheduler.model.periodic import occurrence_id
from celery_zset_scheduler.store.claims import Fence
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.periodic import RECORDS_CHUNK, Firing, Occurrence, PeriodicStore, write_call

from ..support.tools import command_stats
from .test_claims import lead, redis_ms


def names_in_shard(store: Store, shard: int, n: int, prefix: str = "e") -> list[str]:
    out, i = [], 0
    while len(out) < n:
        if store.keys.shard_of(f"{prefix}{i}") == shard:
            out.append(f"{prefix}{i}")
        i += 1
    return out


def subscribed(r: redis.Redis, store: Store) -> redis.client.PubSub:
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.wake_channel)
    pubsub.get_message(timeout=1)  # the subscription's confirmation
    return pubsub


def put(ps: PeriodicStore, name: str, look_ms: int | None, state: bytes = b"s0", template: bytes = b"TPL") -> None:
    ok, _ = ps.write(name, mode="new", expected=None, definition=b"def:" + name.encode(), template=template,
                     state=state, look_ms=look_ms, plan=b"plan")
    assert ok


def due(ps: PeriodicStore, fence: Fence, limit: int = 100, timeout_ms: int = 60_000) -> object:
    return ps.due_many([fence], limit=limit, max_wait_ms=5_000, wake_ttl_ms=15_000,
                       overlap_timeout_ms=timeout_ms)[fence.shard]


def test_the_leader_reads_only_due_entries_and_fires_them_with_their_next_state(store: Store, r: redis.Redis) -> None:
    ps = PeriodicStore(store)
    now = redis_ms(r)
    a, b, c = names_in_shard(store, 1, 3)
    put(ps, a, now - 10)
    put(ps, b, now - 5)
    put(ps, c, now + 60_000)
    fence = lead(store, 1)
    read = due(ps, fence)
    assert not read.fenced and [e.name for e in read.entries] == [a, b]  # type: ignore[attr-defined]
    assert [e.plan for e in read.entries] == [b"plan", b"plan"]  # type: ignore[attr-defined]  # not the definition
    assert read.next_look_ms == now + 60_000  # type: ignore[attr-defined]
    firings = [Firing(a, b"s0", b"", b"s1", now + 1_000, [Occurrence("occ-a", now - 10)]),
               Firing(b, b"s0", b"", b"s1", None, [Occurrence("occ-b", now - 5, b"OWN")])]
    assert ps.fire_many({fence: firings}) == {1: [1, 1]}
    sk = store.keys.shard(1)
    assert r.zscore(sk.due, "occ-a") == now - 10 and r.hget(sk.msg, "occ-a") == b"TPL"  # the template
    assert r.hget(sk.msg, "occ-b") == b"OWN"
    assert r.hget(sk.periodic_state, a) == b"s1" and r.zscore(sk.periodic_next, a) == now + 1_000
    assert r.zscore(sk.periodic_next, b) is None  # no next look: finished


def test_fire_is_fenced_and_a_compare_and_set(store: Store, r: redis.Redis) -> None:
    ps = PeriodicStore(store)
    now = redis_ms(r)
    a, b = names_in_shard(store, 0, 2)
    put(ps, a, now - 10)
    put(ps, b, now - 10)
    fence = lead(store, 0, ttl=0.5)
    stale = Fence(0, "not-the-token", fence.epoch)
    plan = [Firing(a, b"s0", b"", b"s1", now + 60_000, [Occurrence("occ-1", now)])]
    assert ps.fire_many({stale: plan}) == {0: None}  # a deposed leader writes nothing
    assert r.zcard(store.keys.shard(0).due) == 0
    # Two passes (or two leaders that both think they lead) planned from the same state: one wins.
    assert ps.fire_many({fence: plan}) == {0: [1]}
    assert ps.fire_many({fence: plan}) == {0: [-1]}  # refused: the state moved on
    assert r.zcard(store.keys.shard(0).due) == 1
    # Within one call, a refused group does not stop the others.
    mixed = [Firing(a, b"s0", b"", b"s2", None, [Occurrence("occ-2", now)]),
             Firing(b, b"s0", b"", b"s1", None, [Occurrence("occ-3", now)])]
    assert ps.fire_many({fence: mixed}) == {0: [-1, 1]}
    # After the lease expired and another dispatcher took it, the old fence is refused.
    time.sleep(0.6)
    other = Leadership(store, "m2", 5.0, pinned={0})
    other.beat()
    assert ps.fire_many({fence: [Firing(b, b"s1", b"", b"s9", None, [Occurrence("occ-4", now)])]}) == {0: None}
    assert due(ps, fence).fenced  # type: ignore[attr-defined]


def test_an_occurrence_already_pending_is_not_stored_twice_and_wakes_the_claim(store: Store, r: redis.Redis) -> None:
    ps = PeriodicStore(store)
    now = redis_ms(r)
    (a,) = names_in_shard(store, 2, 1)
    sk = store.keys.shard(2)
    occurrence = [Occurrence("occ", now + 5_000)]
    ok, _ = ps.write(a, mode="new", expected=None, definition=b"d", template=b"T", state=b"s0", look_ms=now,
                     occurrences=occurrence)
    assert ok and r.zscore(sk.due, "occ") == now + 5_000
    fence = lead(store, 2)
    r.set(sk.wake, now + 60_000)  # the leader plans to claim in a minute
    pubsub = subscribed(r, store)
    assert ps.fire_many({fence: [Firing(a, b"s0", b"", b"s1", None, occurrence)]}) == {2: [0]}  # same id: no-op
    assert r.zscore(sk.due, "occ") == now + 5_000 and r.hget(sk.periodic_state, a) == b"s1"
    assert ps.fire_many({fence: [Firing(a, b"s1", b"", b"s2", None, [Occurrence("new", now)])]}) == {2: [1]}
    message = pubsub.get_message(timeout=2)
    assert message is not None and message["data"] == b"2"  # due before the planned claim: woken


def test_writes_wake_the_periodic_leader_only_when_earlier_than_its_plan(store: Store, r: redis.Redis) -> None:
    ps = PeriodicStore(store)
    now = redis_ms(r)
    a, b = names_in_shard(store, 3, 2)
    fence = lead(store, 3)
    assert due(ps, fence).entries == []  # type: ignore[attr-defined]
    planned = int(r.get(store.keys.shard(3).periodic_wake) or 0)
    assert now <= planned <= redis_ms(r) + 5_000  # nothing scheduled: it looks again within max_wait
    pubsub = subscribed(r, store)
    put(ps, a, planned + 60_000)
    assert pubsub.get_message(timeout=0.5) is None  # later than the planned look: nothing to say
    put(ps, b, now)
    message = pubsub.get_message(timeout=2)
    assert message is not None and message["data"] == b"p3"


def test_the_overlap_mark_counts_while_pending_or_recent_and_only_its_own_end_clears_it(
    store: Store, r: redis.Redis,
) -> None:
    ps = PeriodicStore(store)
    now = redis_ms(r)
    (a,) = names_in_shard(store, 0, 1)
    sk = store.keys.shard(0)
    put(ps, a, now - 10)
    fence = lead(store, 0)
    firing = Firing(a, b"s0", b"", b"s1", now - 5, [Occurrence("occ-1", now + 60_000)], mark="f")
    assert ps.fire_many({fence: [firing]}) == {0: [1]}
    (entry,) = due(ps, fence, timeout_ms=10).entries  # type: ignore[attr-defined]
    assert entry.mark.startswith(b"occ-1|") and entry.outstanding_until is not None  # pending: outstanding
    r.zrem(sk.due, "occ-1")  # handed over: outstanding only until the timeout since it was stored
    time.sleep(0.05)
    (entry,) = due(ps, fence, timeout_ms=10).entries  # type: ignore[attr-defined]
    assert entry.outstanding_until is None
    (entry,) = due(ps, fence, timeout_ms=60_000).entries  # type: ignore[attr-defined]
    assert entry.outstanding_until is not None
    # A buffered one waits behind it: flag the mark; the end of another occurrence changes nothing.
    assert ps.fire_many({fence: [Firing(a, b"s1", entry.mark, b"s2", now + 60_000, [], mark="b")]}) == {0: [0]}
    assert r.hget(sk.periodic_run, a).endswith(b"|b")  # type: ignore[union-attr]
    assert not ps.done(a, "occ-0")
    pubsub = subscribed(r, store)
    r.delete(sk.periodic_wake)
    r.set(sk.periodic_wake, now + 60_000)
    assert ps.done(a, "occ-1")
    assert r.hget(sk.periodic_run, a) is None
    assert r.zscore(sk.periodic_next, a) <= redis_ms(r)  # type: ignore[operator]  # due now: the buffered one
    message = pubsub.get_message(timeout=2)
    assert message is not None and message["data"] == b"p0"


def test_write_modes_and_remove(store: Store, r: redis.Redis) -> None:
    ps = PeriodicStore(store)
    (a,) = names_in_shard(store, 1, 1)
    put(ps, a, None)
    assert ps.write(a, mode="new", expected=None, definition=b"x", template=None, state=b"s", look_ms=None) == (
        False, b"s0")
    assert ps.write(a, mode="cas", expected=b"other", definition=b"x", template=None, state=b"s",
                    look_ms=None) == (False, b"s0")
    assert ps.write(a, mode="cas", expected=b"s0", definition=b"x", template=None, state=b"s1", look_ms=5)[0]
    record = ps.read(a)
    assert (record.definition, record.state, record.template, record.look_ms) == (b"x", b"s1", b"TPL", 5)
    assert ps.write(a, mode="any", expected=None, definition=None, template=None, state=b"", look_ms=None)[0]
    sk = store.keys.shard(1)
    assert not any(r.exists(k) for k in (sk.periodic_names, sk.periodic_defs, sk.periodic_state, sk.periodic_tpl,
                                          sk.periodic_next, sk.periodic_plan))


def test_names_are_paged_across_shards_in_byte_order_with_bounded_reads(store: Store, r: redis.Redis) -> None:
    ps = PeriodicStore(store)
    names = [f"job-{i:03d}" for i in range(57)] + ["Ä-umlaut", "a b"]
    ps.write_many([write_call(store.keys, n, mode="new", expected=None, definition=b"d", template=b"t",
                              state=b"s", look_ms=None) for n in names])
    seen: list[str] = []
    after = None
    while True:
        page = ps.names_after(after, 10)
        assert len(page) <= 10
        seen += page
        if len(page) < 10:
            break
        after = page[-1]
    assert seen == sorted(names, key=lambda n: n.encode())
    counts = ps.counts()
    assert sum(c.entries for c in counts) == len(names) and sum(c.scheduled for c in counts) == 0


def test_records_are_read_with_three_hmgets_per_shard_in_bounded_chunks(store: Store, r: redis.Redis) -> None:
    ps = PeriodicStore(store)
    names = [f"rec-{i:04d}" for i in range(4_500)]  # over RECORDS_CHUNK per shard
    ps.write_many([write_call(store.keys, n, mode="new", expected=None, definition=b"d:" + n.encode(), template=b"t",
                              state=b"s:" + n.encode(), look_ms=None, plan=b"p:" + n.encode()) for n in names])
    wanted = [*names[:3], "rec-missing", names[1], *names[3:]]  # a missing name, a repeated one
    calls = sum(int(v["calls"]) for k, v in command_stats(r).items() if k == "cmdstat_hmget")
    found = ps.records(wanted)
    after = sum(int(v["calls"]) for k, v in command_stats(r).items() if k == "cmdstat_hmget")
    assert list(found) == list(dict.fromkeys(wanted)) and found["rec-missing"] == (None, None, None)
    assert all(found[n] == (b"d:" + n.encode(), b"p:" + n.encode(), b"s:" + n.encode()) for n in names)
    per_shard = [sum(1 for n in names if store.keys.shard_of(n) == s) for s in range(store.shards)]
    assert max(per_shard) > RECORDS_CHUNK
    assert after - calls == 3 * sum(-(-(k + (1 if s == store.keys.shard_of("rec-missing") else 0)) // RECORDS_CHUNK)
                                    for s, k in enumerate(per_shard))
    assert ps.records([]) == {}


def test_the_sync_lock_is_exclusive_and_only_its_holder_frees_it(store: Store) -> None:
    ps = PeriodicStore(store)
    assert ps.lock_sync("a", 5_000)
    assert not ps.lock_sync("b", 5_000)
    ps.unlock_sync("b")
    assert not ps.lock_sync("b", 5_000)
    ps.unlock_sync("a")
    assert ps.lock_sync("b", 5_000)


def test_the_leader_reads_at_most_its_batch(store: Store, r: redis.Redis) -> None:
    ps = PeriodicStore(store)
    now = redis_ms(r)
    names = names_in_shard(store, 0, 30)
    ps.write_many([write_call(store.keys, n, mode="new", expected=None, definition=b"d", template=b"t",
                              state=b"s", look_ms=now - 100 + i) for i, n in enumerate(names)])
    fence = lead(store, 0)
    read = due(ps, fence, limit=12)
    assert [e.name for e in read.entries] == names[:12]  # type: ignore[attr-defined]
    assert r.get(store.keys.shard(0).periodic_wake) is None  # a full batch: it reads again at once


def test_big_catch_ups_are_split_into_bounded_calls_and_answered_in_order(store: Store, r: redis.Redis) -> None:
    ps = PeriodicStore(store)
    now = redis_ms(r)
    names = names_in_shard(store, 2, 3)
    for n in names:
        put(ps, n, now - 10)
    fence = lead(store, 2)
    firings = [Firing(n, b"s0", b"", b"s1", None, [Occurrence(f"{n}-{k}", now - k) for k in range(1500)])
               for n in names]
    assert ps.fire_many({fence: firings}) == {2: [1500, 1500, 1500]}
    assert r.zcard(store.keys.shard(2).due) == 4500


def test_every_key_of_an_entry_is_in_its_shard_s_hash_slot(store: Store) -> None:
    from celery_zset_scheduler.store.periodic import (
        PERIODIC_DONE,
        PERIODIC_DUE,
        PERIODIC_FIRE,
        PERIODIC_READ,
        PERIODIC_WRITE,
    )

    for name in ("report", "customer-000042", "Ä b"):
        sk = store.keys.shard(store.keys.shard_of(name))
        tag = f"{{zt:{sk.shard}}}"
        for script in (PERIODIC_DUE, PERIODIC_FIRE, PERIODIC_WRITE, PERIODIC_READ, PERIODIC_DONE):
            # Every KEYS entry of every periodic script is one of the shard's own keys: one slot.
            assert all(getattr(sk, key).startswith(tag) for key in script.keys), script.name


def test_occurrences_are_stored_packed_their_mark_names_the_id_and_a_text_one_is_not_stored_twice(
    store: Store, r: redis.Redis,
) -> None:
    ps = PeriodicStore(store)
    now = redis_ms(r)
    (a,) = names_in_shard(store, 2, 1)
    sk = store.keys.shard(2)
    put(ps, a, now - 10)
    fence = lead(store, 2)
    occurrence = occurrence_id(a, now)
    assert ps.fire_many({fence: [Firing(a, b"s0", b"", b"s1", now - 5, [Occurrence(occurrence, now + 60_000)],
                                        mark="f")]}) == {2: [1]}
    assert r.zscore(sk.due, member(occurrence)) == now + 60_000 and r.zscore(sk.due, occurrence) is None
    time.sleep(0.05)
    (entry,) = due(ps, fence, timeout_ms=10).entries  # type: ignore[attr-defined]
    # outstanding past the timeout: the packed occurrence its text mark names is still pending
    assert entry.mark.startswith(occurrence.encode() + b"|") and entry.outstanding_until is not None
    # An occurrence an older version stored under its text (format 4) is pending: not stored again,
    # and its mark still counts it as outstanding.
    older = occurrence_id(a, now + 1)
    r.zadd(sk.due, {older: now + 1})
    r.hset(sk.msg, older, b"OLD")
    fired = ps.fire_many({fence: [Firing(a, b"s1", entry.mark, b"s2", now - 5, [Occurrence(older, now + 1)],
                                         mark="f")]})
    assert fired == {2: [0]} and r.zscore(sk.due, member(older)) is None and r.hget(sk.msg, older) == b"OLD"
    r.zrem(sk.due, member(occurrence))
    time.sleep(0.05)
    (entry,) = due(ps, fence, timeout_ms=10).entries  # type: ignore[attr-defined]
    assert entry.mark.startswith(older.encode() + b"|") and entry.outstanding_until is not None
    assert ps.done(a, older)

"""The store against a real Redis: scheduling, cancelling, lookups, paging, meta checks."""

from __future__ import annotations

import time

import pytest
import redis

from celery_zset_scheduler.errors import ShardCountMismatch
from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import wait_for
from ..support.tools import command_stats, counts, earliest, iter_shard, pending, reset_stats

NOW = int(time.time() * 1000)


def test_schedule_stores_one_entry_per_id(store: Store, r: redis.Redis) -> None:
    first = store.schedule("a", NOW + 1000, b"one")
    again = store.schedule("a", NOW + 5000, b"two")
    assert (first.status, again.status) == ("scheduled", "exists")
    entry = store.get("a")
    assert entry is not None
    assert (entry.state, entry.score_ms, entry.payload) == ("pending", NOW + 1000, b"one")
    sk = store.keys.shard(store.keys.shard_of("a"))
    assert r.zcard(sk.due) == 1 and r.hlen(sk.msg) == 1


def test_replace_overwrites_a_pending_entry(store: Store) -> None:
    store.schedule("a", NOW + 1000, b"one")
    assert store.schedule("a", NOW + 9000, b"two", replace=True).status == "replaced"
    entry = store.get("a")
    assert entry is not None and (entry.score_ms, entry.payload) == (NOW + 9000, b"two")


def test_keys_are_one_hash_slot_per_shard(store: Store) -> None:
    sk = store.keys.shard(3)
    for key in (sk.due, sk.msg, sk.big, sk.shared, sk.inflight, sk.lock, sk.epoch, sk.wake, sk.pending_keys,
                sk.id_keys):
        assert key.startswith("{zt:3}:")


def test_schedule_many_spreads_over_shards_in_one_round_trip(store: Store) -> None:
    entries = [NewEntry(f"id-{i}", NOW + i, b"x") for i in range(2000)]
    results = store.schedule_many(entries)
    assert [r.status for r in results] == ["scheduled"] * 2000
    shards = counts(store)
    assert sum(c.pending for c in shards) == 2000
    assert all(c.pending > 300 for c in shards)  # crc32 spreads ids evenly
    again = store.schedule_many([*entries[:10], NewEntry("new", NOW, b"y")])
    assert [r.status for r in again] == ["exists"] * 10 + ["scheduled"]


def test_a_chunk_takes_each_id_once_and_overwrites_only_in_flight_messages(store: Store, r: redis.Redis) -> None:
    store.schedule("old", NOW + 1, b"kept")
    results = store.schedule_many([NewEntry("a", NOW, b"1"), NewEntry("a", NOW + 5, b"2"), NewEntry("old", NOW, b"x")])
    assert [x.status for x in results] == ["scheduled", "exists", "exists"]
    assert (store.get("a").payload, store.get("a").score_ms) == (b"1", NOW)  # type: ignore[union-attr]
    assert store.get("old").payload == b"kept"  # type: ignore[union-attr]
    # In flight only (claimed, not acked): scheduling it again is a new incarnation.
    sk = store.keys.shard(store.keys.shard_of("a"))
    r.zrem(sk.due, "a")
    r.zadd(sk.inflight, {"a": NOW + 30_000})
    assert store.schedule_many([NewEntry("a", NOW + 9, b"retry")])[0].status == "scheduled"
    assert (store.get("a").payload, store.get("a").state) == (b"retry", "pending")  # type: ignore[union-attr]


def test_add_many_streams_entries_over_shards_and_chunks(store: Store) -> None:
    entries = [(f"id-{i}", NOW + i, f"p{i}".encode()) for i in range(3000)]
    assert store.add_many(iter(entries + entries[:5])) == 3000  # repeated ids are not counted twice
    assert pending(store) == 3000
    assert store.add_many([("id-7", NOW, b"other"), ("fresh", NOW, b"f")]) == 1
    assert store.get("id-7").payload == b"p7"  # type: ignore[union-attr]
    assert store.get("fresh") is not None and store.add_many([]) == 0


def test_add_many_wakes_a_sleeping_leader(store: Store, r: redis.Redis) -> None:
    sk = store.keys.shard(store.keys.shard_of("early"))
    r.set(sk.wake, NOW + 60_000)
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.wake_channel)
    store.add_many([("early", NOW + 1000, b"x")])
    message = wait_for(lambda: pubsub.get_message(timeout=0.1), timeout=5, what="the wake-up")
    assert message is not None and int(message["data"]) == sk.shard
    pubsub.close()


def test_cancel(store: Store) -> None:
    store.schedule("a", NOW + 1000, b"x")
    store.schedule("b", NOW + 1000, b"x")
    assert store.cancel(["a", "zzz"]) == {"a": "cancelled", "zzz": "unknown"}
    assert store.get("a") is None and store.get("b") is not None
    assert store.cancel(["a"]) == {"a": "unknown"}


def test_reschedule_moves_only_pending_entries(store: Store) -> None:
    store.schedule("a", NOW + 1000, b"x")
    assert store.reschedule("a", NOW + 60_000) is True
    entry = store.get("a")
    assert entry is not None and entry.score_ms == NOW + 60_000
    assert store.reschedule("missing", NOW) is False


def test_idempotency_key_keeps_one_pending_entry(store: Store) -> None:
    first = store.schedule("a", NOW + 1000, b"x", idempotency_key="charge:7")
    second = store.schedule("b", NOW + 2000, b"y", idempotency_key="charge:7")
    assert first.status == "scheduled"
    assert (second.status, second.task_id) == ("duplicate_key", "a")
    assert store.get("b") is None
    # Found by id although it lives in the key's shard; cancelling frees the key.
    assert store.get("a") is not None
    assert store.cancel(["a"]) == {"a": "cancelled"}
    assert store.schedule("b", NOW + 2000, b"y", idempotency_key="charge:7").status == "scheduled"
    replaced = store.schedule("c", NOW + 3000, b"z", idempotency_key="charge:7", replace=True)
    assert replaced.status == "scheduled" and store.get("b") is None and store.get("c") is not None


def test_page_walks_every_entry_once_in_due_order_with_ties(store: Store) -> None:
    # Many equal scores: the cursor must neither skip nor repeat entries sharing a due time.
    entries = [NewEntry(f"id-{i:04d}", NOW + (i // 7), b"x") for i in range(300)]
    store.schedule_many(entries)
    for shard in range(store.shards):
        seen = list(iter_shard(store, shard, page_size=13))
        expected = sorted(
            (e.due_ms, e.task_id) for e in entries if store.keys.shard_of(e.task_id) == shard
        )
        assert [(p.due_ms, p.task_id) for p in seen] == expected


def test_page_filters_by_due_time_and_returns_payloads(store: Store) -> None:
    store.schedule_many([NewEntry(f"id-{i}", NOW + i * 1000, f"p{i}".encode()) for i in range(100)])
    shard = store.keys.shard_of("id-50")
    page = store.page(shard, min_due=NOW + 40_000, max_due=NOW + 60_000, limit=1000, with_payloads=True)
    assert page.cursor is None
    assert all(NOW + 40_000 <= e.due_ms <= NOW + 60_000 for e in page.entries)
    assert ("id-50", b"p50") in [(e.task_id, e.payload) for e in page.entries]


def test_page_is_bounded_by_its_limit(store: Store, r: redis.Redis) -> None:
    store.schedule_many([NewEntry(f"id-{i}", NOW, b"x") for i in range(5000)])
    reset_stats(r)
    page = store.page(0, limit=10)
    assert len(page.entries) == 10 and page.cursor is not None
    stats = command_stats(r)
    # No command reads a whole shard: a ZRANGEBYSCORE with LIMIT, no ZRANGE 0 -1 / HGETALL / SCAN.
    assert "cmdstat_hgetall" not in stats and "cmdstat_scan" not in stats and "cmdstat_keys" not in stats


def test_earliest_and_counts(store: Store) -> None:
    assert earliest(store) is None
    store.schedule("a", NOW + 5000, b"x")
    store.schedule("b", NOW + 2000, b"x")
    assert earliest(store) == NOW + 2000
    assert pending(store) == 2


def test_shard_count_mismatch_is_refused(redis_server: RedisServer, r: redis.Redis) -> None:
    Store(make_client(redis_server.url), KeySpace("zt", 4)).check_meta()
    other = Store(make_client(redis_server.url), KeySpace("zt", 8))
    with pytest.raises(
        ShardCountMismatch, match="has 4 shards but this client is configured with zset_scheduler_shards=8"
    ):
        other.schedule("a", NOW, b"x")
    assert pending(other) == 0


def test_format_version_mismatch_is_refused(store: Store, r: redis.Redis) -> None:
    r.hset("zt:meta", mapping={"shards": 4, "version": 99})
    with pytest.raises(ShardCountMismatch, match="format version 99"):
        store.check_meta()


def test_paging_goes_on_when_the_cursor_entry_is_gone(store: Store) -> None:
    # Entries sharing a due time, the cursor's one cancelled (or dispatched) between two pages.
    entries = [NewEntry(f"id-{i:03d}", NOW + (i // 10), b"x") for i in range(60)]
    store.schedule_many(entries)
    shard = 0
    expected = sorted((e.due_ms, e.task_id) for e in entries if store.keys.shard_of(e.task_id) == shard)
    seen: list[tuple[int, str]] = []
    after = None
    while True:
        page = store.page(shard, after=after, limit=3)
        seen += [(p.due_ms, p.task_id) for p in page.entries]
        if page.cursor is None:
            break
        store.cancel([page.cursor[1]])  # the cursor's own entry disappears
        after = page.cursor
    assert seen == expected


def test_lua_byte_order_matches_redis_member_order(store: Store, r: redis.Redis) -> None:
    # Members Lua's locale collation would order differently ('-' ignored, case folded).
    ids = ["a-b", "ab", "a_b", "B", "a", "Z-1", "z", "é", "a-c"]
    store.schedule_many([NewEntry(i, NOW, b"x") for i in ids])
    for shard in range(store.shards):
        in_shard = sorted((i for i in ids if store.keys.shard_of(i) == shard), key=lambda s: s.encode())
        after = None
        seen = []
        for _ in in_shard:
            page = store.page(shard, after=after, limit=1)
            seen += [p.task_id for p in page.entries]
            if page.entries:
                store.cancel([page.entries[0].task_id])
                after = (page.entries[0].due_ms, page.entries[0].task_id)
        assert seen == in_shard


def test_the_largest_page_with_messages(store: Store) -> None:
    # More ids than one Lua unpack() takes: the script reads the messages in slices.
    store.schedule_many([NewEntry(f"id-{i}", NOW + i, f"p{i}".encode()) for i in range(40_000)])
    shard = store.keys.shard_of("id-0")
    page = store.page(shard, limit=10_000, with_payloads=True)
    assert counts(store)[shard].pending > 9_000 and len(page.entries) == min(10_000, counts(store)[shard].pending)
    assert all(e.payload == f"p{e.task_id[3:]}".encode() for e in page.entries)


@pytest.mark.parametrize("previous", [6, 5, 4, 3, 2])
def test_a_store_of_a_previous_format_is_read_and_upgraded(store: Store, r: redis.Redis, previous: int) -> None:
    from celery_zset_scheduler.model.keys import FORMAT_VERSION

    r.hset(store.keys.meta, mapping={"shards": store.shards, "version": previous})
    sk = store.keys.shard(store.keys.shard_of("old"))
    r.zadd(sk.due, {"old": NOW})
    r.hset(sk.msg, "old", b"written by format 2")  # a value without the arrival stamp
    store.schedule("new", NOW, b"written now")
    assert int(r.hget(store.keys.meta, "version")) == FORMAT_VERSION  # upgraded on first use
    old, new = store.get("old"), store.get("new")
    assert old is not None and old.payload == b"written by format 2"
    assert new is not None and new.payload == b"written now"  # the stamp is the store's own
    assert r.hget(store.keys.shard(store.keys.shard_of("new")).msg, "new").startswith(b"\x01")


def test_a_store_of_an_unknown_format_is_refused(store: Store, r: redis.Redis) -> None:
    r.hset(store.keys.meta, mapping={"shards": store.shards, "version": 99})
    with pytest.raises(ShardCountMismatch, match="format version 99"):
        store.schedule("a", NOW, b"x")

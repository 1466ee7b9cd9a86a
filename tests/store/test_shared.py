"""Shared prefixes: stored once per shard, referred to by each entry, put back by every reader."""

from __future__ import annotations

import pytest
import redis

from celery_zset_scheduler.errors import PoisonMessage
from celery_zset_scheduler.model.codec import EMBED_SUFFIX, StoredMessage, decode, encode, shared_length
from celery_zset_scheduler.store.claims import Claims
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry
from celery_zset_scheduler.store.shared import ident

from ..support import old_codec
from ..support.tools import claim, iter_shard
from .test_claims import lead, redis_ms

REPLY_TO = "e2703fd9-5749-32a0-b37c-9056a99b5c8a"


def message(task_id: str, n: int, *, origin: str = "gen42@web-1.example.internal") -> StoredMessage:
    return StoredMessage(
        task_id=task_id, body=b"[[%d, %d], {}" % (n, n) + EMBED_SUFFIX,
        headers={"lang": "py", "task": "proj.add", "id": task_id, "shadow": None, "eta": None, "expires": None,
                 "group": None, "group_index": None, "retries": 0, "timelimit": [None, None], "root_id": task_id,
                 "parent_id": None, "argsrepr": f"({n}, {n})", "kwargsrepr": "{}", "origin": origin,
                 "ignore_result": False, "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {}},
        properties={"correlation_id": task_id, "reply_to": REPLY_TO, "delivery_mode": 2, "priority": 0},
        routing_key="celery", queue="celery",
    )


def stored_value(store: Store, r: redis.Redis, task_id: str) -> bytes:
    for shard in range(store.shards):
        value = r.hget(store.keys.shard(shard).msg, task_id)
        if value is not None:
            return bytes(value)
    raise AssertionError(f"{task_id} not stored")


def test_an_entry_refers_to_its_shards_shared_prefix_and_reads_back_whole(store: Store, r: redis.Redis) -> None:
    raw = encode(message("a", 1))
    store.schedule("a", 10**13, raw)
    shard = store.keys.shard_of("a")
    value = stored_value(store, r, "a")
    prefix = raw[:shared_length(raw)]
    assert value[11:12] == b"\x02" and value[12:20] == ident(prefix)  # after the 11-byte arrival stamp
    assert b"proj.add" not in value and b"web-1" not in value
    assert r.hgetall(store.keys.shard(shard).shared) == {ident(prefix): prefix}
    entry = store.get("a")
    assert entry is not None and entry.payload == raw
    assert [e.payload for e in store.page(shard, with_payloads=True).entries] == [raw]
    # Another process (a fresh Store, nothing cached) reads it too.
    fresh = Store(store.client, store.keys)
    found = fresh.get("a")
    assert found is not None and decode("a", found.payload or b"") == message("a", 1)


def test_bulk_and_pipelined_writes_share_one_prefix_per_shard(store: Store, r: redis.Redis) -> None:
    raws = {f"b{n}": encode(message(f"b{n}", n)) for n in range(600)}
    assert store.add_many((tid, 10**13 + n, raw) for n, (tid, raw) in enumerate(raws.items())) == 600
    more = {f"c{n}": encode(message(f"c{n}", n, origin="other@host")) for n in range(50)}
    store.schedule_many([NewEntry(tid, 10**13, raw) for tid, raw in more.items()])
    for shard in range(store.shards):
        assert r.hlen(store.keys.shard(shard).shared) == 2  # one per producer
        for entry in iter_shard(store, shard, with_payloads=True):
            assert entry.payload == {**raws, **more}[entry.task_id]


def test_claims_get_whole_messages(store: Store, r: redis.Redis) -> None:
    shard = store.keys.shard_of("x0")
    ids = [f"x{n}" for n in range(200) if store.keys.shard_of(f"x{n}") == shard]
    now = redis_ms(r)
    store.add_many((tid, now - 1, encode(message(tid, n))) for n, tid in enumerate(ids))
    fresh = Store(store.client, store.keys)  # a dispatcher that never saw the prefix
    result = claim(Claims(fresh), lead(fresh, shard), 1000, 30_000)
    assert sorted(e.task_id for e in result.entries) == sorted(ids)
    for e in result.entries:
        assert decode(e.task_id, e.payload) == message(e.task_id, ids.index(e.task_id))


def test_a_lost_prefix_is_written_again_by_the_next_entry(store: Store, r: redis.Redis) -> None:
    store.schedule("a", 10**13, encode(message("a", 1)))
    shard = store.keys.shard_of("a")
    r.delete(store.keys.shard(shard).shared)  # a restart without persistence, say
    tid = next(f"n{i}" for i in range(1000) if store.keys.shard_of(f"n{i}") == shard)
    store.schedule(tid, 10**13, encode(message(tid, 2)))
    assert r.hlen(store.keys.shard(shard).shared) == 1
    found = Store(store.client, store.keys).get(tid)
    assert found is not None and found.payload == encode(message(tid, 2))


def test_an_id_holding_another_prefix_makes_entries_inline(store: Store, r: redis.Redis) -> None:
    raw = encode(message("a", 1))
    prefix = raw[:shared_length(raw)]
    shard = store.keys.shard_of("a")
    r.hset(store.keys.shard(shard).shared, ident(prefix), b'[4,"another","prefix",null,2,"q",')
    store.schedule("a", 10**13, raw)
    assert stored_value(store, r, "a")[11:] == raw  # inline: the colliding slot is not used
    entry = store.get("a")
    assert entry is not None and entry.payload == raw


def test_an_entry_whose_prefix_is_gone_reads_as_poison(store: Store, r: redis.Redis) -> None:
    store.schedule("a", 10**13, encode(message("a", 1)))
    r.delete(store.keys.shard(store.keys.shard_of("a")).shared)
    entry = Store(store.client, store.keys).get("a")
    assert entry is not None and entry.payload is not None
    with pytest.raises(PoisonMessage):
        decode("a", entry.payload)


def test_entries_of_the_previous_format_read_as_they_were(store: Store, r: redis.Redis) -> None:
    msg = message("old", 7)
    old = old_codec.encode(msg)  # type: ignore[arg-type]
    shard = store.keys.shard_of("old")
    sk = store.keys.shard(shard)
    r.zadd(sk.due, {"old": 10**13})
    r.hset(sk.msg, "old", b"\x01" + bytes(10) + old)  # format 3: the stamp, then layout 2
    entry = store.get("old")
    assert entry is not None and entry.payload == old and decode("old", old) == msg


def test_entries_format_5_wrote_are_claimed_and_read_as_they_were(store: Store, r: redis.Redis) -> None:
    # Layout-4 values behind shared prefixes, written with format 4's frozen schedule script (the
    # same as format 5's for values), next to layout-5 entries of the same producer.
    import uuid

    from ..support import codec4
    from ..support.format4 import Format4Store

    old = Format4Store(r, store.keys)
    now = redis_ms(r)
    shard = 0
    ids = [i for i in (str(uuid.uuid4()) for _ in range(200)) if store.keys.shard_of(i) == shard][:12]
    old_ids, new_ids = ids[:6], ids[6:]
    for n, task_id in enumerate(old_ids):
        assert old.schedule(task_id, now - 1, codec4.encode(message(task_id, n))) == 1  # type: ignore[arg-type]
        assert stored_value(store, r, task_id)[11:12] == b"\x02"
    store.schedule_many([NewEntry(task_id, now - 1, encode(message(task_id, n))) for n, task_id in enumerate(new_ids)])
    assert r.hlen(store.keys.shard(shard).shared) == 2  # layout 4's prefix and layout 5's
    for task_id in old_ids:
        entry = store.get(task_id)
        assert entry is not None and entry.payload is not None and entry.payload.startswith(b"[4,")
    fresh = Store(store.client, store.keys)
    result = claim(Claims(fresh), lead(fresh, shard), 1000, 30_000)
    assert sorted(e.task_id for e in result.entries) == sorted(ids)
    for e in result.entries:
        assert decode(e.task_id, e.payload) == message(e.task_id, ids.index(e.task_id) % 6)

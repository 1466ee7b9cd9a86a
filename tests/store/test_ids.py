"""Task ids as members: canonical UUIDs packed to 17 bytes, every other id as its text, and a
store written by the previous version (format 4: every id as text) used as it is, without a
migration, next to the entries this version writes."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from celery_zset_scheduler.model.ids import member
from celery_zset_scheduler.model.keys import FORMAT_VERSION, KeySpace
from celery_zset_scheduler.ops.reshard import reshard
from celery_zset_scheduler.store import meta
from celery_zset_scheduler.store.claims import Claims
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.revokes import Revokes, load, revoked_among
from celery_zset_scheduler.store.schedule import NewEntry

from ..support.format4 import Format4Store
from ..support.tools import claim
from .test_claims import lead

LATER = 10**13


def members(r: Any, key: str) -> list[bytes]:
    return [bytes(m) for m in r.zrange(key, 0, -1)]


def uuids_in_shard(keys: KeySpace, shard: int, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        text = str(uuid.uuid4())
        if keys.shard_of(text) == shard:
            out.append(text)
    return out


def new_entry(task_id: str, due_ms: int, key: str | None = None) -> NewEntry:
    return NewEntry(task_id, due_ms, b"new " + task_id.encode(), key)


def old_store(r: Any, keys: KeySpace, ids: list[str], due_ms: int = LATER, **keyed: str) -> Format4Store:
    """``ids`` scheduled by format 4 (``keyed``: id -> its idempotency key)."""
    old = Format4Store(r, keys)
    for task_id in ids:
        assert old.schedule(task_id, due_ms, b"old " + task_id.encode(), keyed.get(task_id)) == 1
    return old


def test_a_canonical_uuid_is_stored_packed_and_reads_back_as_its_text(store: Store, r: Any) -> None:
    task_id = str(uuid.uuid4())
    assert store.schedule(task_id, LATER, b"payload").status == "scheduled"
    sk = store.keys.shard(store.keys.shard_of(task_id))
    assert members(r, sk.due) == [b"\xff" + uuid.UUID(task_id).bytes]
    assert [bytes(k) for k in r.hkeys(sk.msg)] == members(r, sk.due)
    found = store.get(task_id)
    assert found is not None and found.task_id == task_id and found.payload == b"payload"
    assert [e.task_id for e in store.page(sk.shard).entries] == [task_id]
    assert store.schedule(task_id, LATER, b"again").status == "exists"
    assert store.reschedule(task_id, LATER + 1) and store.cancel([task_id]) == {task_id: "cancelled"}
    assert r.zcard(sk.due) == 0 and r.hlen(sk.msg) == 0


def test_a_custom_id_and_an_uppercase_uuid_are_stored_as_they_are(store: Store, r: Any) -> None:
    upper = str(uuid.uuid4()).upper()
    for task_id in ("order-42", upper):
        assert store.schedule(task_id, LATER, b"p").created
        sk = store.keys.shard(store.keys.shard_of(task_id))
        assert task_id.encode() in members(r, sk.due)
        found = store.get(task_id)
        assert found is not None and found.task_id == task_id
    # The uppercase text is another id than its lowercase form (as Celery and Redis see it).
    assert store.get(upper.lower()) is None
    assert store.cancel(["order-42", upper]) == {"order-42": "cancelled", upper: "cancelled"}


def test_a_format_4_store_is_upgraded_and_its_text_members_kept(store: Store, r: Any) -> None:
    old_ids = uuids_in_shard(store.keys, 0, 3)
    old_store(r, store.keys, old_ids)
    store.check_meta()
    recorded = meta.read(r, store.keys)
    assert recorded.version == FORMAT_VERSION and recorded.text_ids and store.text_ids
    new_ids = uuids_in_shard(store.keys, 0, 3)
    assert all(res.created for res in store.schedule_many(
        [new_entry(i, LATER + n) for n, i in enumerate(new_ids)]))
    sk = store.keys.shard(0)
    stored = set(members(r, sk.due))
    assert stored == {i.encode() for i in old_ids} | {member(i) for i in new_ids}  # both, in one shard
    page = store.page(0, limit=100, with_payloads=True)
    assert sorted(e.task_id for e in page.entries) == sorted(old_ids + new_ids)
    for task_id in old_ids:
        found = store.get(task_id)
        assert found is not None and found.payload == b"old " + task_id.encode()
    # A new store starts without text members: its schedule calls skip the second look.
    fresh = Store(r, KeySpace("zt-fresh", 4))
    fresh.check_meta()
    assert not fresh.text_ids and not meta.read(r, fresh.keys).text_ids


@pytest.mark.parametrize("text_ids", [False, True])
def test_a_format_5_store_is_upgraded_and_keeps_what_it_knew_of_its_members(store: Store, r: Any,
                                                                             text_ids: bool) -> None:
    # A store created by format 5 (packed ids from the start), or one format 5 upgraded from 4.
    r.hset(store.keys.meta, mapping={"shards": store.shards, "version": 5, **({"text_ids": 1} if text_ids else {})})
    task_id = str(uuid.uuid4())
    store.check_meta()
    recorded = meta.read(r, store.keys)
    assert recorded.version == FORMAT_VERSION and recorded.text_ids is text_ids and store.text_ids is text_ids
    assert store.schedule(task_id, LATER, b"p").created
    assert members(r, store.keys.shard(store.keys.shard_of(task_id)).due) == [member(task_id)]
    # A client of format 5 refuses the store from now on (it reads 5 and the versions before).
    assert recorded.version not in (5, 4, 3, 2)


def test_every_lookup_by_id_finds_an_entry_format_4_wrote(store: Store, r: Any) -> None:
    a, b, c, d, keyed = uuids_in_shard(store.keys, 1, 5)
    old_store(r, store.keys, [a, b, c, d, keyed], **{keyed: "order-7"})
    sk = store.keys.shard(1)
    # Scheduling the same id again is a no-op (it is pending), whichever version wrote it...
    assert store.schedule(a, 1, b"other").status == "exists"
    assert [res.status for res in store.schedule_many([new_entry(a, 1), new_entry(b, 1)])] == ["exists"] * 2
    assert r.zcard(sk.due) == 4  # the keyed one lives in its key's shard
    # ...and replacing it leaves one entry, under the packed member.
    assert store.schedule_many([new_entry(b, 5)], replace=True)[0].status == "replaced"
    assert r.zscore(sk.due, b) is None and r.zscore(sk.due, member(b)) == 5
    assert r.hget(sk.msg, b) is None and r.zcard(sk.due) == 4
    # An idempotency key held by an old entry refuses a second entry, naming the old id.
    held = store.schedule(str(uuid.uuid4()), 1, b"x", idempotency_key="order-7")
    assert (held.status, held.task_id) == ("duplicate_key", keyed)
    assert store.schedule(keyed, 1, b"x", idempotency_key="order-7").status == "exists"
    # get, reschedule, cancel, revoke.
    found = store.get(c)
    assert found is not None and (found.state, found.score_ms, found.task_id) == ("pending", LATER, c)
    assert store.reschedule(c, LATER + 9) and r.zscore(sk.due, c) == LATER + 9
    assert r.zscore(sk.due, member(c)) is None  # moved, not duplicated
    assert store.cancel([c]) == {c: "cancelled"} and store.get(c) is None
    revokes = Revokes(store, ttl=60, most=1000)
    assert revokes.revoke([d]).status == {d: "cancelled"} and store.get(d) is None
    assert store.cancel([keyed]) == {keyed: "cancelled"}
    key_shard = store.keys.shard(store.keys.shard_of("order-7"))
    assert r.hget(key_shard.pending_keys, "order-7") is None and r.hget(key_shard.id_keys, keyed) is None


def test_claim_release_ack_and_reap_carry_the_member_as_stored(store: Store, r: Any) -> None:
    old_ids = uuids_in_shard(store.keys, 2, 3)
    old_store(r, store.keys, old_ids, due_ms=1)
    new_ids = uuids_in_shard(store.keys, 2, 3)
    for task_id in new_ids:
        store.schedule(task_id, 1, b"new")
    custom = "custom-id-in-shard-2"
    while store.keys.shard_of(custom) != 2:
        custom += "x"
    store.schedule(custom, 1, b"custom")
    everything = sorted([*old_ids, *new_ids, custom])
    claims = Claims(store)
    fence = lead(store, 2)
    sk = store.keys.shard(2)
    result = claim(claims, fence, 100, 60_000)
    assert sorted(e.task_id for e in result.entries) == everything
    assert claims.release(result.entries) == 7
    assert set(members(r, sk.due)) == {i.encode() for i in old_ids} | {member(i) for i in new_ids} | {custom.encode()}
    result = claim(claims, fence, 100, 1)  # a 1 ms lease: reaped once it has passed
    time.sleep(0.01)
    assert sorted(claims.reap(fence, 100) or []) == everything
    result = claim(claims, fence, 100, 60_000)
    assert sorted(e.task_id for e in result.entries) == everything
    assert claims.ack(result.entries) == 7
    assert r.zcard(sk.inflight) == 0 and r.hlen(sk.msg) == 0 and r.zcard(sk.due) == 0


def test_revokes_of_either_form_and_format_4_records_still_hold(store: Store, r: Any) -> None:
    pending, flying, recorded_before = uuids_in_shard(store.keys, 3, 3)
    old = old_store(r, store.keys, [pending, flying], due_ms=1)
    assert old.revoke(recorded_before) == 3  # a format-4 text record of an id not in the store
    claims = Claims(store)
    store.check_meta()  # the upgrade copies that record to the packed member
    fence = lead(store, 3)
    taken = claim(claims, fence, 1, 60_000)  # claims the old entry due first
    in_flight = taken.entries[0].task_id
    still_pending = pending if in_flight == flying else flying
    revokes = Revokes(store, ttl=60, most=1000)
    outcome = revokes.revoke([in_flight, still_pending])
    assert outcome.status == {in_flight: "inflight", still_pending: "cancelled"}
    assert claims.ack(taken.entries) == 0  # removed from inflight by the revoke: nothing to ack
    # The id revoked by format 4 is sent again by this version: the claim drops it.
    store.schedule(recorded_before, 1, b"again")
    again = claim(claims, fence, 100, 60_000)
    assert again.entries == [] and again.revoked == [recorded_before]
    records = load(r, store.keys)
    assert {in_flight, recorded_before} <= set(records.expiries)
    assert revoked_among(r, store.keys, {3: [in_flight, recorded_before, still_pending]}) == {
        (3, in_flight), (3, recorded_before)}


def test_a_reshard_moves_text_and_packed_members_as_they_are(store: Store, r: Any) -> None:
    old_ids = [str(uuid.uuid4()) for _ in range(40)]
    old_store(r, store.keys, old_ids, **{old_ids[0]: "key-0"})
    store.check_meta()
    new_ids = [str(uuid.uuid4()) for _ in range(40)]
    assert all(res.created for res in store.schedule_many([new_entry(i, LATER) for i in new_ids]))
    Revokes(store, ttl=60, most=1000).revoke(["not-held-" + str(n) for n in range(5)] + [str(uuid.uuid4())])
    report = reshard(store, 8, batch=7)
    assert report.moved["entries"] > 0
    moved = Store(r, KeySpace("zt", 8))
    moved.check_meta()
    for task_id in old_ids + new_ids:
        found = moved.get(task_id)
        assert found is not None and found.task_id == task_id
        sk = moved.keys.shard(found.shard)
        expected = task_id.encode() if task_id in old_ids else member(task_id)
        assert r.zscore(sk.due, expected) is not None
    held = moved.schedule(str(uuid.uuid4()), 1, b"x", idempotency_key="key-0")
    assert (held.status, held.task_id) == ("duplicate_key", old_ids[0])
    assert len(load(r, moved.keys).expiries) == 6

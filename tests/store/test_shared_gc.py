"""Collecting shared prefixes: what no value refers to goes, what one does stays readable throughout."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from celery_zset_scheduler.model.codec import decode, encode, shared_length
from celery_zset_scheduler.store.claims import Claims
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.shared import ident
from celery_zset_scheduler.store.shared_gc import Step, collect, step_call, steps, usage

from ..support.tools import claim, iter_shard
from .test_claims import ids_in_shard, lead, redis_ms
from .test_shared import message

FAR = 10**13


def prefix_of(task_id: str, origin: str) -> bytes:
    raw = encode(message(task_id, 1, origin=origin))
    return raw[:shared_length(raw)]


def schedule(store: Store, ids: list[str], origin: str, due_ms: int = FAR) -> dict[str, bytes]:
    raws = {tid: encode(message(tid, n, origin=origin)) for n, tid in enumerate(ids)}
    for tid, raw in raws.items():
        store.schedule(tid, due_ms, raw)
    return raws


def begin(store: Store, shard: int, count: int = 1000) -> Step:
    """Begin a cycle (period 0); the first look at a shard only starts its clock."""
    step = store.scripts.run(step_call(store.keys, shard, 0, count))
    if step.phase == "wait":
        step = store.scripts.run(step_call(store.keys, shard, 0, count))
    assert step.phase == "begun", step
    return step


def cycle(store: Store, shard: int, count: int = 1000) -> Step:
    """Run one whole cycle (period 0: begins at once); its last step."""
    done = collect(store.scripts, store.keys, shard, 0, count)
    if done[-1].phase == "wait":  # the first look at the shard
        done = collect(store.scripts, store.keys, shard, 0, count)
    assert done[-1].phase == "ended", done
    return done[-1]


def held(store: Store, r: redis.Redis, shard: int) -> dict[str, set[bytes]]:
    sk = store.keys.shard(shard)
    return {name: {bytes(k) for k in r.hkeys(key)}
            for name, key in (("live", sk.shared), ("old", sk.shared_old), ("grave", sk.shared_grave))}


def test_a_prefix_no_entry_refers_to_goes_after_two_cycles_and_one_in_use_stays(store: Store, r: redis.Redis) -> None:
    shard = 1
    keep, drop = ids_in_shard(store, shard, 20, "k"), ids_in_shard(store, shard, 20, "d")
    kept = schedule(store, keep, "gen1@web-1")
    schedule(store, drop, "gen2@web-2")  # a producer since restarted: its entries then ran
    a, b = ident(prefix_of("x", "gen1@web-1")), ident(prefix_of("x", "gen2@web-2"))
    assert held(store, r, shard)["live"] == {a, b}
    assert set(store.cancel(drop).values()) == {"cancelled"}

    first = cycle(store, shard)
    assert (first.first, first.second) == (0, 1)  # nothing deleted yet; one prefix no value referred to
    assert held(store, r, shard) == {"live": {a}, "old": set(), "grave": {b}}
    second = cycle(store, shard)
    assert (second.first, second.second) == (1, 0)
    assert held(store, r, shard) == {"live": {a}, "old": set(), "grave": set()}
    fresh = Store(store.client, store.keys)  # nothing cached
    assert {e.task_id: e.payload for e in iter_shard(fresh, shard, with_payloads=True)} == kept
    assert usage(r, store.keys, [shard])[0].live == 1


def test_every_python_reader_finds_a_prefix_a_cycle_set_aside(store: Store, r: redis.Redis) -> None:
    shard = 2
    ids = ids_in_shard(store, shard, 30, "p")
    now = redis_ms(r)
    raws = schedule(store, ids, "gen7@web-7", now - 1)
    assert begin(store, shard).first == 1
    assert held(store, r, shard)["live"] == set()  # every prefix now waits in shared_old
    fresh = Store(store.client, store.keys)
    entry = fresh.get(ids[0])
    assert entry is not None and entry.payload == raws[ids[0]]
    assert {e.task_id: e.payload for e in fresh.page(shard, with_payloads=True).entries} == raws
    # Past the end of this cycle the prefix is found in the grave, had no scan moved it back.
    sk = store.keys.shard(shard)
    r.rename(sk.shared_old, sk.shared_grave)
    result = claim(Claims(Store(store.client, store.keys)), lead(fresh, shard), 1000, 30_000)
    assert {e.task_id: e.payload for e in result.entries} == raws
    for e in result.entries:
        decode(e.task_id, e.payload)


def test_entries_written_while_a_cycle_scans_keep_their_prefix(store: Store, r: redis.Redis) -> None:
    shard = 0
    first = ids_in_shard(store, shard, 400, "f")
    schedule(store, first, "gen1@web-1")
    begin(store, shard, 20)
    assert store.scripts.run(step_call(store.keys, shard, 0, 20)).phase == "scanned"
    # A producer that restarted writes while the scan is under way: its prefix goes to `shared`
    # (HSETNX), and one written before the cycle began (web-2's) waits in `shared_old`.
    late = ids_in_shard(store, shard, 420, "l")[400:]
    sk = store.keys.shard(shard)
    r.hset(sk.shared_old, ident(prefix_of("x", "gen2@web-2")), prefix_of("x", "gen2@web-2"))
    writer = Store(store.client, store.keys)
    raws = schedule(writer, late, "gen2@web-2")
    while (step := store.scripts.run(step_call(store.keys, shard, 0, 20))).phase != "ended":
        assert step.phase == "scanned"
    cycle(store, shard)
    fresh = Store(store.client, store.keys)
    stored = {e.task_id: e.payload for e in iter_shard(fresh, shard, with_payloads=True)}
    assert {t: stored[t] for t in late} == raws
    assert held(store, r, shard)["live"] == {ident(prefix_of("x", "gen1@web-1")), ident(prefix_of("x", "gen2@web-2"))}


def test_a_cycle_begins_only_a_period_after_the_last_one(store: Store, r: redis.Redis) -> None:
    schedule(store, ids_in_shard(store, 3, 5, "w"), "gen1@web-1")
    first = collect(store.scripts, store.keys, 3, 60_000)  # the first look only starts the clock
    assert [(s.phase, s.first) for s in first] == [("wait", 60_000)]
    assert collect(store.scripts, store.keys, 3, 60_000)[-1].phase == "wait"
    assert collect(store.scripts, store.keys, 3, 0)[-1].phase == "ended"  # a shorter period: it may
    waited = collect(store.scripts, store.keys, 3, 60_000)
    assert len(waited) == 1 and waited[0].phase == "wait" and 55_000 < waited[0].first <= 60_000
    assert collect(store.scripts, store.keys, 3, 0)[-1].phase == "ended"


def test_the_scan_waits_while_a_reshard_moves_entries_and_starts_over_after(store: Store, r: redis.Redis) -> None:
    shard = 1
    ids = ids_in_shard(store, shard, 50, "m")
    raws = schedule(store, ids, "gen1@web-1")
    sk = store.keys.shard(shard)
    begin(store, shard, 10)
    assert store.scripts.run(step_call(store.keys, shard, 0, 10)).phase == "scanned"
    # A reshard's take moves an entry from `msg` to `moving_msg` (reshard_take-6.lua).
    r.zadd(sk.moving, {"m-moving": FAR})
    r.hset(sk.moving_msg, "m-moving", r.hget(sk.msg, ids[0]) or b"")
    for _ in range(3):
        assert store.scripts.run(step_call(store.keys, shard, 0, 10)).phase == "busy"
    assert r.hget(sk.shared_gc, "cursor") == b"0"
    r.delete(sk.moving)
    r.set(sk.layout, "8")  # the layout it ended with: the scan starts over once more
    assert store.scripts.run(step_call(store.keys, shard, 0, 10)).phase == "busy"
    assert cycle(store, shard, 10).second == 0
    assert cycle(store, shard, 10).first == 0  # the value in moving_msg kept its prefix
    fresh = Store(store.client, store.keys)
    assert {e.task_id: e.payload for e in iter_shard(fresh, shard, with_payloads=True)} == raws


def test_a_step_of_every_shard_at_once(store: Store, r: redis.Redis) -> None:
    for shard in range(4):
        schedule(store, ids_in_shard(store, shard, 3, f"s{shard}-"), "gen1@web-1")
    looked = steps(store.scripts, store.keys, range(4), 0)  # type: ignore[arg-type]
    assert [s.phase for s in looked if isinstance(s, Step)] == ["wait"] * 4
    results = steps(store.scripts, store.keys, range(4), 0)  # type: ignore[arg-type]
    assert [s.phase for s in results if isinstance(s, Step)] == ["begun"] * 4
    assert all(u.collecting and u.old == 1 and u.live == 0 for u in usage(r, store.keys, range(4)))  # type: ignore[arg-type]


def test_bad_collection_arguments_are_refused_before_any_call(store: Store) -> None:
    with pytest.raises(ValueError, match="period_ms >= 0"):
        step_call(store.keys, 0, -1)
    with pytest.raises(ValueError, match="count >= 1"):
        step_call(store.keys, 0, 0, 0)


def test_producers_restarting_while_cycles_run_back_to_back_lose_nothing(store: Store, r: redis.Redis) -> None:
    """Writers with new prefixes, claims that take and ack, and cycles 50 ms apart, all at once:
    every entry left reads whole, and what no entry refers to is deleted."""
    shard = 3
    stop = threading.Event()
    errors: list[BaseException] = []
    written: dict[str, bytes] = {}
    acked: set[str] = set()
    ended: list[Step] = []

    def produce(n: int) -> None:
        try:
            for generation in range(12):  # a restart per generation: a new origin, a new Store
                writer = Store(store.client, store.keys)
                ids = ids_in_shard(store, shard, 30, f"w{n}-{generation}-")
                written.update(schedule(writer, ids, f"gen{generation}@web-{n}", redis_ms(r) + 200))
                time.sleep(0.02)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def consume() -> None:
        claims = Claims(Store(store.client, store.keys))
        fence = lead(Store(store.client, store.keys), shard, member="consumer", ttl=30)
        try:
            while not stop.is_set():
                result = claim(claims, fence, 100, 30_000)
                for e in result.entries:
                    decode(e.task_id, e.payload)  # a lost prefix raises PoisonMessage here
                if result.entries:
                    claims.ack(result.entries)
                    acked.update(e.task_id for e in result.entries)
                time.sleep(0.01)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def gc() -> None:
        try:
            while not stop.is_set():
                ended.extend(s for s in collect(store.scripts, store.keys, shard, 50, 7) if s.phase == "ended")
                time.sleep(0.005)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(3)]
    helpers = [threading.Thread(target=consume), threading.Thread(target=gc)]
    for t in threads + helpers:
        t.start()
    for t in threads:
        t.join(60)
    deadline = time.monotonic() + 30
    while len(acked) < len(written) and time.monotonic() < deadline and not errors:
        time.sleep(0.05)
    stop.set()
    for t in helpers:
        t.join(30)
    assert not errors, errors
    assert acked == set(written)  # every entry was claimed whole and acked
    assert len(ended) >= 5 and sum(s.first for s in ended) > 0  # cycles ran, and deleted prefixes
    for _ in range(2):
        cycle(store, shard)
    assert held(store, r, shard) == {"live": set(), "old": set(), "grave": set()}


def test_a_scan_interrupted_by_a_redis_restart_starts_over_and_sets_nothing_in_use_aside() -> None:
    """HSCAN's cursor holds only within one server process (its hash seed is random): a scan
    resumed on a restarted server (AOF) starts over instead of skipping values."""
    from celery_zset_scheduler.model.keys import KeySpace
    from celery_zset_scheduler.store.client import make_client
    from celery_zset_scheduler.store.schedule import NewEntry
    from celery_zset_scheduler.testing import RedisServer

    with RedisServer(appendonly=True) as server:
        store = Store(make_client(server.url), KeySpace("zt", 1))
        ids = [f"r{n}" for n in range(3000)]  # each of its own producer: 3,000 prefixes
        raws = {tid: encode(message(tid, n, origin=f"gen{n}@host")) for n, tid in enumerate(ids)}
        store.schedule_many([NewEntry(tid, FAR, raw) for tid, raw in raws.items()])
        for _ in range(3):
            begin(store, 0, 200)
            for _ in range(7):
                assert store.scripts.run(step_call(store.keys, 0, 0, 200)).phase == "scanned"
            server.restart()
            store = Store(make_client(server.url), KeySpace("zt", 1))
            done = collect(store.scripts, store.keys, 0, 0, 200)
            assert done[-1].phase == "ended" and done[-1].second == 0, done[-1]  # nothing in use set aside
            assert usage(store.client, store.keys, [0])[0].grave == 0
        fresh = Store(make_client(server.url), KeySpace("zt", 1))
        assert {e.task_id: e.payload for e in iter_shard(fresh, 0, with_payloads=True)} == raws


def test_a_redis_user_that_may_not_run_info_collects_nothing_and_loses_nothing() -> None:
    from celery_zset_scheduler.model.keys import KeySpace
    from celery_zset_scheduler.store.client import make_client
    from celery_zset_scheduler.testing import RedisServer

    with RedisServer() as server:
        admin = server.client()
        admin.acl_setuser("app", enabled=True, passwords=["+secret"], keys=["*"], channels=["*"],
                          commands=["+@all", "-@dangerous"])
        url = f"redis://app:secret@127.0.0.1:{server.port}/0"
        store = Store(make_client(url), KeySpace("zt", 1))
        raws = schedule(store, [f"a{n}" for n in range(20)], "gen1@web-1")
        before = {k: admin.dump(k) for k in admin.keys("*")}
        for _ in range(3):
            assert store.scripts.run(step_call(store.keys, 0, 0)).phase == "refused"
        assert {k: admin.dump(k) for k in admin.keys("*")} == before
        assert {e.task_id: e.payload for e in iter_shard(store, 0, with_payloads=True)} == raws

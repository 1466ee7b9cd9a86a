"""The same-Redis fast path: what it pushes is what Kombu's Redis transport writes, field by field
(priority sub-queues, direct and topic bindings, global_keyprefix), and what it cannot rebuild or
route goes the generic way (real apps, dispatcher threads, one Redis database for both)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import kombu
import pytest
import redis
from celery import Celery
from kombu import Exchange, Queue

import celery_zset_scheduler
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.publishers.fast_routes import ROUTED_TYPES
from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher
from celery_zset_scheduler.dispatch.fastpath import FastHandOff
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.model.codec import encode
from celery_zset_scheduler.model.ids import member

from ..support.helpers import BROKER_DB, STORE_DB, AppFactory, built_message, publish_by_hand, wait_for

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
QUEUES = [Queue("celery"), Queue("q")]


def same_db(apps: AppFactory, **conf: Any) -> tuple[Celery, Celery]:
    """A plain Celery app and an installed one, both with the store's database as their broker."""
    conf = {"broker_url": apps.server.url_db(STORE_DB), "task_queues": QUEUES, **conf}
    return apps(install=False, **conf), apps(**conf)


def lists(client: redis.Redis, pattern: str = "*") -> dict[bytes, int]:
    """Every Redis list of the database and its length."""
    return {k: int(client.llen(k)) for k in client.scan_iter(pattern) if client.type(k) == b"list"}


def drain(client: redis.Redis) -> dict[bytes, list[dict[str, Any]]]:
    """Empty every Redis list of the database (Kombu's queues): key -> messages, oldest first."""
    out = {}
    for key in lists(client):
        out[key] = [json.loads(raw) for raw in reversed(client.lrange(key, 0, -1))]
        client.delete(key)
    return out


def fast_dispatch(apps: AppFactory, app: Celery, expected: int, **kwargs: Any) -> FastHandOff:
    """Run a dispatcher until ``expected`` entries went through the fast path's script."""
    dispatcher: Dispatcher = apps.dispatcher(app, **kwargs)
    handoff = dispatcher.handoff
    assert isinstance(handoff, FastHandOff)
    wait_for(lambda: handoff.pushed + handoff.left >= expected, what=f"{expected} entries dispatched")
    return handoff


def assert_same_envelope(mine: dict[str, Any], theirs: dict[str, Any], *, plain: bool) -> None:
    """Field by field, types included: delivery tags (and, from another app, reply_to) differ
    in value only; against plain Celery, the ETA moved aside and the store's own headers."""
    assert mine["body"] == theirs["body"]
    assert (mine["content-type"], mine["content-encoding"]) == (theirs["content-type"], theirs["content-encoding"])
    assert set(mine) == set(theirs)
    mh, th = dict(mine["headers"]), dict(theirs["headers"])
    if plain:
        assert mh.pop("eta") is None
        assert mh.pop("zset_eta", None) == th.pop("eta")
        mh.pop("zset_first_failure", None)  # the sender's own header, published by every path
    assert mh == th
    assert json.dumps(mh, sort_keys=True) == json.dumps(th, sort_keys=True)  # 1 is not 1.0, [] is not {}
    mp, tp = mine["properties"], theirs["properties"]
    assert set(mp) == set(tp)
    differ = {"delivery_tag", "reply_to"} if plain else {"delivery_tag"}
    for key in set(tp) - differ:
        assert json.dumps(mp[key], sort_keys=True) == json.dumps(tp[key], sort_keys=True), key
    for key in differ:
        assert UUID.match(mp[key]) and UUID.match(tp[key]), key


def send_all(plain: Celery, ours: Celery, broker: redis.Redis, calls: list[dict[str, Any]], task: str = "t.record",
             ) -> tuple[dict[str, tuple[bytes, dict[str, Any]]], dict[str, tuple[bytes, dict[str, Any]]], list[str]]:
    """Plain Celery's messages for ``calls`` and the generic path's for what our app stored for
    them (both by task id: list key and envelope), and the ids, left in the store for the test."""
    eta = datetime.now(timezone.utc) + timedelta(seconds=0.5)
    for call in calls:
        plain.tasks[task].apply_async(**call, eta=eta)
    theirs = by_id(drain(broker))
    for call in calls:
        ours.tasks[task].apply_async(**call, eta=eta)
    stored = []
    for call in calls:
        found = celery_zset_scheduler.lookup(ours, call["task_id"])
        assert found is not None and found[1] is not None
        stored.append(found[1])
    report = publish_by_hand(KombuPublisher(ours), stored)
    assert report.published == len(stored) and report.error is None
    generic = by_id(drain(broker))
    return theirs, generic, [c["task_id"] for c in calls]


def dispatched(apps: AppFactory, app: Celery, broker: redis.Redis, ids: list[str]
               ) -> tuple[FastHandOff, dict[str, tuple[bytes, dict[str, Any]]]]:
    handoff = fast_dispatch(apps, app, len(ids))
    mine: dict[str, tuple[bytes, dict[str, Any]]] = {}
    wait_for(lambda: mine.update(by_id(drain(broker))) or len(mine) >= len(ids), what="the pushed messages")
    return handoff, mine


def by_id(found: dict[bytes, list[dict[str, Any]]]) -> dict[str, tuple[bytes, dict[str, Any]]]:
    return {m["headers"]["id"]: (key, m) for key, messages in found.items() for m in messages}


def field_cases() -> list[dict[str, Any]]:
    """Calls whose envelopes are compared with Kombu's field by field: a queue, custom and nested
    headers, a priority, non-ASCII and escaped text, retries, time limits, shadow, ignore_result."""
    return [
        {"kwargs": {"tag": "x"}, "task_id": str(uuid.uuid4()), "queue": "q", "headers": {"tenant": "acme"},
         "priority": 3},
        {"args": ("a", 7), "task_id": str(uuid.uuid4())},
        {"kwargs": {"tag": "ü€", "pad": "a/b\\c\"d"}, "task_id": str(uuid.uuid4()), "retries": 2,
         "time_limit": 30, "soft_time_limit": 20, "shadow": "nick", "ignore_result": True},
        {"args": (1,), "task_id": str(uuid.uuid4()), "headers": {"nested": {"a": [1, None, "x"], "b": {}}}},
    ]


def test_the_fast_path_writes_what_kombu_writes_field_by_field(apps: AppFactory) -> None:
    plain, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    calls = field_cases()
    theirs, generic, ids = send_all(plain, ours, broker, calls)
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert (handoff.pushed, handoff.left) == (len(ids), 0)
    assert set(mine) == set(theirs) == set(generic) == set(ids)
    for task_id in ids:
        assert mine[task_id][0] == theirs[task_id][0] == generic[task_id][0]  # the same list
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)
        assert_same_envelope(mine[task_id][1], theirs[task_id][1], plain=True)


@pytest.mark.parametrize("options", [
    {},  # Kombu's default steps [0, 3, 6, 9]
    {"queue_order_strategy": "priority", "priority_steps": list(range(10))},
    {"queue_order_strategy": "priority", "priority_steps": [0, 5], "sep": ":"},
    {"queue_order_strategy": "priority", "priority_steps": [3, 6, 9]},  # below 3: Kombu's last list
], ids=["default-steps", "ten-steps", "two-steps-own-sep", "steps-without-0"])
def test_priorities_land_in_kombus_priority_sub_queues(apps: AppFactory, options: dict[str, Any]) -> None:
    plain, ours = same_db(apps, broker_transport_options=options)
    broker = apps.server.client(STORE_DB)
    calls = [{"args": (p,), "task_id": str(uuid.uuid4()), "queue": "q", "priority": p}
             for p in (None, 0, 1, 3, 4, 5, 8, 9, 12)]
    theirs, generic, ids = send_all(plain, ours, broker, calls)
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert (handoff.pushed, handoff.left) == (len(ids), 0)
    assert len({key for key, _ in theirs.values()}) > 1  # several sub-queues in play
    for task_id in ids:
        assert mine[task_id][0] == theirs[task_id][0] == generic[task_id][0], mine[task_id][1]["properties"]
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)
        assert_same_envelope(mine[task_id][1], theirs[task_id][1], plain=True)


def test_direct_and_topic_exchanges_route_through_kombus_bindings(apps: AppFactory) -> None:
    direct, topic = Exchange("dx", type="direct"), Exchange("tx", type="topic")
    queues = [
        Queue("celery"),
        Queue("d1", direct, routing_key="dk"), Queue("d2", direct, routing_key="dk"),
        Queue("d3", direct, routing_key="other"),
        Queue("t1", topic, routing_key="a.*.c"), Queue("t2", topic, routing_key="a.#"),
        Queue("t3", topic, routing_key="#.z"), Queue("t4", topic, routing_key="x.y"),
    ]
    plain, ours = same_db(apps, task_queues=queues)
    broker = apps.server.client(STORE_DB)
    with plain.producer_or_acquire() as producer:  # bindings exist before plain Celery publishes
        for queue in queues:
            producer.maybe_declare(queue)
    keys = ["dk", "other", "a.b.c", "a.b.b.c", "a.q", "m.n.z", "x.y", "a"]
    calls = [{"args": (n,), "task_id": str(uuid.uuid4()), "exchange": "dx" if n < 2 else "tx", "routing_key": key}
             for n, key in enumerate(keys)]
    eta = datetime.now(timezone.utc) + timedelta(seconds=0.5)
    for call in calls:
        plain.tasks["t.record"].apply_async(**call, eta=eta)
    theirs = drain(broker)
    for call in calls:
        ours.tasks["t.record"].apply_async(**call, eta=eta)
    handoff = fast_dispatch(apps, ours, len(calls))
    # "a" matches no binding: Kombu drops it (or picks its dead-letter queue), the generic path's call.
    # Where Kombu's topic wildcards differ from the script's (before 5.7), every topic call takes the generic path.
    fast = len(calls) - 1 if "topic" in ROUTED_TYPES else sum(c["exchange"] == "dx" for c in calls)
    assert (handoff.pushed, handoff.left) == (fast, len(calls) - fast)
    expected = sum(len(v) for v in theirs.values())
    mine: dict[bytes, list[dict[str, Any]]] = {}

    def more() -> bool:
        for key, messages in drain(broker).items():
            mine.setdefault(key, []).extend(messages)
        return sum(len(v) for v in mine.values()) >= expected

    wait_for(more, what=f"{expected} messages")
    assert {k: sorted(m["headers"]["id"] for m in v) for k, v in mine.items()} == \
           {k: sorted(m["headers"]["id"] for m in v) for k, v in theirs.items()}
    assert len(theirs) >= 5  # fan-in and fan-out through the bindings, not one queue
    for key, messages in theirs.items():
        mine_by_id = {m["headers"]["id"]: m for m in mine[key]}
        for t in messages:
            assert_same_envelope(mine_by_id[t["headers"]["id"]], t, plain=True)


def test_global_keyprefix_prefixes_every_list(apps: AppFactory) -> None:
    topic = Exchange("tx", type="topic")
    queues = [Queue("celery"), Queue("q"), Queue("t1", topic, routing_key="a.*")]
    options = {"global_keyprefix": "pfx:", "queue_order_strategy": "priority"}
    plain, ours = same_db(apps, task_queues=queues, broker_transport_options=options)
    broker = apps.server.client(STORE_DB)
    with plain.producer_or_acquire() as producer:
        for queue in queues:
            producer.maybe_declare(queue)
    calls = [{"args": (1,), "task_id": str(uuid.uuid4()), "queue": "q", "priority": 7},
             {"args": (2,), "task_id": str(uuid.uuid4())},
             {"args": (3,), "task_id": str(uuid.uuid4()), "exchange": "tx", "routing_key": "a.b"}]
    theirs, generic, ids = send_all(plain, ours, broker, calls)
    handoff, mine = dispatched(apps, ours, broker, ids)
    fast = len(ids) if "topic" in ROUTED_TYPES else len(ids) - 1
    assert (handoff.pushed, handoff.left) == (fast, len(ids) - fast)
    for task_id in ids:
        assert mine[task_id][0].startswith(b"pfx:")
        assert mine[task_id][0] == theirs[task_id][0] == generic[task_id][0]
        assert_same_envelope(mine[task_id][1], theirs[task_id][1], plain=True)


GENERIC_CASES: dict[str, dict[str, Any]] = {
    "expires": {"expires": 60},  # the TTL left until it is computed at dispatch, in Python
    "compression": {"compression": "zlib"},
    "float_header": {"headers": {"ratio": 1.5}},  # cjson would write 1.5 back, but not 2.0
    "whole_float_header": {"headers": {"ratio": 2.0}},
    "empty_list_header": {"headers": {"tags": []}},  # cjson would make it {}
    "big_int_header": {"headers": {"n": 10 ** 15 + 1}},  # beyond cjson's 14 digits
    "big_argument": {"kwargs": {"pad": "ü" * 40_000}},  # over 64 KB stored: Lua's base64 is too slow for it
}


def test_what_the_script_cannot_rebuild_exactly_takes_the_generic_path(apps: AppFactory) -> None:
    plain, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    calls = [{"args": (name,), "task_id": f"{name}-{uuid.uuid4()}", **options}
             for name, options in GENERIC_CASES.items()]
    calls.append({"args": ("fast",), "task_id": str(uuid.uuid4())})
    _, generic, ids = send_all(plain, ours, broker, calls)
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert (handoff.pushed, handoff.left) == (1, len(GENERIC_CASES))
    ttl = int(mine[calls[0]["task_id"]][1]["properties"].pop("expiration"))
    assert 0 < ttl <= 60_000  # what is left until expires when it was dispatched
    generic[calls[0]["task_id"]][1]["properties"].pop("expiration")
    for task_id in ids:
        assert mine[task_id][0] == generic[task_id][0]
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)
    headers = {task_id.split("-")[0]: m["headers"] for task_id, (_, m) in mine.items()}
    assert json.dumps(headers["whole_float_header"]["ratio"]) == "2.0"
    assert headers["empty_list_header"]["tags"] == []
    assert headers["big_int_header"]["n"] == 10 ** 15 + 1


@pytest.mark.default_user("a queue its app does not declare")
def test_a_queue_only_its_sender_knew_takes_the_generic_path(apps: AppFactory) -> None:
    _, ours = same_db(apps)
    _, sender = same_db(apps)  # creates the queue for itself (task_create_missing_queues)
    broker = apps.server.client(STORE_DB)
    task_id = str(uuid.uuid4())
    sender.tasks["t.record"].apply_async(("x",), task_id=task_id, queue="elsewhere", countdown=0.2)
    handoff, mine = dispatched(apps, ours, broker, [task_id])
    assert mine[task_id][0] == b"elsewhere"
    assert (handoff.pushed, handoff.left) == (0, 1)


def dispatch_discarded_and_one_good(apps: AppFactory, ours: Celery, broker: redis.Redis,
                                    dispatch: Callable[..., tuple[Any, dict[str, Any]]]) -> Any:
    """Entries a worker would discard (every case of the validation tests) and one good one,
    dispatched by ``dispatch``: the bad ones are dead-lettered as invalid, only the good one
    goes out. Returns the hand-off."""
    from ..dispatch.test_validation import CASES, foreign

    store = apps.store(ours)
    now = int(time.time() * 1000)
    bad = []
    for case in sorted(CASES):
        message = foreign(built_message(ours.tasks["t.record"], kwargs={"tag": case}), **CASES[case])
        store.schedule(message.task_id, now, encode(message))
        bad.append(message.task_id)
    good = built_message(ours.tasks["t.record"], kwargs={"tag": "fine"})
    store.schedule(good.task_id, now + 20, encode(good))
    handoff, mine = dispatch(apps, ours, broker, [good.task_id])
    letters = installation_for(ours).dead_letters  # type: ignore[union-attr]
    for task_id in bad:
        letter = wait_for(lambda task_id=task_id: letters.get(task_id), what="the discarded message dead-lettered")
        assert letter.reason == "invalid"
    assert set(mine) == {good.task_id}
    return handoff


def test_a_message_a_worker_would_discard_is_dead_lettered_not_pushed(apps: AppFactory) -> None:
    _, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    handoff = dispatch_discarded_and_one_good(apps, ours, broker, dispatched)
    assert handoff.pushed == 1
    assert lists(broker) == {}


def test_a_revoked_id_is_dropped_by_the_script_and_marked_revoked(apps: AppFactory) -> None:
    _, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    gone, kept = str(uuid.uuid4()), str(uuid.uuid4())
    ours.control.revoke(gone)  # recorded: the id is in no queue yet
    ours.tasks["t.record"].apply_async(("gone",), task_id=gone, countdown=0.3)  # sent again after its revoke
    ours.tasks["t.record"].apply_async(("kept",), task_id=kept, countdown=0.4)
    handoff, mine = dispatched(apps, ours, broker, [kept])
    assert set(mine) == {kept}
    wait_for(lambda: ours.AsyncResult(gone).state == "REVOKED", what="the dropped id marked revoked")
    assert handoff.left == 0
    assert celery_zset_scheduler.lookup(ours, gone) is None


def test_the_setting_turns_it_off_and_other_databases_never_take_it(apps: AppFactory) -> None:
    from celery_zset_scheduler.dispatch.generic import GenericHandOff

    _, off = same_db(apps, zset_scheduler_fast_path=False)
    dispatcher = apps.dispatcher(off)
    assert type(dispatcher.handoff) is GenericHandOff
    other = apps(prefix="other")  # the broker is another database of the same server
    handoff = apps.dispatcher(other).handoff
    assert isinstance(handoff, FastHandOff)
    other.tasks["t.record"].apply_async(("x",), countdown=0.2)
    broker = apps.server.client(BROKER_DB)
    wait_for(lambda: lists(broker), what="the message published the generic way")
    assert handoff.routes() is None and handoff.pushed == 0


@pytest.mark.default_user("a queue its app does not declare")
def test_a_queue_key_of_another_type_loses_nothing(apps: AppFactory) -> None:
    _, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    broker.set("q", "not a list")  # LPUSH would fail: the script must not have taken the entry by then
    task_id = str(uuid.uuid4())
    ours.tasks["t.record"].apply_async(("x",), task_id=task_id, queue="q", countdown=0.2)
    handoff = fast_dispatch(apps, ours, 1)
    assert handoff.pushed == 0  # left to the generic path, which keeps it until the broker takes it
    time.sleep(1.0)
    assert celery_zset_scheduler.lookup(ours, task_id) is not None
    broker.delete("q")
    raw = wait_for(lambda: broker.rpop("q"), timeout=60, what="the message once the key is a list again")
    assert json.loads(raw)["headers"]["id"] == task_id


SIMPLE_CALLS: list[dict[str, Any]] = [
    {"args": (1234567, 1234567)}, {"args": ()}, {"args": (-3,)}, {"args": ("a b", "~!#$%&()*+-./:;<=>?@[]^_`{|}")},
    {"args": ("",), "queue": "q"}, {"args": (5, 6), "priority": 3}, {"args": (7,), "headers": {"tenant": "acme"}},
    {"args": (8,), "expires": 600}, {"args": (9,), "retries": 2, "shadow": "nick"},
]
NOT_SIMPLE_CALLS: list[dict[str, Any]] = [
    {"args": ("a,b",)}, {"args": ("it's",)}, {"args": ("é",)}, {"args": (1.5,)}, {"args": (True,)},
    {"args": (1,), "kwargs": {"tag": 2}}, {"args": (1, 2), "argsrepr": "(one, two)"},
    {"args": tuple(range(300))},  # Celery's argsrepr of it is cut short
]


def stored_meta(app: Celery, task_id: str) -> list[Any]:
    """The meta line of an entry as stored (its shared prefix put back)."""
    store = installation_for(app).store
    entry = store.get(task_id)
    assert entry is not None and entry.payload is not None
    return json.loads(entry.payload.split(b"\n", 1)[0])  # type: ignore[no-any-return]


def test_simple_calls_are_stored_short_and_pushed_as_kombu_writes_them(apps: AppFactory) -> None:
    plain, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    calls = [{**call, "task_id": str(uuid.uuid4())} for call in SIMPLE_CALLS + NOT_SIMPLE_CALLS]
    theirs, generic, ids = send_all(plain, ours, broker, calls, task="t.call")
    simple = {c["task_id"] for c in calls[:len(SIMPLE_CALLS)]}
    for task_id in ids:
        meta = stored_meta(ours, task_id)
        assert meta[0] == 5 and (meta[6] == 0) is (task_id in simple), (task_id, meta)
    handoff, mine = dispatched(apps, ours, broker, ids)
    # An expires header (its TTL computed in Python) and the argsrepr option (Celery sends it as a
    # property too, which only Kombu's publish writes) take the generic path.
    assert (handoff.pushed, handoff.left) == (len(ids) - 2, 2)
    assert set(mine) == set(theirs) == set(generic) == set(ids)
    for task_id in ids:
        assert mine[task_id][0] == theirs[task_id][0] == generic[task_id][0]  # the same list
        if "expiration" in theirs[task_id][1]["properties"]:  # each computed its own expiry
            assert mine[task_id][1]["body"] == theirs[task_id][1]["body"] == generic[task_id][1]["body"]
            continue
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)
        assert_same_envelope(mine[task_id][1], theirs[task_id][1], plain=True)


def rewrite_in_the_previous_format(app: Celery, ids: list[str], layout: int = 2) -> None:
    """Store each entry as format 3 wrote it (the arrival stamp, then layout 2, no shared prefix)
    or, ``layout=4``, as formats 4 and 5 did (layout 4, its shared prefix kept once per shard)."""
    from ..support import codec4, old_codec

    store = installation_for(app).store
    for task_id in ids:
        found = celery_zset_scheduler.lookup(app, task_id)
        assert found is not None and found[1] is not None
        entry, message = found
        if layout == 4:
            value, write = store.shared.compact(entry.shard, codec4.encode(message))  # type: ignore[arg-type]
            assert write is not None and value.startswith(b"\x02")
            store.client.hsetnx(*write)
        else:
            value = old_codec.encode(message)  # type: ignore[arg-type]
        store.client.hset(store.keys.shard(entry.shard).msg, member(task_id), b"\x01" + bytes(10) + value)


@pytest.mark.parametrize("layout", [2, 4])
def test_entries_stored_in_the_previous_format_are_pushed_the_same(apps: AppFactory, layout: int) -> None:
    plain, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    calls = [
        {"kwargs": {"tag": "x"}, "task_id": str(uuid.uuid4()), "queue": "q", "priority": 3},
        {"args": ("a", 7), "task_id": str(uuid.uuid4())},
        {"args": (1,), "task_id": str(uuid.uuid4()), "headers": {"nested": {"a": [1, None, "x"]}}},
        {"args": (1234567, 1234567), "task_id": str(uuid.uuid4())},
        {"args": (), "task_id": str(uuid.uuid4()), "priority": 5},
    ]
    _, generic, ids = send_all(plain, ours, broker, calls)
    rewrite_in_the_previous_format(ours, ids, layout)
    assert all(stored_meta(ours, task_id)[0] == (4 if layout == 4 else "t.record") for task_id in ids)
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert (handoff.pushed, handoff.left) == (len(ids), 0)
    for task_id in ids:
        assert mine[task_id][0] == generic[task_id][0]
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)


@pytest.mark.parametrize("layout", [2, 4])
def test_entries_stored_in_the_previous_format_go_the_generic_way_the_same(apps: AppFactory, layout: int) -> None:
    conf = {"task_queues": QUEUES}
    ours = apps(**conf)  # its broker is another database: the generic path
    broker = apps.server.client(BROKER_DB)
    calls = [{"args": ("a", n), "task_id": str(uuid.uuid4())} for n in range(3)]
    eta = datetime.now(timezone.utc) + timedelta(seconds=0.5)
    for call in calls:
        ours.tasks["t.record"].apply_async(**call, eta=eta)
    ids = [c["task_id"] for c in calls]
    expected = {}
    for task_id in ids:
        found = celery_zset_scheduler.lookup(ours, task_id)
        assert found is not None and found[1] is not None
        expected[task_id] = found[1]
    rewrite_in_the_previous_format(ours, ids, layout)
    for task_id in ids:  # read back whole, as the CLI and the admin pages read them
        again = celery_zset_scheduler.lookup(ours, task_id)
        assert again is not None and again[1] == expected[task_id]
    apps.dispatcher(ours)
    got: dict[str, tuple[bytes, dict[str, Any]]] = {}
    wait_for(lambda: got.update(by_id(drain(broker))) or len(got) >= len(ids), what="the old entries dispatched")
    assert set(got) == set(ids)
    for task_id in ids:
        headers = got[task_id][1]["headers"]
        assert headers["argsrepr"] == expected[task_id].headers["argsrepr"]
        assert headers["zset_eta"] == expected[task_id].headers["eta"]


@pytest.mark.default_user("a broadcast exchange its app does not declare")
def test_fanout_and_expiring_queues_take_the_generic_path(apps: AppFactory) -> None:
    from kombu.common import Broadcast

    queues = [Queue("celery"), Broadcast("bc"), Queue("ttlq", expires=600)]
    _, ours = same_db(apps, task_queues=queues)
    broker = apps.server.client(STORE_DB)
    listener = broker.pubsub()
    listener.psubscribe("*bc*")  # Kombu's Redis fanout is pub/sub
    wait_for(lambda: listener.get_message(timeout=0.1), what="the subscription")
    fanned, expiring = str(uuid.uuid4()), str(uuid.uuid4())
    ours.tasks["t.record"].apply_async(("f",), task_id=fanned, queue="bc", countdown=0.2)
    ours.tasks["t.record"].apply_async(("e",), task_id=expiring, queue="ttlq", countdown=0.2)
    handoff = fast_dispatch(apps, ours, 2)
    assert (handoff.pushed, handoff.left) == (0, 2)

    def published() -> Any:
        message = listener.get_message(timeout=0.2)
        return message if message and message["type"] == "pmessage" else None

    assert json.loads(wait_for(published, what="the fanout message")["data"])["headers"]["id"] == fanned
    wait_for(lambda: broker.llen("ttlq"), what="the expiring queue's message")
    if kombu.VERSION[:2] >= (5, 7):
        assert broker.pttl("ttlq") > 0  # Kombu's queue expiry, applied by the generic path's publish
    else:
        assert broker.pttl("ttlq") == -1  # Kombu before 5.7 never expires a Redis queue, nor does its publish
    assert json.loads(broker.rpop("ttlq"))["headers"]["id"] == expiring
    listener.close()


def store_as_text_members(app: Celery, ids: list[str]) -> None:
    """Store each entry under its id's text, as format 4 and before did (a UUID not packed)."""
    store = installation_for(app).store
    for task_id in ids:
        sk = store.keys.shard(store.keys.shard_of(task_id))
        packed = member(task_id)
        score, value = store.client.zscore(sk.due, packed), store.client.hget(sk.msg, packed)
        assert score is not None and value is not None
        store.client.zrem(sk.due, packed)
        store.client.hdel(sk.msg, packed)
        store.client.zadd(sk.due, {task_id: score})
        store.client.hset(sk.msg, task_id, value)


def test_the_envelope_names_the_id_as_text_whether_its_member_is_packed_or_not(apps: AppFactory) -> None:
    plain, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    packed, as_text = str(uuid.uuid4()), str(uuid.uuid4())
    calls = [{"args": ("a", n), "task_id": task_id}
             for n, task_id in enumerate([packed, as_text, "order-42", str(uuid.uuid4()).upper()])]
    _, generic, ids = send_all(plain, ours, broker, calls)
    store_as_text_members(ours, [as_text])
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert (handoff.pushed, handoff.left) == (len(ids), 0)
    for task_id in ids:
        envelope = mine[task_id][1]
        headers, properties = envelope["headers"], envelope["properties"]
        assert headers["id"] == headers["root_id"] == properties["correlation_id"] == task_id
        assert_same_envelope(envelope, generic[task_id][1], plain=False)


def set_aside(app: Celery, where: str) -> int:
    """Move every shard's shared prefixes where a collection puts them (store/shared_gc.py):
    ``shared_old`` while a cycle scans, ``shared_grave`` after it ended; how many were moved."""
    store = installation_for(app).store
    moved = 0
    for shard in range(store.shards):
        sk = store.keys.shard(shard)
        if store.client.exists(sk.shared):
            moved += int(store.client.hlen(sk.shared))
            store.client.rename(sk.shared, sk.shared_old if where == "old" else sk.shared_grave)
    return moved


@pytest.mark.parametrize("where", ["old", "grave"])
def test_prefixes_a_collection_set_aside_are_read_by_the_script(apps: AppFactory, where: str) -> None:
    plain, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    calls = [{"args": ("a", n), "task_id": str(uuid.uuid4())} for n in range(12)]
    _, generic, ids = send_all(plain, ours, broker, calls)
    assert set_aside(ours, where) > 0
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert (handoff.pushed, handoff.left) == (len(ids), 0)
    for task_id in ids:
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)

"""The lane (``celery/producer/lane.py``): a timed ``apply_async`` of a shape seen before is stored without
Celery's ``send_task``, byte for byte as Celery's path stores it, or goes Celery's path.

Each test compares entries the full path stored with entries the lane stored, on a real Redis:
the first call of a shape goes the full way (and teaches the lane), a no-op ``before_task_publish``
receiver forces the full way, and ``Lane.taken`` tells which way a call went.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from celery import Celery, Task, signals
from celery.result import AsyncResult
from kombu import Queue

from celery_zset_scheduler.celery.core.compat import READS_REPR_MAXLEVELS
from celery_zset_scheduler.celery.core.messages import TaskNotSerializable
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.producer.lane import Lane
from celery_zset_scheduler.model.codec import StoredMessage, decode
from celery_zset_scheduler.model.times import eta_ms

from ..support.helpers import RECORDS, AppFactory, wait_for

ETA = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)  # fixed: the bytes are comparable


def lane(app: Celery) -> Lane:
    inst = installation_for(app)
    assert inst is not None and inst.lane is not None, "no timed send yet"
    assert isinstance(inst.lane, Lane)
    return inst.lane


def taken(app: Celery) -> int:
    inst = installation_for(app)
    return inst.lane.taken if inst is not None and inst.lane is not None else 0


def raw(app: Celery, task_id: str) -> bytes:
    inst = installation_for(app)
    assert inst is not None
    entry = inst.store.get(task_id)
    assert entry is not None and entry.payload is not None, f"{task_id} is not stored"
    return entry.payload


def message(app: Celery, task_id: str) -> StoredMessage:
    return decode(task_id, raw(app, task_id))


def without_call(m: StoredMessage) -> dict[str, Any]:
    """A stored message without what differs between two calls: the id, the eta."""
    headers = {k: v for k, v in m.headers.items() if k not in ("id", "root_id", "eta")}
    properties = {k: v for k, v in m.properties.items() if k != "correlation_id"}
    return {"headers": headers, "properties": properties, "body": m.body, "content_type": m.content_type,
            "content_encoding": m.content_encoding, "exchange": m.exchange, "routing_key": m.routing_key,
            "queue": m.queue, "own_ids": (m.headers.get("id"), m.headers.get("root_id"),
                                          m.properties.get("correlation_id")) == (m.task_id,) * 3}


@contextmanager
def full_path() -> Iterator[None]:
    """A ``before_task_publish`` receiver (it could change the message): every call goes Celery's way."""
    def receiver(**_: Any) -> None:
        pass

    signals.before_task_publish.connect(receiver, weak=False)
    try:
        yield
    finally:
        signals.before_task_publish.disconnect(receiver)


def three_ways(app: Celery, call: Callable[[], AsyncResult],
               fresh: bool = True) -> tuple[AsyncResult, AsyncResult, AsyncResult]:
    """The same call by the full path only, then twice more: as a ``fresh`` shape's first call
    (the full path, which teaches the lane) and by the lane; asserts which way each went."""
    with full_path():
        before = taken(app)
        reference = call()
        assert taken(app) == before, "the full path was expected"
    first = call()
    if fresh:
        assert taken(app) == before, "the full path was expected for the first call of a shape"
    middle = taken(app)
    second = call()
    assert taken(app) == middle + 1, "the lane was expected"
    return reference, first, second


def assert_same_entries(app: Celery, *results: AsyncResult) -> None:
    entries = [raw(app, r.id) for r in results]
    assert all(e == entries[0] for e in entries), entries


def lane_app(apps: AppFactory, **conf: Any) -> Celery:
    app = apps(**conf)

    @app.task(name="t.limited", shared=False, time_limit=40, soft_time_limit=30, priority=4,
              ignore_result=True, queue="zt.limited")
    def limited(x: int = 0) -> int:
        return x

    @app.task(name="t.any", shared=False, typing=False)
    def any_arguments(*args: Any, **kwargs: Any) -> None:
        pass

    @app.task(name="t.wrapped", shared=False, base=SuperOnly)
    def wrapped(x: int = 0) -> int:
        return x

    @app.task(name="t.stamped", shared=False, base=AddsHeaders)
    def stamped(x: int = 0) -> int:
        return x

    return app


class SuperOnly(Task):  # type: ignore[misc]
    """An ``apply_async`` override that changes nothing: the lane applies below it."""

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        return super().apply_async(args, kwargs, **options)


class AddsHeaders(Task):  # type: ignore[misc]
    """An ``apply_async`` override that adds a header per call: not a shape."""

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        return super().apply_async(args, kwargs, headers={"stamp": time.time()}, **options)


ARGUMENTS: list[tuple[Any, Any]] = [
    ((1, 2), None),
    ((), {}),
    (None, None),
    ([1, 2], {"tag": "list args"}),
    (("a", "it's", 'say "hi"', "line\nbreak\ttab\\", "é€😀"), None),
    ((1.5, -0.25, None, True, False, 10**20), {"k": None}),
    ((), {"tag": {"nested": [1, (2, 3)], "deep": [[[[1]]]]}}),
    (("x" * 3000,), None),  # argsrepr cut at Celery's 1024
    ((datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc),), None),  # Kombu's typed JSON
    ((), {"tag": "\ud800"}),  # a lone surrogate
    ((), {1: "int key"}),
]

OPTIONS: list[dict[str, Any]] = [
    {},
    {"queue": "zt.other"},
    {"routing_key": "zt.rk"},
    {"exchange": "zt.ex", "routing_key": "zt.rk"},
    {"priority": 3},
    {"time_limit": 30, "soft_time_limit": 20},
    {"ignore_result": True},
    {"serializer": "json"},
    {"retry": False},
    {"add_to_parent": False},
    {"delivery_mode": 1},
    {"mandatory": True, "immediate": False},
    {"priority": 1.0},  # not the shape of priority=1
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "defaults")
def test_the_lane_stores_the_entry_celerys_path_stores_for_each_option(apps: AppFactory,
                                                                       options: dict[str, Any]) -> None:
    app = lane_app(apps)
    record = app.tasks["t.record"]
    results = three_ways(app, lambda: record.apply_async(kwargs={"tag": "o"}, eta=ETA, **options))
    assert_same_entries(app, *results)
    counted = three_ways(app, lambda: record.apply_async(kwargs={"tag": "o"}, countdown=600, **options), fresh=False)
    expected = without_call(message(app, counted[0].id))
    for result in counted:
        stored = message(app, result.id)
        assert without_call(stored) == expected
        assert eta_ms(stored.headers["eta"]) == installation_for(app).store.get(result.id).score_ms  # type: ignore[union-attr]


@pytest.mark.parametrize(("args", "kwargs"), ARGUMENTS, ids=range(len(ARGUMENTS)))
def test_the_lane_stores_the_arguments_and_their_repr_as_celery_does(apps: AppFactory, args: Any,
                                                                     kwargs: Any) -> None:
    app = lane_app(apps)
    results = three_ways(app, lambda: app.tasks["t.any"].apply_async(args, kwargs, eta=ETA))
    assert_same_entries(app, *results)
    if args == ("x" * 3000,):
        assert len(message(app, results[2].id).headers["argsrepr"]) < 1100


def test_task_options_routes_and_settings_of_the_app_are_in_the_entry(apps: AppFactory) -> None:
    app = lane_app(apps, task_routes={"t.record": {"queue": "zt.routed"}, "t.w*": "zt.globbed"},
                   task_default_delivery_mode="transient", task_default_queue="zt.default")
    last: dict[str, StoredMessage] = {}
    for name in ("t.record", "t.limited", "t.wrapped", "t.span"):
        results = three_ways(app, lambda n=name: app.tasks[n].apply_async((), eta=ETA))  # type: ignore[misc]
        assert_same_entries(app, *results)
        last[name] = message(app, results[2].id)
    routing = {name: m.routing_key for name, m in last.items()}
    assert routing == {"t.record": "zt.routed", "t.limited": "zt.limited", "t.wrapped": "zt.globbed",
                       "t.span": "zt.default"}
    limited = last["t.limited"]
    assert (limited.headers["timelimit"], limited.properties["priority"], limited.headers["ignore_result"]) == \
        ([40, 30], 4, True)
    assert limited.properties["delivery_mode"] == "transient"  # as set: Kombu maps it when publishing


def test_given_task_ids_and_etas_that_the_template_cannot_hold(apps: AppFactory) -> None:
    app = lane_app(apps)
    record = app.tasks["t.record"]
    ids = iter(f"given-{n}" for n in range(10))
    results = three_ways(app, lambda: record.apply_async(kwargs={"tag": 1}, eta=ETA, task_id=next(ids)))
    assert [r.id for r in results] == ["given-0", "given-1", "given-2"]
    assert_same_entries(app, *results)
    # A naive eta (Celery writes it without an offset) and one in another zone: encoded in full.
    for eta in (datetime(2031, 1, 1, 12), ETA.astimezone(timezone(timedelta(hours=2))), ETA.replace(microsecond=0)):
        results = three_ways(app, lambda e=eta: record.apply_async(kwargs={"tag": 2}, eta=e),  # type: ignore[misc]
                             fresh=False)
        assert_same_entries(app, *results)
        assert message(app, results[2].id).headers["eta"] == eta.isoformat()


def test_an_app_in_another_time_zone(apps: AppFactory) -> None:
    app = lane_app(apps, timezone="Europe/Paris")
    record = app.tasks["t.record"]
    results = three_ways(app, lambda: record.apply_async(kwargs={"tag": "tz"}, countdown=120))
    expected = without_call(message(app, results[0].id))
    for result in results:
        stored = message(app, result.id)
        assert without_call(stored) == expected
        assert stored.headers["eta"].endswith(("+01:00", "+02:00"))
    assert_same_entries(app, *three_ways(app, lambda: record.apply_async(kwargs={"tag": "tz"}, eta=ETA), fresh=False))


@pytest.mark.parametrize("options", [
    {"link": "sig"}, {"link_error": "sig"}, {"expires": 60}, {"headers": {"h": 1}}, {"shadow": "other.name"},
    {"queue": Queue("zt.object")}, {"compression": "zlib"}, {"retry_policy": {"max_retries": 1}},
    {"idempotency_key": "k1"}, {"argsrepr": "(hidden)"}, {"group_id": "g", "group_index": 0},
], ids=lambda o: ",".join(o))
def test_unusual_options_go_celerys_way(apps: AppFactory, options: dict[str, Any]) -> None:
    app = lane_app(apps)
    record = app.tasks["t.record"]
    if options.get("link") == "sig" or options.get("link_error") == "sig":
        options = {k: app.tasks["t.span"].si(tag="linked") for k in options}
    record.apply_async(kwargs={"tag": "warm"}, countdown=600)  # the lane exists
    before = taken(app)
    results = [record.apply_async(kwargs={"tag": "u"}, countdown=600, **options) for _ in range(3)]
    assert taken(app) == before
    for result in results[:1] if "idempotency_key" in options else results:  # the others: duplicates
        assert message(app, result.id).task_name == "t.record"


def print_nothing(**_: Any) -> None:
    pass


def test_what_else_goes_celerys_way(apps: AppFactory) -> None:
    app = lane_app(apps)
    record = app.tasks["t.record"]
    record.apply_async(countdown=600)
    before = taken(app)
    for _ in range(3):
        app.send_task("t.record", kwargs={"tag": "by name"}, countdown=600)
        app.tasks["t.stamped"].apply_async(countdown=600)
        record.s(tag="chained").set(countdown=600).apply_async(link=app.tasks["t.span"].si())
        with full_path():
            record.apply_async(countdown=600)
        signals.task_sent.connect(print_nothing, weak=False)
        try:
            record.apply_async(countdown=600)
        finally:
            signals.task_sent.disconnect(print_nothing)
    assert taken(app) == before
    # Arguments Celery refuses or cannot serialize: its own errors, on a shape the lane knows.
    untyped = app.tasks["t.any"]
    untyped.apply_async((), {"tag": 1}, countdown=600)
    untyped.apply_async((), {"tag": 1}, countdown=600)
    with pytest.raises(TypeError, match="task args must be a list or tuple"):
        untyped.apply_async("ab", countdown=600)
    with pytest.raises(TypeError, match="task keyword arguments must be a mapping"):
        untyped.apply_async((), [("a", 1)], countdown=600)
    with pytest.raises(TaskNotSerializable, match="cannot be stored"):
        untyped.apply_async((), {"tag": object()}, countdown=600)
    # Eager mode: Celery's apply_async runs the task before any send.
    app.conf.task_always_eager = True
    assert untyped.apply_async((), {"tag": 1}, countdown=600).get() is None
    app.conf.task_always_eager = False
    # Sent events: the full path publishes task-sent.
    app.conf.task_send_sent_event = True
    assert taken(app) == before + 1  # the second call of t.any above
    sent = [record.apply_async(countdown=600) for _ in range(3)]
    assert taken(app) == before + 1
    assert all(message(app, r.id).task_name == "t.record" for r in sent)
    app.conf.task_send_sent_event = False  # the shape is learnt again, then taken
    assert_same_entries(app, *three_ways(app, lambda: record.apply_async(eta=ETA)))


def test_an_app_overriding_send_task_keeps_celerys_way(apps: AppFactory) -> None:
    class Custom(Celery):  # type: ignore[misc]
        def send_task(self, *args: Any, **kwargs: Any) -> Any:
            return super().send_task(*args, **kwargs)

    app = Custom("zt-custom", set_as_current=False)
    app.conf.update(broker_url=apps.server.url_db(1), zset_scheduler_url=apps.server.url_db(0),
                    zset_scheduler_prefix="zt", zset_scheduler_shards=4)

    @app.task(name="t.c", shared=False)
    def c() -> None:
        pass

    import celery_zset_scheduler

    celery_zset_scheduler.install(app)
    for _ in range(3):
        c.apply_async(countdown=600)
    assert lane(app).usable is False and taken(app) == 0


def test_a_setting_changed_after_the_first_call_applies_to_the_next(apps: AppFactory) -> None:
    app = lane_app(apps)
    record = app.tasks["t.record"]
    assert_same_entries(app, *three_ways(app, lambda: record.apply_async(eta=ETA)))
    app.conf.task_default_queue = "zt.changed"
    app.conf.task_repr_maxlevels = 1
    results = three_ways(app, lambda: record.apply_async(({"deep": [1]},), eta=ETA))
    assert_same_entries(app, *results)
    stored = message(app, results[2].id)
    # Celery before 5.7 has no such setting: its argsrepr keeps Celery's depth of 3.
    depth = "({...},)" if READS_REPR_MAXLEVELS else "({'deep': [1]},)"
    assert (stored.routing_key, stored.headers["argsrepr"]) == ("zt.changed", depth)


def test_routes_changed_after_the_first_call_apply_to_the_next(apps: AppFactory) -> None:
    app = lane_app(apps)
    record = app.tasks["t.record"]
    assert_same_entries(app, *three_ways(app, lambda: record.apply_async(eta=ETA)))
    app.conf.update(task_routes={"t.record": {"queue": "zt.rerouted"}})  # Celery makes a new router
    results = three_ways(app, lambda: record.apply_async(eta=ETA))
    assert_same_entries(app, *results)
    assert message(app, results[2].id).routing_key == "zt.rerouted"
    app.conf.update(task_routes=[lambda name, *_, **__: {"queue": "zt.by_function"}])
    before = taken(app)
    routed = [record.apply_async(eta=ETA) for _ in range(3)]
    assert taken(app) == before, "a router function may route each call its own way: Celery's path"
    assert {message(app, r.id).routing_key for r in routed} == {"zt.by_function"}


def test_the_shapes_kept_do_not_hold_the_first_calls_arguments(apps: AppFactory) -> None:
    app = lane_app(apps)
    big = "x" * 1_000_000
    results = three_ways(app, lambda: app.tasks["t.any"].apply_async((big,), eta=ETA))
    assert_same_entries(app, *results)
    inst = installation_for(app)
    assert inst is not None
    kept = [shape for shape in inst.per_thread.lane_shapes.values() if hasattr(shape, "message")]
    assert kept and all(len(shape.message.body) < 1000 for shape in kept)


def test_publish_signals_results_and_backend_subscriptions_match(apps: AppFactory) -> None:
    app = lane_app(apps)
    record = app.tasks["t.record"]
    seen: list[dict[str, Any]] = []

    def after(sender: Any, body: Any, headers: Any, exchange: Any, routing_key: Any, **_: Any) -> None:
        seen.append({"sender": sender, "body": body, "exchange": exchange, "routing_key": routing_key,
                     "headers": {k: v for k, v in headers.items() if k not in ("id", "root_id")}})

    signals.after_task_publish.connect(after, weak=False)
    try:
        results = three_ways(app, lambda: record.apply_async((), {"tag": "s"}, eta=ETA))
    finally:
        signals.after_task_publish.disconnect(after)
    assert len(seen) == 3 and seen[0] == seen[1] == seen[2]
    assert seen[2]["body"] == ((), {"tag": "s"}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
    assert seen[2]["headers"]["eta"] == ETA.isoformat() and seen[2]["routing_key"] == "celery"
    consumer = app.backend.result_consumer
    for result in results:
        assert type(result) is type(results[0]) and isinstance(result, AsyncResult)
        assert result.backend is app.backend
        assert result.ignored is False
        assert app.backend.get_key_for_task(result.id) in consumer.subscribed_to  # on_task_call
    ignored = three_ways(app, lambda: record.apply_async(eta=ETA, ignore_result=True))
    for result in ignored:
        assert result.ignored is True
        assert app.backend.get_key_for_task(result.id) not in consumer.subscribed_to
    # A task id already pending: nothing is sent, and no signal fires.
    signals.after_task_publish.connect(after, weak=False)
    try:
        again = record.apply_async((), {"tag": "s"}, eta=ETA, task_id=results[2].id)
    finally:
        signals.after_task_publish.disconnect(after)
    assert again.id == results[2].id and len(seen) == 3


def test_each_thread_has_its_own_shapes_and_reply_to(apps: AppFactory) -> None:
    app = lane_app(apps)
    record = app.tasks["t.record"]
    here = three_ways(app, lambda: record.apply_async(eta=ETA))
    there: list[Any] = []

    def other() -> None:
        there.extend(three_ways(app, lambda: record.apply_async(eta=ETA)))
        there.append(app.thread_oid)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert_same_entries(app, *here)
    assert_same_entries(app, *there[:3])
    assert message(app, there[2].id).properties["reply_to"] == there[3] != app.thread_oid


def test_the_store_outage_is_the_same_error(apps: AppFactory) -> None:
    from celery_zset_scheduler.errors import StoreUnavailable
    from celery_zset_scheduler.testing import RedisServer

    with RedisServer() as server:
        app = lane_app(apps, zset_scheduler_url=server.url, task_publish_retry_policy={"max_retries": 0})
        record = app.tasks["t.record"]
        record.apply_async(countdown=600)
        record.apply_async(countdown=600)
        assert taken(app) == 1
        server.stop(kill=True)
        with pytest.raises(StoreUnavailable, match="cannot store task 't.record'"):
            record.apply_async(countdown=600)


def test_tasks_stored_by_the_lane_run_with_their_request_from_inside_a_task(apps: AppFactory) -> None:
    app = lane_app(apps)
    recorder = redis.Redis.from_url(apps.record_url)

    @app.task(bind=True, name="t.request", shared=False)
    def request(self: Any, *args: Any, **kwargs: Any) -> None:
        r = self.request
        recorder.rpush(RECORDS, json.dumps({
            "id": r.id, "args": list(r.args), "kwargs": r.kwargs, "eta": r.eta, "argsrepr": r.argsrepr,
            "kwargsrepr": r.kwargsrepr, "parent_id": r.parent_id, "root_id": r.root_id,
            "at": time.time(),
        }))

    @app.task(bind=True, name="t.spawn", shared=False)
    def spawn(self: Any, soon: bool) -> list[str]:
        before = taken(app)
        if soon:
            ids = [request.apply_async((n, "x"), {"n": n}, countdown=1.0).id for n in range(3)]
        else:
            with full_path():
                ids = [request.apply_async((0, "x"), {"n": 0}, eta=ETA).id]
            ids += [request.apply_async((n // 2, "x"), {"n": n // 2}, eta=ETA).id for n in range(4)]
        return [*ids, str(taken(app) - before)]

    apps.worker(app)
    apps.dispatcher(app)
    # Far away first: the entries the full path and the lane stored from inside a task.
    outer = spawn.apply_async((False,))
    reference, first, second, third, fourth, lane_calls = outer.get(timeout=30)
    assert lane_calls == "3"
    assert raw(app, reference) == raw(app, first) == raw(app, second)
    assert raw(app, third) == raw(app, fourth) != raw(app, first)
    for task_id in (reference, third):
        stored = message(app, task_id)
        assert (stored.headers["parent_id"], stored.headers["root_id"]) == (outer.id, outer.id)
    assert message(app, third).headers["argsrepr"] == "(1, 'x')"
    # Then soon: they run, with their request as Celery's path would give it.
    started = time.time()
    soon = spawn.apply_async((True,))
    *ids, lane_calls = soon.get(timeout=30)
    assert lane_calls == "3"  # a shape the far calls taught
    runs = wait_for(lambda: len(apps.executions()) >= 3 and apps.executions(), what="three runs")
    by_id = {run["id"]: run for run in runs}
    for n, task_id in enumerate(ids):
        run = by_id[task_id]
        assert (run["args"], run["kwargs"], run["argsrepr"], run["kwargsrepr"]) == \
            ([n, "x"], {"n": n}, f"({n}, 'x')", f"{{'n': {n}}}")
        assert (run["parent_id"], run["root_id"]) == (soon.id, soon.id)
        assert eta_ms(run["eta"]) >= started * 1000 + 1000  # the eta Celery wrote, as request.eta
        assert run["at"] * 1000 >= eta_ms(run["eta"]) - 5
    children = AsyncResult(soon.id, app=app).children or []
    assert sorted(c.id for c in children) == sorted(ids)  # the parent's trail


def test_a_negative_zero_option_is_not_the_shape_of_zero(apps: AppFactory) -> None:
    app = lane_app(apps)
    record = app.tasks["t.record"]
    assert_same_entries(app, *three_ways(app, lambda: record.apply_async(eta=ETA, time_limit=0.0)))
    with full_path():
        reference = record.apply_async(eta=ETA, time_limit=-0.0)
    before = taken(app)
    call = record.apply_async(eta=ETA, time_limit=-0.0)  # the key of the 0.0 shape: Celery's way
    assert taken(app) == before
    assert raw(app, call.id) == raw(app, reference.id)
    assert b"-0.0" in raw(app, call.id)


def test_a_retry_policy_changed_in_place_applies_to_the_next(apps: AppFactory) -> None:
    app = lane_app(apps, task_publish_retry_policy={"max_retries": 3, "interval_start": 0})
    record = app.tasks["t.record"]
    assert_same_entries(app, *three_ways(app, lambda: record.apply_async(eta=ETA)))
    app.conf.task_publish_retry_policy["max_retries"] = 0  # the same dict, changed
    assert_same_entries(app, *three_ways(app, lambda: record.apply_async(eta=ETA)))  # learnt again
    shapes = [s for s in installation_for(app).per_thread.lane_shapes.values() if hasattr(s, "policy")]
    assert [s.policy["max_retries"] for s in shapes] == [0]

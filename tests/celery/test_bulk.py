"""Bulk scheduling: the fast template path stores exactly what the generic path stores, and runs."""

from __future__ import annotations

import time
import uuid
import zlib
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest
from kombu.exceptions import EncodeError

import celery_zset_scheduler
from celery_zset_scheduler.celery.producer import bulk
from celery_zset_scheduler.model.codec import decode
from celery_zset_scheduler.model.times import isoformat_us

from ..support.helpers import AppFactory, wait_for

CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {"tag": 1}),
    ((), {"tag": "é \"quoted\" \n 日本", "due": 1.5}),
    ((), {"tag": {"nested": [1, 2.5, None, True]}}),
    (("positional",), {}),
    ((), {"tag": "x" * 3000}),  # argsrepr/kwargsrepr cut by saferepr
]


def test_fast_path_stores_what_the_generic_path_stores(apps: AppFactory) -> None:
    app = apps()
    record = app.tasks["t.record"]
    at = datetime(2031, 5, 1, 12, 0, 0, 250000, tzinfo=timezone.utc)
    calls = [(a, k, 60 + i) for i, (a, k) in enumerate(CALLS)] + [((), {"tag": "at"}, at)]
    started = time.time()
    ids = celery_zset_scheduler.schedule_many(record, calls)
    template = bulk._per_call(bulk._template(record, calls[0], {}))
    fast, generic = bulk._fast_builder(template), bulk.generic_builder(template)
    assert fast is not None
    store = apps.store(app)
    for task_id, (args, kwargs, when) in zip(ids, calls, strict=True):
        entry = store.get(task_id)
        assert entry is not None and entry.payload is not None
        message = decode(task_id, entry.payload)
        # Each call's own eta, as Celery writes one (UTC), within a moment of its countdown.
        eta_us = isoformat_us(message.headers["eta"])
        assert eta_us is not None
        expected = at.timestamp() if isinstance(when, datetime) else started + when
        assert abs(eta_us / 1e6 - expected) < 1.0
        assert entry.payload == generic(task_id, args, kwargs, eta_us) == fast(task_id, args, kwargs, eta_us)
        assert (message.headers["id"], message.properties["correlation_id"]) == (task_id, task_id)
        assert message.body.startswith(b"[[")
    assert decode(ids[-1], store.get(ids[-1]).payload).headers["eta"] == at.isoformat()  # type: ignore[union-attr]


def test_ids_are_distinct_version_4_uuids() -> None:
    made = bulk._uuid4s()
    ids = [next(made) for _ in range(3000)]
    assert len(set(ids)) == 3000
    for task_id in ids:
        parsed = uuid.UUID(task_id)
        assert (str(parsed), parsed.version, parsed.variant) == (task_id, 4, uuid.RFC_4122)


def test_bulk_tasks_run_once_each_with_their_own_arguments(apps: AppFactory) -> None:
    app = apps()
    ids = celery_zset_scheduler.schedule_many(app.tasks["t.record"], [((), {"tag": i}, 0.3) for i in range(200)])
    apps.dispatcher(app)
    apps.worker(app)
    wait_for(lambda: len(apps.executions()) >= 200, timeout=60, what="200 executions")
    runs = apps.executions()
    assert sorted((r["id"], r["tag"]) for r in runs) == sorted(zip(ids, range(200), strict=True))


def test_compression_takes_the_generic_path(apps: AppFactory) -> None:
    app = apps()
    record = app.tasks["t.record"]
    [task_id] = celery_zset_scheduler.schedule_many(record, [((), {"tag": "z"}, 60)], compression="zlib")
    entry = apps.store(app).get(task_id)
    assert entry is not None and entry.payload is not None
    message = decode(task_id, entry.payload)
    assert message.headers["compression"] == "application/x-gzip"
    assert zlib.decompress(message.body).startswith(b'[[], {"tag": "z"}')


def test_unserializable_arguments_are_refused(apps: AppFactory) -> None:
    app = apps()
    record = app.tasks["t.record"]
    with pytest.raises(EncodeError, match="cannot be stored"):
        celery_zset_scheduler.schedule_many(record, [((), {"tag": 1}, 60), ((), {"tag": object()}, 60)])


def test_a_template_unlike_celerys_takes_the_generic_path(apps: AppFactory) -> None:
    app = apps()
    record = app.tasks["t.record"]
    template = bulk._template(record, ((), {"tag": 1}, 60), {})
    odd = replace(template, headers={k: v for k, v in template.headers.items() if k != "argsrepr"})
    assert bulk._fast_builder(odd) is None
    payload = bulk.generic_builder(odd)("00000000-0000-4000-8000-000000000001", (), {"tag": 2}, 0)
    assert decode("00000000-0000-4000-8000-000000000001", payload).headers["kwargsrepr"] == "{'tag': 2}"


def test_bulk_calls_of_an_idempotent_task_get_their_own_keys(apps: AppFactory) -> None:
    app = apps()
    charge = app.tasks["t.charge"]  # idempotency_key="charge:{order_id}"
    pending = charge.apply_async(kwargs={"order_id": 2}, countdown=60)
    ids = celery_zset_scheduler.schedule_many(charge, [((), {"order_id": i}, 0.3) for i in range(4)])
    assert ids[2] == pending.id  # order 2 was already pending: that entry stays, the call adds none
    assert len(set(ids)) == 4
    store = apps.store(app)
    for i, task_id in enumerate(ids):
        entry = store.get(task_id)
        assert entry is not None and entry.payload is not None
        assert decode(task_id, entry.payload).headers["zset_idempotency_key"] == f"charge:{i}"
    apps.dispatcher(app)
    apps.worker(app)
    for task_id in [t for i, t in enumerate(ids) if i != 2]:
        assert app.AsyncResult(task_id).get(timeout=20)["order_id"] in (0, 1, 3)
    done = sorted(run["order_id"] for run in apps.executions() if run["tag"] == "charge.done")
    assert done == [0, 1, 3]  # each charged once; order 2 waits for its own countdown


def test_one_key_for_every_bulk_call_is_refused(apps: AppFactory) -> None:
    app = apps()
    with pytest.raises(ValueError, match="one idempotency_key for every call"):
        celery_zset_scheduler.schedule_many(app.tasks["t.record"], [((), {}, 1)], idempotency_key="same")


@pytest.mark.parametrize("args, kwargs", [
    (("it's",), {}), (("a\nb", 'say "hi"'), {"k": "it's"}), ((b"raw",), {}), ((1.5, None, True), {"x": [1, "y's"]}),
])
def test_bulk_reprs_are_celerys_own(apps: AppFactory, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """schedule_many writes Celery's saferepr argsrepr/kwargsrepr, which is what apply_async stores
    (saferepr and repr differ for strings holding quotes or newlines)."""
    app = apps()
    app.conf.task_serializer, app.conf.accept_content = "pickle", ["json", "pickle"]
    app.conf.zset_scheduler_accept_content = ["json", "pickle"]
    record = app.tasks["t.call"]
    store = apps.store(app)
    (bulk_id,) = celery_zset_scheduler.schedule_many(record, [(args, kwargs, 600)])
    single_id = record.apply_async(args, kwargs, countdown=600).id
    stored = [decode(i, store.get(i).payload).headers for i in (bulk_id, single_id)]  # type: ignore[union-attr]
    assert stored[0]["argsrepr"] == stored[1]["argsrepr"]
    assert stored[0]["kwargsrepr"] == stored[1]["kwargsrepr"]

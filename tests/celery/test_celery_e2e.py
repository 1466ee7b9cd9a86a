"""End to end: installed apps, real workers, real dispatchers, real Redis."""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest
import redis
from kombu import Queue
from kombu.exceptions import EncodeError

import celery_zset_scheduler
from celery_zset_scheduler.celery.core.messages import TaskNotSerializable
from celery_zset_scheduler.errors import ConfigurationError, ShardCountMismatch
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import BROKER_DB, AppFactory, wait_for
from ..support.procs import Cluster
from ..support.tools import pending

#: How far apart two entries of different shards may be due and still go out in one pass.
PASS_S = 0.25


def test_1000_tasks_run_once_each_in_due_order_never_early(apps: AppFactory) -> None:
    app = apps()
    record = app.tasks["t.record"]
    ids = []
    for i in range(1000):
        countdown = 0.5 + (i * 7919 % 1000) * 0.003  # a shuffled spread over 3 seconds
        ids.append(record.apply_async(kwargs={"tag": i}, countdown=countdown).id)
    store = apps.store(app)
    assert pending(store) == 1000  # nothing reached the broker yet
    due, shard = {}, {}
    for task_id in ids:
        entry = store.get(task_id)
        assert entry is not None
        due[task_id], shard[task_id] = entry.score_ms / 1000, entry.shard
    apps.dispatcher(app)
    apps.worker(app)
    wait_for(lambda: len(apps.executions()) >= 1000, timeout=60, what="1000 executions")
    time.sleep(0.5)
    runs = apps.executions()
    assert len(runs) == 1000
    assert sorted(run["id"] for run in runs) == sorted(ids)  # every task exactly once
    early = [run for run in runs if run["at"] < due[run["id"]]]
    assert early == []
    # A solo worker consumes one FIFO queue, so execution order is hand-off order: due order within
    # each shard; across shards, one pass pushes its shards one script after the other (the fast
    # path's documented order), so an entry may follow one of another shard due a pass later.
    for number in set(shard.values()):
        dues = [due[run["id"]] for run in runs if shard[run["id"]] == number]
        assert dues == sorted(dues), number
    latest = 0.0
    for run in runs:
        latest = max(latest, due[run["id"]])
        assert latest - due[run["id"]] <= PASS_S, (run["id"], latest - due[run["id"]])
    assert pending(store) == 0


CALLS: list[tuple[tuple[object, ...], dict[str, object]]] = [
    ((1234567, 1234567), {}), ((), {}), ((-3,), {}), (("a b", 7), {}), (("",), {}),  # stored as simple calls
    (("a,b",), {}), (("it's", "é"), {}), ((1.5, True, None), {}), ((1,), {"x": [1]}), ((), {"k": "v"}),
]


@pytest.mark.parametrize("path", ["fast", "generic"])
def test_a_worker_gets_each_calls_args_and_celerys_reprs_of_them(apps: AppFactory, path: str) -> None:
    from celery.utils.saferepr import saferepr

    from ..support.helpers import STORE_DB

    app = apps(**({"broker_url": apps.server.url_db(STORE_DB)} if path == "fast" else {}))
    call = app.tasks["t.call"]
    ids = [call.apply_async(args, kwargs, countdown=0.3).id for args, kwargs in CALLS]
    ids += celery_zset_scheduler.schedule_many(call, [(args, kwargs, 0.3) for args, kwargs in CALLS])
    apps.dispatcher(app)
    apps.worker(app)
    wait_for(lambda: len(apps.executions()) >= len(ids), timeout=60, what="every call executed")
    runs = {run["id"]: run for run in apps.executions()}
    assert set(runs) == set(ids)
    for n, task_id in enumerate(ids):
        args, kwargs = CALLS[n % len(CALLS)]
        run = runs[task_id]
        assert run["args"] == json.loads(json.dumps(list(args))) and run["kwargs"] == kwargs
        # What both senders write: Celery's saferepr.
        reprs = (saferepr(args), saferepr(kwargs))
        assert (run["argsrepr"], run["kwargsrepr"]) == reprs


def test_revoke_before_due_cancels_the_stored_task(apps: AppFactory) -> None:
    app = apps()
    record = app.tasks["t.record"]
    doomed = record.apply_async(kwargs={"tag": "revoked"}, countdown=1)
    doomed2 = record.apply_async(kwargs={"tag": "revoked-by-control"}, countdown=1)
    kept = record.apply_async(kwargs={"tag": "kept"}, countdown=1)
    doomed.revoke()
    app.control.revoke(doomed2.id)
    assert celery_zset_scheduler.lookup(app, doomed.id) is None
    assert celery_zset_scheduler.lookup(app, doomed2.id) is None
    apps.dispatcher(app)
    apps.worker(app)
    assert kept.get(timeout=20) == "kept"
    time.sleep(0.5)
    assert [run["tag"] for run in apps.executions()] == ["kept"]


def test_reschedule_moves_a_stored_task(apps: AppFactory) -> None:
    app = apps()
    result = app.tasks["t.record"].apply_async(kwargs={"tag": "moved"}, countdown=3600)
    assert celery_zset_scheduler.reschedule(app, result.id, countdown=0.5)
    apps.dispatcher(app)
    apps.worker(app)
    assert result.get(timeout=20) == "moved"
    assert celery_zset_scheduler.reschedule(app, result.id, countdown=10) is False


def test_eta_in_the_past_runs_at_once(apps: AppFactory, redis_server: RedisServer) -> None:
    app = apps()
    apps.dispatcher(app)
    past = datetime.now(timezone.utc) - timedelta(hours=1)
    result = app.tasks["t.record"].apply_async(kwargs={"tag": "late"}, eta=past)
    with own_worker(redis_server):  # a past eta goes to the broker as a plain ETA message
        assert result.get(timeout=30) == "late"


def test_naive_eta_is_read_as_utc_as_celery_does(apps: AppFactory) -> None:
    app = apps()
    naive = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(hours=2)
    result = app.tasks["t.record"].apply_async(eta=naive)
    found = celery_zset_scheduler.lookup(app, result.id)
    assert found is not None
    expected = naive.replace(tzinfo=timezone.utc).timestamp() * 1000
    assert abs(found[0].score_ms - expected) <= 1


def test_min_countdown_sends_near_etas_to_the_broker(apps: AppFactory, r: redis.Redis,
                                                    redis_server: RedisServer) -> None:
    app = apps(zset_scheduler_min_countdown=5)
    record = app.tasks["t.record"]
    near = record.apply_async(kwargs={"tag": "near"}, countdown=1)
    far = record.apply_async(kwargs={"tag": "far"}, countdown=6)
    assert celery_zset_scheduler.lookup(app, near.id) is None
    assert celery_zset_scheduler.lookup(app, far.id) is not None
    broker = redis.Redis(port=r.connection_pool.connection_kwargs["port"], db=BROKER_DB)
    queued = [json.loads(m) for m in broker.lrange("celery", 0, -1)]
    assert [m["headers"]["id"] for m in queued] == [near.id]
    assert queued[0]["headers"]["eta"] is not None  # a plain Celery ETA message
    with own_worker(redis_server):
        assert near.get(timeout=30) == "near"


@contextmanager
def own_worker(redis_server: RedisServer) -> Iterator[None]:
    """A worker process of its own, for a plain ETA message: Celery 5.4's in-process test worker,
    started a second time in one process, never runs one (its timer is not started again)."""
    cluster = Cluster(redis_server)
    try:
        cluster.worker()
        yield
    finally:
        cluster.close()


def test_send_task_goes_through_the_store(apps: AppFactory) -> None:
    app = apps()
    result = app.send_task("t.record", kwargs={"tag": "by-name"}, countdown=0.5)
    found = celery_zset_scheduler.lookup(app, result.id)
    assert found is not None and found[0].state == "pending"
    assert found[1] is not None and found[1].task_name == "t.record"
    apps.dispatcher(app)
    apps.worker(app)
    assert result.get(timeout=20) == "by-name"


def test_retry_waits_in_the_store(apps: AppFactory) -> None:
    app = apps()
    apps.dispatcher(app)
    apps.worker(app, pool="prefork", concurrency=1)  # the retry is stored from a forked child
    result = app.tasks["t.retry_once"].apply_async(kwargs={"countdown": 2.0})
    wait_for(lambda: len(apps.executions()) == 1, what="the first attempt")
    held = wait_for(lambda: celery_zset_scheduler.lookup(app, result.id), what="the retry in the store")
    entry, message = held
    assert entry.state == "pending" and message is not None and message.headers["retries"] == 1
    assert result.get(timeout=30) == "done"
    attempts = apps.executions()
    assert [a["retries"] for a in attempts] == [0, 1]
    assert attempts[1]["at"] - attempts[0]["at"] >= 2.0  # correctness: a retry never runs early


def test_routing_priority_and_headers_are_kept(apps: AppFactory, r: redis.Redis) -> None:
    app = apps(task_queues=[Queue("celery"), Queue("reports", max_priority=9)])
    result = app.tasks["t.record"].apply_async(
        kwargs={"tag": "routed"}, countdown=0.2, queue="reports", priority=7, headers={"tenant": "acme"},
    )
    apps.dispatcher(app)
    broker = redis.Redis(port=r.connection_pool.connection_kwargs["port"], db=BROKER_DB)

    def queued() -> list[bytes]:
        return [m for key in broker.keys("reports*") for m in broker.lrange(key, 0, -1)]

    (raw,) = wait_for(queued, what="the message in the reports queue")
    message = json.loads(raw)
    assert message["headers"]["id"] == result.id
    assert message["headers"]["tenant"] == "acme"
    assert message["headers"]["eta"] is None
    assert message["properties"]["priority"] == 7
    assert message["properties"]["correlation_id"] == result.id
    apps.worker(app, queues=["reports"])
    assert result.get(timeout=20) == "routed"


def test_arguments_that_are_not_json_fail_at_the_call_site(apps: AppFactory) -> None:
    app = apps()
    with pytest.raises(TaskNotSerializable, match="'t.record'.*not json-serializable"):
        app.tasks["t.record"].apply_async(kwargs={"tag": object()}, countdown=10)
    with pytest.raises(EncodeError):  # still the exception type Celery users catch
        app.tasks["t.record"].apply_async(kwargs={"tag": {1, 2}}, countdown=10)
    assert pending(apps.store(app)) == 0


def test_pickle_needs_an_explicit_opt_in(apps: AppFactory) -> None:
    app = apps(task_serializer="pickle", accept_content=["pickle", "json"])
    with pytest.raises(TaskNotSerializable, match="zset_scheduler_accept_content"):
        app.tasks["t.record"].apply_async(countdown=10)
    opted = apps(task_serializer="pickle", accept_content=["pickle", "json"], result_serializer="pickle",
                 result_accept_content=["pickle"], zset_scheduler_accept_content=["json", "pickle"])
    result = opted.tasks["t.record"].apply_async(kwargs={"tag": ("a", 1)}, countdown=0.2)
    apps.dispatcher(opted)
    apps.worker(opted)
    assert result.get(timeout=20) == ("a", 1)  # a tuple survives: pickled, not JSON


@pytest.mark.default_user("the ACL rules read the settings, which configures the app")
def test_invalid_settings_fail_at_the_call_site(apps: AppFactory) -> None:
    app = apps(zset_scheduler_batch_size="eight")
    with pytest.raises(ConfigurationError, match="zset_scheduler_batch_size"):
        app.tasks["t.record"].apply_async(countdown=10)
    typo = apps(zset_scheduler_batchsize=10)
    with pytest.raises(ConfigurationError, match="unknown setting 'zset_scheduler_batchsize'"):
        typo.tasks["t.record"].apply_async(countdown=10)


def test_shard_count_mismatch_fails_at_the_call_site_and_in_the_dispatcher(apps: AppFactory) -> None:
    apps(shards=4).tasks["t.record"].apply_async(countdown=10)
    other = apps(shards=16)
    with pytest.raises(ShardCountMismatch, match="has 4 shards"):
        other.tasks["t.record"].apply_async(countdown=10)
    dispatcher = apps.dispatcher(other)
    dispatcher.thread.join(timeout=10)  # type: ignore[attr-defined]
    assert not dispatcher.thread.is_alive()  # type: ignore[attr-defined]
    assert isinstance(dispatcher.error, ShardCountMismatch)  # type: ignore[attr-defined]


@pytest.mark.default_user("the ACL rules read the settings, which configures the app")
def test_install_is_lazy_and_leaves_the_app_alone(apps: AppFactory, r: redis.Redis) -> None:
    gc.collect()  # earlier tests' garbage closes its connections now, not while we count
    clients_before = len(r.client_list())
    app = apps(install=False, task_routes={"t.record": {"queue": "special"}})
    celery_zset_scheduler.install(app)
    celery_zset_scheduler.install(app)  # twice is fine
    assert not app.configured  # no configuration read
    assert len(r.client_list()) == clients_before  # no connection made
    assert app.conf.task_routes == {"t.record": {"queue": "special"}}
    assert app.amqp.router.route({}, "t.record")["queue"].name == "special"
    result = app.tasks["t.record"].apply_async(kwargs={"tag": "routed"}, countdown=60)
    found = celery_zset_scheduler.lookup(app, result.id)
    assert found is not None and found[1] is not None and found[1].queue == "special"


def test_install_after_the_app_was_used(apps: AppFactory) -> None:
    app = apps(install=False)
    app.tasks["t.record"].apply_async(kwargs={"tag": "x"})  # builds app.amqp and app.control
    assert "amqp" in app.__dict__
    _ = app.control
    celery_zset_scheduler.install(app)
    result = app.tasks["t.record"].apply_async(countdown=60)
    assert celery_zset_scheduler.lookup(app, result.id) is not None
    result.revoke()
    assert celery_zset_scheduler.lookup(app, result.id) is None


@pytest.mark.default_user("the settings are given after the app is made")
def test_django_style_namespace_settings(apps: AppFactory, redis_server: object) -> None:
    app = apps(install=False)
    url = app.conf.zset_scheduler_url

    class DjangoSettings:
        CELERY_BROKER_URL = app.conf.broker_url
        CELERY_ZSET_SCHEDULER_URL = url
        CELERY_ZSET_SCHEDULER_PREFIX = "dj"
        CELERY_ZSET_SCHEDULER_SHARDS = "2"

    from celery import Celery

    django_app = Celery("dj", set_as_current=False)
    django_app.config_from_object(DjangoSettings, namespace="CELERY")
    celery_zset_scheduler.install(django_app)

    @django_app.task(name="dj.noop")
    def noop() -> None:
        return None

    result = noop.apply_async(countdown=60)
    found = celery_zset_scheduler.lookup(django_app, result.id)
    assert found is not None
    assert found[0].shard in (0, 1)
    store = apps.store(django_app)
    assert (store.keys.prefix, store.shards) == ("dj", 2)

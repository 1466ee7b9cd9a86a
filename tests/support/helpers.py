"""Test helpers: Celery apps wired to the test server, dispatcher threads, execution records."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker

import celery_zset_scheduler
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.dispatcher.build import build_dispatcher
from celery_zset_scheduler.dispatch.handoff import Outgoing, PublishReport
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.model.codec import StoredMessage
from celery_zset_scheduler.store.claims import Fence
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.testing import RedisServer

from . import acl

STORE_DB, BROKER_DB, BACKEND_DB, RECORD_DB = 0, 1, 2, 3
RECORDS = "executions"

# Short leases so that takeovers happen within a test's patience.
FAST = {
    "zset_scheduler_lock_timeout": 1.5,
    "zset_scheduler_max_interval": 0.5,
    "zset_scheduler_inflight_timeout": 2.0,
}


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02,
             what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def register_tasks(app: Celery, record_url: str) -> None:
    """The tasks the suite runs: each execution is recorded in Redis with its wall-clock time."""
    recorder = redis.Redis.from_url(record_url)

    @app.task(bind=True, name="t.record", shared=False)
    def record(self: Any, tag: Any = None, due: float | None = None, pad: str = "") -> Any:
        recorder.rpush(RECORDS, json.dumps({
            "id": self.request.id, "tag": tag, "due": due, "at": time.time(),
            "retries": self.request.retries, "hostname": self.request.hostname, "eta": self.request.eta,
            "headers": self.request.headers,
            # one per hand-off: the same tag twice is the broker delivering one message twice
            "delivery_tag": (self.request.properties or {}).get("delivery_tag"),
        }))
        return tag

    @app.task(bind=True, name="t.call", shared=False)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        """Records the arguments and Celery's short forms of them as the worker received them."""
        recorder.rpush(RECORDS, json.dumps({
            "id": self.request.id, "tag": "call", "at": time.time(), "args": list(args), "kwargs": kwargs,
            "argsrepr": self.request.argsrepr, "kwargsrepr": self.request.kwargsrepr,
        }))
        return len(args)

    @app.task(bind=True, name="t.plain_flaky", shared=False, autoretry_for=(ValueError,), max_retries=2,
              default_retry_delay=0.2)
    def plain_flaky(self: Any) -> None:
        """A plain Celery task (no base class of ours) that fails for good after two retries."""
        recorder.rpush(RECORDS, json.dumps({"id": self.request.id, "tag": "plain_flaky", "at": time.time(),
                                             "retries": self.request.retries}))
        raise ValueError(f"attempt {self.request.retries + 1} failed")

    @app.task(bind=True, name="t.plain_reject", shared=False)
    def plain_reject(self: Any) -> None:
        from celery.exceptions import Reject

        raise Reject("not for us", requeue=False)

    @app.task(bind=True, name="t.sleep", shared=False)
    def sleep(self: Any, seconds: float) -> float:
        recorder.rpush(RECORDS, json.dumps({"id": self.request.id, "tag": "sleep", "at": time.time()}))
        time.sleep(seconds)  # keeps a solo worker busy
        return seconds
    @app.task(bind=True, name="t.span", shared=False)
    def span(self: Any, tag: Any = None, seconds: float = 1.0) -> Any:
        """Records when it starts and when it ends (overlap tests)."""
        recorder.rpush(RECORDS, json.dumps({"id": self.request.id, "tag": tag, "phase": "start", "at": time.time()}))
        time.sleep(seconds)
        recorder.rpush(RECORDS, json.dumps({"id": self.request.id, "tag": tag, "phase": "end", "at": time.time()}))
        return tag

    @app.task(bind=True, name="t.retry_once", max_retries=3, shared=False)
    def retry_once(self: Any, countdown: float = 1.0) -> str:
        recorder.rpush(RECORDS, json.dumps({"id": self.request.id, "tag": "attempt",
                                             "retries": self.request.retries, "at": time.time(),
                                             "headers": self.request.headers}))
        if self.request.retries == 0:
            raise self.retry(countdown=countdown)
        return "done"


def register_task_side(app: Celery, record_url: str) -> None:
    """Tasks of the task-side features (issue 3): idempotency, retries, dead letters."""
    from celery.exceptions import Reject

    from celery_zset_scheduler import IdempotentTask, RetryPolicy, ZSetTask

    recorder = redis.Redis.from_url(record_url)

    def note(task: Any, tag: str, **extra: Any) -> None:
        recorder.rpush(RECORDS, json.dumps({
            "id": task.request.id, "tag": tag, "at": time.time(), "retries": task.request.retries,
            "pid": os.getpid(), **extra,
        }))

    @app.task(bind=True, base=IdempotentTask, name="t.charge", shared=False,
              idempotency_key="charge:{order_id}", idempotency_lease=2.0)
    def charge(self: Any, order_id: int, amount: int = 10, sleep: float = 0.0) -> dict[str, int]:
        token = self.request.idempotency_token
        note(self, "charge.started", order_id=order_id, token=token)
        time.sleep(sleep)
        note(self, "charge.done", order_id=order_id, token=token)
        return {"order_id": order_id, "charged": amount}

    @app.task(bind=True, base=IdempotentTask, name="t.refund", shared=False, idempotency_lease=1.0,
              idempotency_key=lambda order_id, **_: f"refund:{order_id}", idempotency_keep_failed=True)
    def refund(self: Any, order_id: int, sleep: float = 0.0, fail: bool = False) -> int:
        note(self, "refund.started", order_id=order_id)
        time.sleep(sleep)  # longer than the lease: kept alive by renewals only
        if fail:
            raise RuntimeError("the payment provider said no")
        note(self, "refund.done", order_id=order_id)
        return order_id

    @app.task(bind=True, base=ZSetTask, name="t.flaky", shared=False, autoretry_for=(RuntimeError,),
              retry_backoff=1, retry_jitter=False, max_retries=3)
    def flaky(self: Any) -> None:
        note(self, "flaky")
        raise RuntimeError(f"attempt {self.request.retries + 1} failed")

    @app.task(bind=True, base=ZSetTask, name="t.policy", shared=False, retry_policies={
        ValueError: None, KeyError: RetryPolicy(max_retries=2, backoff=0.4, backoff_max=1.0, jitter=True),
    })
    def policy(self: Any, kind: str) -> None:
        note(self, f"policy.{kind}")
        raise {"value": ValueError, "key": KeyError}[kind](kind)

    @app.task(bind=True, base=ZSetTask, name="t.reject", shared=False)
    def reject(self: Any) -> None:
        note(self, "reject")
        raise Reject("not for us", requeue=False)

    @app.task(bind=True, base=ZSetTask, name="t.fixable", shared=False)
    def fixable(self: Any, value: int) -> int:
        if recorder.get("broken"):
            note(self, "fixable.failed")
            raise RuntimeError("the bug is not fixed yet")
        note(self, "fixable.ok")
        return value * 2


class HeldForever:
    """The guard of a batch published by hand in a test: no lease that could lapse."""

    store_client = None

    def still_ours(self, shard: int) -> bool:
        return True

    def fence(self, shard: int) -> Fence:
        raise LookupError("published by hand: no fence")

    def lease_keys(self, shard: int) -> tuple[str, str]:
        raise LookupError("published by hand: no lease")

    def revoked(self, batch: Any, *, now: bool = False) -> frozenset[int]:
        return frozenset()

    def revoke_key(self, shard: int) -> str:
        raise LookupError("published by hand: no revoke records")


def publish_by_hand(publisher: Any, messages: list[StoredMessage]) -> PublishReport:
    """Publish stored messages with a publisher of the product, outside any dispatcher."""
    report: PublishReport = publisher.publish([Outgoing(m, 0) for m in messages], HeldForever())
    return report


def built_message(task: Any, args: Any = None, kwargs: Any = None, **options: Any) -> StoredMessage:
    """The exact message ``apply_async`` would store, handed back by the sender instead."""
    built: list[StoredMessage] = []
    task.apply_async(args, kwargs, **options, zset_template=built.append)
    (message,) = built
    return message


def executions(record_url: str) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(record_url)
    return [json.loads(x) for x in client.lrange(RECORDS, 0, -1)]


class AppFactory:
    """Makes installed Celery apps on the test server and cleans up their threads."""

    def __init__(self, server: RedisServer, *, acl_users: bool = True) -> None:
        self.server = server
        self.acl_users_wanted = acl_users and acl.acl_mode() and not server.password
        self.record_url = server.url_db(RECORD_DB)
        self._stack = contextlib.ExitStack()
        self.count = 0
        self.acl_users: list[str] = []

    def __call__(self, *, shards: int = 4, prefix: str = "zt", install: bool = True, **conf: Any) -> Celery:
        self.count += 1
        app = Celery(f"zt{self.count}", set_as_current=False)
        app.conf.update({
            "broker_url": self.server.url_db(BROKER_DB),
            "result_backend": self.server.url_db(BACKEND_DB),
            "zset_scheduler_url": self.server.url_db(STORE_DB),
            "zset_scheduler_prefix": prefix,
            "zset_scheduler_shards": shards,
            "worker_hijack_root_logger": False,
            "broker_connection_retry_on_startup": True,
            **FAST,
            **conf,
        })
        register_tasks(app, self.record_url)
        register_task_side(app, self.record_url)
        if self.acl_users_wanted:
            self._as_acl_user(app)
        if install:
            celery_zset_scheduler.install(app)
        return app

    def _as_acl_user(self, app: Celery) -> None:
        """Point the app's store, broker and backend at a user of exactly the documented rules."""
        admin = self.server.client()
        name = acl.create_user(admin, acl.rules_for(app))
        mine = f"redis://127.0.0.1:{self.server.port}/"
        for setting in ("broker_url", "result_backend", "zset_scheduler_url"):
            if str(app.conf[setting]).startswith(mine):
                app.conf[setting] = acl.as_user(str(app.conf[setting]), name)
        self.acl_users.append(name)

    def acl_refusals(self) -> list[dict[str, Any]]:
        admin = self.server.client()
        return [entry for name in self.acl_users for entry in acl.refusals(admin, name)]

    def store(self, app: Celery) -> Store:
        inst = installation_for(app)
        assert inst is not None
        return inst.store

    def worker(self, app: Celery, pool: str = "solo", **kwargs: Any) -> Any:
        return self._stack.enter_context(start_worker(
            app, pool=pool, concurrency=kwargs.pop("concurrency", 1), perform_ping_check=False,
            loglevel="WARNING", shutdown_timeout=20, **kwargs,
        ))

    def dispatcher(self, app: Celery, **kwargs: Any) -> Dispatcher:
        dispatcher = build_dispatcher(app, **kwargs)
        dispatcher.error = None  # type: ignore[attr-defined]

        def run() -> None:
            try:
                dispatcher.run()
            except Exception as exc:  # kept for the test to look at, as the CLI would print it
                dispatcher.error = exc  # type: ignore[attr-defined]

        thread = threading.Thread(target=run, daemon=True, name="test-dispatcher")
        thread.start()

        def stop() -> None:
            dispatcher.stop()
            thread.join(timeout=30)

        self._stack.callback(stop)
        dispatcher.thread = thread  # type: ignore[attr-defined]
        return dispatcher

    def executions(self) -> list[dict[str, Any]]:
        return executions(self.record_url)

    def close(self) -> None:
        self._stack.close()
        refused = self.acl_refusals() if self.acl_users else []
        # As an ACL user of the documented rules, nothing may be refused, not even quietly.
        assert not refused, [{k: v for k, v in e.items() if k in ("reason", "object", "context")} for e in refused]


@contextlib.contextmanager
def stopped(dispatcher: Dispatcher) -> Iterator[None]:
    yield
    dispatcher.stop()
    dispatcher.thread.join(timeout=30)  # type: ignore[attr-defined]

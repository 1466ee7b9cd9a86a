"""Test helpers: Celery apps wired to the test server, dispatcher threads, execution records."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker

import celery_zset_scheduler
from celery_zset_scheduler.celery.installation import installation_for
from celery_zset_scheduler.celery.runner import build_dispatcher
from celery_zset_scheduler.dispatcher import Dispatcher
from celery_zset_scheduler.store import Store
from celery_zset_scheduler.testing import RedisServer

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
    def record(self: Any, tag: Any = None, due: float | None = None) -> Any:
        recorder.rpush(RECORDS, json.dumps({
            "id": self.request.id, "tag": tag, "due": due, "at": time.time(),
            "retries": self.request.retries, "hostname": self.request.hostname,
        }))
        return tag

    @app.task(bind=True, name="t.retry_once", max_retries=3, shared=False)
    def retry_once(self: Any, countdown: float = 1.0) -> str:
        recorder.rpush(RECORDS, json.dumps({"id": self.request.id, "tag": "attempt",
                                             "retries": self.request.retries, "at": time.time()}))
        if self.request.retries == 0:
            raise self.retry(countdown=countdown)
        return "done"


def executions(record_url: str) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(record_url)
    return [json.loads(x) for x in client.lrange(RECORDS, 0, -1)]


class AppFactory:
    """Makes installed Celery apps on the test server and cleans up their threads."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.record_url = server.url_db(RECORD_DB)
        self._stack = contextlib.ExitStack()
        self.count = 0

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
        if install:
            celery_zset_scheduler.install(app)
        return app

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
        thread = threading.Thread(target=dispatcher.run, daemon=True, name="test-dispatcher")
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


@contextlib.contextmanager
def stopped(dispatcher: Dispatcher) -> Iterator[None]:
    yield
    dispatcher.stop()
    dispatcher.thread.join(timeout=30)  # type: ignore[attr-defined]

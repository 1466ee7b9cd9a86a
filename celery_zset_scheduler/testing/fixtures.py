"""Fixtures to test an app that uses celery-zset-scheduler (see :mod:`.pytest_plugin` to enable them).

- ``zset_redis_server`` (session): a private ``redis-server`` on a free loopback port;
- ``zset_config``: Celery settings on it (broker db 1, results db 2, store db 0, a prefix of the
  test's own, short leases); merge it into ``celery_config`` for ``celery.contrib.pytest``;
- ``zset_app``: an installed app with ``zset_config`` (define your tasks on it);
- ``zset_dispatcher``: ``zset_dispatcher(app)`` runs a dispatcher for ``app`` in a thread until
  the test ends;
- ``zset_dispatch_beside_workers``: a dispatcher runs beside every test worker of an installed
  app (``celery.contrib.testing.worker.start_worker``, ``celery.contrib.pytest``'s
  ``celery_worker``), started and stopped with it: countdown tasks run under ``start_worker``;
- ``zset_celery_app``, ``zset_celery_worker``: ``celery.contrib.pytest``'s ``celery_app``, installed,
  and its ``celery_worker`` with a dispatcher beside it.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import test_worker_started, test_worker_stopped

from ..celery.core.state import installation_for
from ..celery.dispatcher.build import build_dispatcher
from ..celery.install import install
from ..dispatch.loop import Dispatcher
from . import RedisServer

#: Short leases: a test's dispatcher takes its shards and hands them over within a second.
FAST = {"zset_scheduler_lock_timeout": 1.5, "zset_scheduler_max_interval": 0.5,
        "zset_scheduler_inflight_timeout": 5.0}


class RunningDispatcher:
    """A dispatcher in a thread of its own; ``stop()`` ends it."""

    def __init__(self, app: Any) -> None:
        self.dispatcher: Dispatcher = build_dispatcher(app)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="zset-test-dispatcher")
        self.thread.start()

    def _run(self) -> None:
        try:
            self.dispatcher.run()
        except BaseException as exc:  # kept for the test to see
            self.error = exc

    def stop(self) -> None:
        self.dispatcher.stop()
        self.thread.join(timeout=30)


@pytest.fixture(scope="session")
def zset_redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def zset_config(zset_redis_server: RedisServer) -> dict[str, Any]:
    zset_redis_server.client().flushall()
    return {
        "broker_url": zset_redis_server.url_db(1),
        "result_backend": zset_redis_server.url_db(2),
        "zset_scheduler_url": zset_redis_server.url_db(0),
        "zset_scheduler_prefix": f"zt-{secrets.token_hex(3)}",
        "zset_scheduler_shards": 2,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        **FAST,
    }


@pytest.fixture
def zset_app(zset_config: dict[str, Any]) -> Iterator[Celery]:
    app = Celery("zset-test", set_as_current=False)
    app.conf.update(zset_config)
    install(app)
    yield app
    app.close()


@pytest.fixture
def zset_dispatcher() -> Iterator[Callable[[Any], RunningDispatcher]]:
    running: list[RunningDispatcher] = []

    def start(app: Any) -> RunningDispatcher:
        running.append(RunningDispatcher(app))
        return running[-1]

    yield start
    for r in reversed(running):
        r.stop()


@pytest.fixture
def zset_dispatch_beside_workers() -> Iterator[dict[Any, RunningDispatcher]]:
    """While it is active, every test worker of an installed app gets a dispatcher of its own."""
    beside: dict[Any, RunningDispatcher] = {}

    def started(sender: Any = None, worker: Any = None, **_: Any) -> None:
        app = getattr(worker, "app", None)
        if app is not None and installation_for(app) is not None and worker not in beside:
            beside[worker] = RunningDispatcher(app)

    def stopped(sender: Any = None, worker: Any = None, **_: Any) -> None:
        running = beside.pop(worker, None)
        if running is not None:
            running.stop()

    test_worker_started.connect(started, weak=False)
    test_worker_stopped.connect(stopped, weak=False)
    try:
        yield beside
    finally:
        test_worker_started.disconnect(started)
        test_worker_stopped.disconnect(stopped)
        for running in beside.values():
            running.stop()


@pytest.fixture
def zset_celery_app(celery_app: Celery) -> Celery:
    """``celery.contrib.pytest``'s app, installed (give it ``zset_config`` through ``celery_config``)."""
    install(celery_app)
    return celery_app


@pytest.fixture
def zset_celery_worker(zset_celery_app: Celery, zset_dispatch_beside_workers: Any,
                       request: pytest.FixtureRequest) -> Any:
    """``celery.contrib.pytest``'s ``celery_worker`` for the installed app, a dispatcher beside it."""
    return request.getfixturevalue("celery_worker")

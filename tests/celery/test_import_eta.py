"""``celery zset import-eta``: a plain Celery app's native ETA backlog moves into the store and each
task then runs once, at its ETA; the rest stays in the broker; an interrupted run (kill -9) loses
and duplicates nothing, and a second run finishes it. Redis and RabbitMQ brokers."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu.entity import Exchange

from celery_zset_scheduler.celery.backlog.redis_broker import STAGING
from celery_zset_scheduler.testing import RedisServer

from ..support.amqp import amqp_app, classic, count, quorum, vhost
from ..support.cli_support import cli_env, invoke, out
from ..support.helpers import BROKER_DB, AppFactory, wait_for
from ..support.procs import Proc
from ..support.tools import iter_shard, pending

__all__ = ["vhost"]

pytestmark = pytest.mark.timeout(240)


def send(app: Celery, n: int, delay: float, tag: str, **options: Any) -> dict[str, float]:
    """``n`` tasks sent by plain Celery with countdowns from ``delay`` on: id -> ETA (epoch)."""
    sent = {}
    for i in range(n):
        countdown = delay + i * 0.05
        due = time.time() + countdown
        result = app.tasks["t.record"].apply_async(kwargs={"tag": f"{tag}{i}", "due": due}, countdown=countdown,
                                                   **options)
        sent[result.id] = due
    return sent


def immediate(app: Celery, n: int, **options: Any) -> set[str]:
    return {app.tasks["t.record"].apply_async(kwargs={"tag": f"now{i}"}, **options).id for i in range(n)}


def crash_holding(broker_url: str, queue: str, n: int) -> None:
    """A Kombu consumer fetches ``n`` messages without acking them and dies (they stay in unacked)."""
    code = ("import os, sys; from kombu import Connection\n"
            "c = Connection(sys.argv[1]); ch = c.default_channel\n"
            "got = [ch.basic_get(sys.argv[2], no_ack=False) for _ in range(int(sys.argv[3]))]\n"
            "assert all(got), got; os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, broker_url, queue, str(n)], check=True, timeout=60)


def ran_once_at_eta(apps: AppFactory, future: dict[str, float], others: set[str]) -> None:
    wanted = set(future) | others
    runs = wait_for(lambda: len(apps.executions()) >= len(wanted) and apps.executions(), timeout=60,
                    what=f"{len(wanted)} executions")
    time.sleep(1.0)
    runs = apps.executions()
    assert sorted(r["id"] for r in runs) == sorted(wanted)  # each once
    for r in runs:
        if r["id"] in future:
            late = r["at"] - future[r["id"]]
            assert 0 <= late < 3.0, f"ran {late:.2f}s after its ETA"


def test_a_redis_backlog_is_imported_and_runs_once_at_its_eta(apps: AppFactory, redis_server: RedisServer) -> None:
    plain = apps(install=False)
    future = send(plain, 20, 4.0, "f")
    others = immediate(plain, 3) | immediate(plain, 1, eta=datetime.now(timezone.utc) - timedelta(seconds=60))
    crash_holding(redis_server.url_db(BROKER_DB), "celery", 5)  # the 5 oldest: held by a dead worker
    broker = redis_server.client(BROKER_DB)
    assert (broker.llen("celery"), broker.hlen("unacked")) == (19, 5)

    app = apps()
    data = out(invoke(app, "import-eta", "--yes", "--json"))
    assert data["totals"] == {"seen": 24, "imported": 20, "already": 0, "kept": 4, "unreadable": 0}
    assert pending(apps.store(app)) == 20
    assert (broker.llen("celery"), broker.hlen("unacked"), broker.llen(STAGING + "celery")) == (4, 0, 0)
    apps.dispatcher(app)
    apps.worker(app)
    ran_once_at_eta(apps, future, others)


def test_a_dry_run_changes_nothing(apps: AppFactory, redis_server: RedisServer) -> None:
    plain = apps(install=False)
    send(plain, 5, 60.0, "f")
    immediate(plain, 2)
    crash_holding(redis_server.url_db(BROKER_DB), "celery", 2)
    broker = redis_server.client(BROKER_DB)
    before = (broker.lrange("celery", 0, -1), broker.hgetall("unacked"))
    app = apps()
    result = invoke(app, "import-eta", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would move 5 task(s)" in result.output
    assert (broker.lrange("celery", 0, -1), broker.hgetall("unacked")) == before
    assert pending(apps.store(app)) == 0


def test_a_run_killed_midway_is_finished_by_a_second_run(apps: AppFactory, redis_server: RedisServer) -> None:
    plain = apps(install=False)
    future = send(plain, 4000, 600.0, "f")
    kept = immediate(plain, 10)
    app = apps()
    store = apps.store(app)
    proc = Proc([sys.executable, "-m", "celery", "-A", "tests.support.cli_app", "zset", "import-eta", "--yes",
                 "--ignore-workers"], cli_env(redis_server))
    try:
        wait_for(lambda: pending(store) >= 500 or not proc.alive, timeout=60, interval=0.005, what="the import")
        assert proc.alive, f"the import ended before it was killed:\n{proc.output[-2000:]}"
        proc.kill9()
    finally:
        proc.terminate()
    first = pending(store)
    assert 0 < first < 4000, f"not interrupted midway ({first} imported)"
    second = out(invoke(app, "import-eta", "--yes", "--json", "--ignore-workers"))
    assert second["totals"]["imported"] + second["totals"]["already"] + first >= 4000
    stored = [e.task_id for s in range(store.shards) for e in iter_shard(store, s)]
    assert sorted(stored) == sorted(future)  # every one, once
    broker: redis.Redis = redis_server.client(BROKER_DB)
    left = broker.lrange("celery", 0, -1)
    assert len(left) == len(kept) and broker.llen(STAGING + "celery") == 0



def test_a_rabbitmq_backlog_with_delay_queues_is_imported(vhost: str, apps: AppFactory) -> None:
    queues = [quorum("zt.qq"), classic("zt.cq", Exchange("zt.direct", type="direct"))]
    plain = amqp_app(apps, vhost, queues, install=False)
    # A plain worker declares Celery's delay exchanges and queues (native delayed delivery), then stops.
    with start_worker(plain, pool="solo", perform_ping_check=False, loglevel="WARNING", shutdown_timeout=20):
        pass
    delayed = send(plain, 8, 5.0, "q")  # parked in celery_delayed_<n> by Celery itself
    plain_eta = send(plain, 8, 5.0, "c", queue="zt.cq")  # a native ETA message in the classic queue
    others = immediate(plain, 2, queue="zt.cq")
    assert count(vhost, "zt.cq") == 10
    app = amqp_app(apps, vhost, queues)
    data = out(invoke(app, "import-eta", "--yes", "--json", "--ignore-workers"))
    assert data["totals"]["imported"] == 16 and data["totals"]["kept"] == 2, data
    assert any(s["source"].startswith("celery_delayed_") and s["imported"] for s in data["sources"])
    assert count(vhost, "zt.cq") == 2
    apps.dispatcher(app)
    apps.worker(app)
    ran_once_at_eta(apps, {**delayed, **plain_eta}, others)

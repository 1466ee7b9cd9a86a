"""A worker outlives its Redis broker's `kill -9` and restart (real broker with AOF, real worker
processes, acks late): Kombu's transport made it exit with "Unrecoverable error" when it closed a
channel holding unacknowledged messages; this package's transport keeps it consuming."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from celery import Celery

from celery_zset_scheduler.celery.transport.redis_broker import TRANSPORT
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import BROKER_DB, RECORD_DB, AppFactory, executions, wait_for
from ..support.procs import Cluster

KILLS = 3
ACKS_LATE = {"task_acks_late": True, "task_reject_on_worker_lost": True}


@pytest.fixture
def broker() -> Iterator[RedisServer]:
    with RedisServer(appendonly=True) as server:  # appendfsync always: what was acked stays
        yield server


def _started(records_url: str) -> set[str]:
    return {r["id"] for r in executions(records_url) if r.get("phase") == "start"}


@pytest.mark.default_user("the broker is a server of its own, restarted")
def test_workers_outlive_broker_restarts_and_run_what_is_sent_after(
    broker: RedisServer, redis_server: RedisServer
) -> None:
    cluster = Cluster(broker, redis_server)
    records = redis_server.url_db(RECORD_DB)
    redis_server.client(RECORD_DB).flushdb()
    cluster.env.update(ZSET_TEST_RECORDS=records, ZSET_TEST_BACKEND="")
    producer = Celery("p", broker=broker.url_db(BROKER_DB), set_as_current=False)
    producer.conf.broker_connection_retry_on_startup = True
    sent: list[str] = []
    stop = threading.Event()

    def produce() -> None:  # about 100 tasks a second, through every restart
        while not stop.is_set():
            try:
                sent.append(producer.send_task("t.span", kwargs={"seconds": 0.05}).id)
            except Exception:  # the broker is down: the send failed, nothing to count
                time.sleep(0.1)
            time.sleep(0.01)

    try:
        workers = [cluster.worker("--pool", "threads", "--concurrency", "4", "--loglevel", "INFO", conf=ACKS_LATE)
                   for _ in range(2)]
        for worker in workers:
            worker.wait_for_output(r"ready\.", timeout=30)
        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        for _ in range(KILLS):
            wait_for(lambda: len(_started(records)) >= len(sent) // 2 > 0, timeout=30, what="tasks running")
            broker.restart(kill=True)
            time.sleep(3)  # reconnection, restore, consuming again
            assert all(w.alive for w in workers), [w.output[-3000:] for w in workers if not w.alive]
        after = len(sent)
        time.sleep(2)
        stop.set()
        thread.join(timeout=10)
        wait_for(lambda: set(sent[after:]) <= _started(records), timeout=60, what="the tasks sent after the restarts")
        lost = set(sent) - _started(records)
        # Kombu's BRPOP takes a message off its list before the worker records it as unacknowledged:
        # a broker killed in between loses it (one per worker and kill at most).
        assert len(lost) <= KILLS * len(workers), sorted(lost)
        assert all(w.alive for w in workers)
        assert "Unrecoverable error" not in "".join(w.output for w in workers)
    finally:
        stop.set()
        cluster.close()


def test_the_transport_is_ours_for_a_redis_broker_only_and_can_be_turned_off(apps: AppFactory) -> None:
    def transport(app: Celery, late_url: str | None = None) -> str:
        if late_url:
            app.conf.broker_url = late_url  # changed after the app was configured
        with app.connection_for_write() as conn:
            return f"{type(conn.transport).__module__}:{type(conn.transport).__name__}"

    assert transport(apps()) == TRANSPORT
    assert transport(apps(broker_url=f"{apps.server.url_db(1)};{apps.server.url_db(1)}")) == TRANSPORT  # failover
    assert transport(apps(install=False)) == "kombu.transport.redis:Transport"
    assert transport(apps(zset_scheduler_broker_transport=False)) == "kombu.transport.redis:Transport"
    assert transport(apps(broker_transport="redis")) == "kombu.transport.redis:Transport"  # the app's own
    amqp, pyamqp = "amqp://guest@127.0.0.1//", "kombu.transport.pyamqp:Transport"
    assert transport(apps(broker_url=amqp, zset_scheduler_url=apps.server.url_db(0))) == pyamqp
    assert transport(apps(), late_url=amqp) == pyamqp

"""Prometheus metrics scraped over HTTP from running dispatchers (in process and `zset run`)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import urllib.error
from pathlib import Path

import pytest

from celery_zset_scheduler.celery.core.state import ensure_installation
from celery_zset_scheduler.celery.dispatcher.build import build_dispatcher
from celery_zset_scheduler.dispatch.metrics import DispatcherMetrics, metrics_of
from celery_zset_scheduler.dispatch.observer import Observer
from celery_zset_scheduler.errors import ConfigurationError
from celery_zset_scheduler.testing import RedisServer

from ..support.cli_support import ROOT, cli_env, scrape, total
from ..support.helpers import AppFactory, wait_for
from ..support.tools import pending

CELERY = str(Path(sys.executable).with_name("celery"))


def test_a_dispatcher_serves_its_metrics(apps: AppFactory) -> None:
    app = apps(zset_scheduler_metrics_port=0)
    store = apps.store(app)
    for i in range(30):
        app.send_task("t.record", kwargs={"tag": i}, countdown=0.3)
    for i in range(5):
        app.send_task("t.record", kwargs={"tag": i}, countdown=3600)
    store.schedule("poison", 0, b"not a message")  # due long ago; the dispatcher dead-letters it
    ensure_installation(app).idempotency.count_lease_lost()  # as a worker reports a stale completion
    dispatcher = apps.dispatcher(app)
    metrics = metrics_of(dispatcher.observer)
    assert metrics is not None and metrics.port
    wait_for(lambda: pending(store) == 5 and ensure_installation(app).dead_letters.count() == 1,
             what="the due tasks dispatched and the poison dead-lettered")

    def settled() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        found = scrape(metrics.port)  # type: ignore[arg-type]
        return found if total(found, "celery_zset_pending_tasks") == 5 else None

    samples = wait_for(settled, what="the pending gauge to catch up")
    assert total(samples, "celery_zset_dispatched_tasks_total") == 30
    assert total(samples, "celery_zset_lateness_seconds_count") == 30
    assert total(samples, "celery_zset_lateness_seconds_sum") >= 0
    assert total(samples, "celery_zset_publish_duration_seconds_count") >= 1
    assert total(samples, "celery_zset_claim_duration_seconds_count") >= 4
    assert total(samples, "celery_zset_inflight_tasks") == 0
    assert total(samples, "celery_zset_lag_seconds") == 0  # nothing overdue
    assert total(samples, "celery_zset_leader") == 4
    assert total(samples, "celery_zset_leader_changes_total", change="acquired") == 4
    assert total(samples, "celery_zset_dead_lettered_tasks_total", reason="poison") == 1
    assert total(samples, "celery_zset_dead_letters") == 1
    assert total(samples, "celery_zset_worker_events", event="idempotency_lease_lost_completions") == 1
    shards = {dict(labels)["shard"] for (name, labels) in samples if name == "celery_zset_pending_tasks"}
    assert shards == {"0", "1", "2", "3"}
    dispatcher.stop()
    dispatcher.thread.join(timeout=30)  # type: ignore[attr-defined]

    def closed() -> bool:
        try:
            scrape(metrics.port)  # type: ignore[arg-type]
        except (urllib.error.URLError, ConnectionError):
            return True
        return False

    wait_for(closed, what="the metrics server to stop with the dispatcher")


def test_run_serves_metrics_on_the_port_it_prints(apps: AppFactory, redis_server: RedisServer) -> None:
    app = apps()  # the same store as tests.support.cli_app
    for i in range(8):
        app.send_task("t.record", kwargs={"tag": i}, countdown=0.5)
    proc = subprocess.Popen(
        [CELERY, "-A", "tests.support.cli_app", "zset", "run", "--metrics-port", "0", "-l", "WARNING"],
        env=cli_env(redis_server, zset_scheduler_lock_timeout=1.5), cwd=str(ROOT),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        def port() -> int | None:
            found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", "".join(lines))
            return int(found.group(1)) if found else None

        bound = wait_for(port, timeout=30, what="the metrics address on stderr")
        samples = wait_for(lambda: (s := scrape(bound)) and total(s, "celery_zset_dispatched_tasks_total") == 8 and s,
                           what="eight dispatched tasks counted")
        assert total(samples, "celery_zset_leader") == 4
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, "".join(lines)
    assert pending(apps.store(app)) == 0


def test_metrics_with_an_observer_of_ones_own(apps: AppFactory) -> None:
    class Counting(Observer):
        def __init__(self) -> None:
            self.acquired = 0

        def leadership(self, shard: int, acquired: bool) -> None:
            self.acquired += acquired

    app = apps()
    own = Counting()
    dispatcher = build_dispatcher(app, observer=own, metrics_port=0)
    metrics = metrics_of(dispatcher.observer)
    assert isinstance(metrics, DispatcherMetrics) and metrics.port
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: own.acquired == 4 and total(scrape(metrics.port), "celery_zset_leader") == 4,  # type: ignore[arg-type]
                 what="both observers told about the leaderships")
    finally:
        dispatcher.stop()
        thread.join(timeout=30)
        metrics.close()


def test_no_metrics_server_without_the_setting(apps: AppFactory) -> None:
    dispatcher = build_dispatcher(apps())
    assert metrics_of(dispatcher.observer) is None


def test_a_clear_error_without_prometheus_client(apps: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if the extra was not installed
    with pytest.raises(ConfigurationError, match=r"pip install 'celery-zset-scheduler\[metrics\]'"):
        build_dispatcher(apps(zset_scheduler_metrics_port=0))


def test_a_taken_port_is_a_clear_error(apps: AppFactory) -> None:
    first = build_dispatcher(apps(), metrics_port=0)
    metrics = metrics_of(first.observer)
    assert metrics is not None
    try:
        with pytest.raises(ConfigurationError, match="cannot listen"):
            build_dispatcher(apps(), metrics_port=metrics.port)
    finally:
        metrics.close()


def test_without_prometheus_client_the_error_names_the_flag_that_asked(
    apps: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ..support.cli_support import invoke

    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    result = invoke(apps(), "run", "--metrics-port", "0")
    assert result.exit_code == 1
    assert "--metrics-port is set but prometheus-client is not installed" in result.output
    assert "zset_scheduler_metrics_port" not in result.output

"""``celery zset doctor`` against real Redis servers configured well and badly."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from celery_zset_scheduler.testing import RedisServer

from ..support.cli_support import invoke, out
from ..support.helpers import AppFactory, wait_for
from ..support.procs import CELERY, Cluster

CHECKS = ["redis", "maxmemory_policy", "persistence", "shards", "clock", "dispatchers", "broker", "workers"]


def statuses(data: dict[str, object]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in data["checks"]}  # type: ignore[attr-defined]


@pytest.fixture
def lru_server() -> Iterator[RedisServer]:
    with RedisServer(appendonly=True, extra=["--maxmemory-policy", "allkeys-lru"]) as server:
        yield server


def test_doctor_on_the_test_server(apps: AppFactory) -> None:
    app = apps()
    app.send_task("t.record", countdown=600)
    result = invoke(app, "doctor", "--json")
    assert result.exit_code == 0
    data = out(result)
    assert data["ok"] is True and [c["name"] for c in data["checks"]] == CHECKS
    assert all(set(c) == {"name", "status", "detail"} for c in data["checks"])
    assert statuses(data) == {
        "redis": "ok", "maxmemory_policy": "ok", "persistence": "warn", "shards": "ok", "clock": "ok",
        "dispatchers": "warn", "broker": "ok", "workers": "warn",  # no worker answers yet
    }
    apps.dispatcher(app)
    wait_for(lambda: statuses(out(invoke(app, "doctor", "--json")))["dispatchers"] == "ok",
             what="doctor seeing the dispatcher lead every shard")
    text = invoke(app, "doctor")
    assert text.exit_code == 0 and "appendonly" in text.output and "every shard has a leader" in text.output


def test_doctor_fails_on_an_evicting_redis(apps: AppFactory, lru_server: RedisServer) -> None:
    app = apps(zset_scheduler_url=lru_server.url, broker_url=lru_server.url_db(1))
    result = invoke(app, "doctor", "--json")
    assert result.exit_code == 5
    data = json.loads(result.stdout)
    assert data["ok"] is False
    found = statuses(data)
    assert found["maxmemory_policy"] == "fail" and found["persistence"] == "ok"
    assert [c for c in CHECKS if found[c] == "fail"] == ["maxmemory_policy"]
    text = invoke(app, "doctor")
    assert text.exit_code == 5 and "FAIL" in text.output and "allkeys-lru" in text.output


def test_doctor_fails_on_an_unreachable_broker_or_store(apps: AppFactory) -> None:
    with RedisServer() as gone:
        url = gone.url
    no_broker = apps(broker_url=url)
    result = invoke(no_broker, "doctor", "--json")
    assert result.exit_code == 5
    assert statuses(json.loads(result.stdout))["broker"] == "fail"
    no_store = apps(zset_scheduler_url=url)
    result = invoke(no_store, "doctor", "--json")
    checks = json.loads(result.stdout)["checks"]
    assert result.exit_code == 5
    assert [(c["name"], c["status"]) for c in checks] == [("redis", "fail"), ("broker", "ok")]
    assert "cannot reach Redis" in checks[0]["detail"]


def test_doctor_fails_on_a_shard_count_mismatch(apps: AppFactory) -> None:
    apps(shards=4).send_task("t.record", countdown=600)
    result = invoke(apps(shards=6), "doctor", "--json")
    assert result.exit_code == 5
    data = json.loads(result.stdout)
    assert statuses(data)["shards"] == "fail"
    assert "has 4 shards" in next(c["detail"] for c in data["checks"] if c["name"] == "shards")


def test_doctor_lists_the_workers_that_run_without_the_plugin(apps: AppFactory, redis_server: RedisServer) -> None:
    app = apps()
    apps.worker(app, hostname="installed@test")
    result = invoke(app, "doctor", "--json")
    found = {c["name"]: c for c in out(result)["checks"]}
    assert found["workers"]["status"] == "ok" and "1 answered" in found["workers"]["detail"]
    cluster = Cluster(redis_server)
    try:
        # Its app was not installed: the worker answers that it has no plugin.
        uninstalled = cluster.spawn([CELERY, "-A", "tests.support.proc_app", "worker", "--pool", "solo",
                                     "--loglevel", "INFO", "-n", "uninstalled@test", "--without-gossip",
                                     "--without-mingle", "--without-heartbeat"], env={"ZSET_TEST_INSTALL": "0"})
        # A worker process that has never imported the plugin: it does not know the command.
        plain = cluster.spawn([CELERY, "-A", "tests.support.plain_app", "worker", "--pool", "solo", "--loglevel",
                               "INFO", "-n", "plain@test", "--without-gossip", "--without-mingle",
                               "--without-heartbeat"])
        for proc in (uninstalled, plain):
            proc.wait_for_output(r"ready\.", timeout=60)
        result = invoke(app, "doctor", "--json")
        assert result.exit_code == 5
        workers = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "workers")
        assert workers["status"] == "fail"
        assert "2 of 3 workers run without the plugin: plain@test, uninstalled@test" in workers["detail"]
        assert "install(app)" in workers["detail"]
        text = invoke(app, "doctor")
        assert "plain@test" in text.output and "FAIL" in text.output
    finally:
        cluster.close()

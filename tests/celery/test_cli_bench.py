"""``celery zset bench`` against the app's Redis: a small run, and a refused one that writes nothing."""

from __future__ import annotations

import json

import redis

from ..support.cli_support import invoke
from ..support.helpers import AppFactory


def test_bench_runs_on_the_apps_redis_and_cleans_up(apps: AppFactory, r: redis.Redis) -> None:
    app = apps()
    result = invoke(app, "bench", "--size", "2000", "--stream-seconds", "1", "--yes", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    names = [figure["name"] for figure in report["figures"]]
    assert names[:4] == ["bulk schedule_many", "apply_async(countdown)", "Redis bytes per pending task",
                         "dispatch, one dispatcher"]
    assert all(figure["ours"] and figure["ours"] > 0 for figure in report["figures"][:4])
    assert "schedule_many" in result.stderr  # progress lines
    # Nothing is left behind: no benchmark keys in the store's or the broker's database.
    port = r.connection_pool.connection_kwargs["port"]
    for db in (0, 1):
        assert redis.Redis(port=port, db=db).keys("*bench*") == []


def test_bench_asks_first(apps: AppFactory, r: redis.Redis) -> None:
    app = apps()
    result = invoke(app, "bench", "--size", "2000", input="n\n")
    assert result.exit_code == 4 and "aborted" in result.output
    assert r.dbsize() == 0

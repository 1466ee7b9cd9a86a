"""``celery zset reshard``: the dry run's table and JSON change nothing, the question, the move, and
what a process started afterwards with the old count is told."""

from __future__ import annotations

import redis

from celery_zset_scheduler.model.ids import member
from celery_zset_scheduler.model.reshard import shard_for
from celery_zset_scheduler.testing import RedisServer

from ..support.cli_support import invoke, out
from ..support.helpers import STORE_DB, AppFactory


def _snapshot(r: redis.Redis) -> dict[bytes, bytes]:
    return {k: r.dump(k) for k in sorted(r.keys("{zt:*"))}


def test_dry_run_then_reshard_then_the_old_count_is_refused(apps: AppFactory, redis_server: RedisServer) -> None:
    app = apps(shards=4)
    ids = [app.send_task("t.record", kwargs={"tag": i}, countdown=3600).id for i in range(60)]
    store = redis.Redis.from_url(redis_server.url_db(STORE_DB))
    before = _snapshot(store)

    plan = out(invoke(app, "reshard", "--to", "8", "--dry-run", "--json"))
    assert plan["dry_run"] is True and plan["shards_from"] == 4 and plan["shards_to"] == 8
    moving = sum(1 for i in ids if shard_for(i, 8) != shard_for(i, 4))
    assert sum(s["moving"] for s in plan["shards"]) == moving
    assert sum(s["kept"] for s in plan["shards"]) == len(ids) - moving
    text = invoke(app, "reshard", "--to", "8", "--dry-run")
    assert text.exit_code == 0 and f"4 -> 8 shards: would move {moving} entries" in text.output
    refused = invoke(app, "reshard", "--to", "8", input="n\n")
    assert refused.exit_code == 4
    assert _snapshot(store) == before  # neither the dry runs nor the refusal changed anything

    done = out(invoke(app, "reshard", "--to", "8", "--yes", "--json"))
    assert done["dry_run"] is False and done["moved"]["entries"] == moving
    for task_id in ids:
        assert store.zscore(f"{{zt:{shard_for(task_id, 8)}}}:due", member(task_id)) is not None

    stale = invoke(apps(shards=4), "status")
    assert stale.exit_code != 0
    assert "has 8 shards (it was resharded from 4)" in stale.output
    assert "set zset_scheduler_shards=8 and restart" in stale.output
    again = invoke(apps(shards=8), "reshard", "--to", "8", "--yes")
    assert again.exit_code != 0 and "already has 8 shards" in again.output

"""A producer or a worker whose store user lacks one rule: a clear error or log line naming the
rule, nothing written halfway, nothing lost (real redis-server, real ACL users, a real worker)."""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

import celery_zset_scheduler
from celery_zset_scheduler import PermissionRefused
from celery_zset_scheduler.celery.core.acl import plan_users
from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store import permissions
from celery_zset_scheduler.testing import RedisServer

from ..support import acl
from ..support.helpers import BACKEND_DB, BROKER_DB, STORE_DB, AppFactory, wait_for


def _redis_7(server: RedisServer) -> None:
    version = str(server.client().info("server")["redis_version"])
    if int(version.split(".")[0]) < 7:
        pytest.skip(f"Redis {version}: its scripts cannot ask ACL (redis.acl_check_cmd is 7.0's), so a write "
                    "cannot be checked before it runs (docs/acl.md)")


def _app_as(apps: AppFactory, server: RedisServer, words: list[str], **conf: Any) -> Celery:
    name = acl.create_user(server.client(), words)
    urls = {"zset_scheduler_url": STORE_DB, "broker_url": BROKER_DB, "result_backend": BACKEND_DB}
    return apps(**conf, **{k: acl.as_user(server.url_db(db), name) for k, db in urls.items()})


def _consistent(client: redis.Redis, keys: KeySpace) -> tuple[int, int]:
    """(entries, payloads) of every shard: equal unless a write stopped halfway."""
    shards = [keys.shard(s) for s in range(keys.shards)]
    entries = sum(int(client.zcard(k.due)) + int(client.zcard(k.inflight)) for k in shards)
    return entries, sum(int(client.hlen(k.msg)) for k in shards)


def _names_the_rule(error: str, rule: str) -> bool:
    if rule in error.split():
        return True
    named = re.findall(r"the key (\S+)", error)  # a key of a pipeline, named with its pattern
    return rule.startswith("~") and any(fnmatch.fnmatchcase(k, rule[1:]) for k in named)


def _writes(app: Celery, target: str) -> dict[str, Callable[[], Any]]:
    """Every kind of store write a producer makes; ``target`` is a pending task's id."""
    task = app.tasks["t.record"]
    return {
        "countdown": lambda: task.apply_async(countdown=600),
        "idempotency key": lambda: app.tasks["t.charge"].apply_async(kwargs={"order_id": 3}, countdown=600),
        "schedule_many": lambda: celery_zset_scheduler.schedule_many(task, [((), {}, 600)] * 3),
        "reschedule": lambda: celery_zset_scheduler.reschedule(app, target, countdown=900),
        "revoke": lambda: app.control.revoke(target),
        "cancel": lambda: celery_zset_scheduler.cancel(app, target),
    }


@pytest.mark.default_user("the producer's users are made here, one rule short each")
def test_a_producer_one_rule_short_is_told_which_rule_and_writes_nothing_halfway(
    apps: AppFactory, redis_server: RedisServer
) -> None:
    _redis_7(redis_server)
    owner = apps()  # the default user: what is stored before must stay stored
    keys = apps.store(owner).keys
    store_db = redis_server.client(STORE_DB)
    (plan,) = plan_users(owner, "producer")
    said: dict[str, list[str]] = {}
    for rule in plan.rules.words()[3:]:  # after resetkeys resetchannels -@all
        bystander = owner.tasks["t.record"].apply_async(countdown=600).id
        target = owner.tasks["t.record"].apply_async(countdown=600).id
        app = _app_as(apps, redis_server, [w for w in plan.rules.words() if w != rule])
        calls = _writes(app, target)
        for what, call in calls.items():
            try:
                call()
            except PermissionRefused as exc:
                assert _names_the_rule(str(exc), rule), (rule, what, str(exc))
                assert "celery zset acl" in str(exc) and acl.PASSWORD not in str(exc)
                said.setdefault(rule, []).append(what)
            except Exception as exc:  # Kombu's connection to the broker (Celery's own): Redis's words
                assert permissions.refused(exc), (rule, what, exc)
                assert not rule.startswith("+") or f"'{rule[1:]}'" in str(exc), (rule, exc)
            entries, payloads = _consistent(store_db, keys)
            assert entries == payloads, (rule, what, "a write stopped halfway", entries, payloads)
        assert celery_zset_scheduler.lookup(owner, bystander) is not None, rule  # nothing lost
        if {"revoke", "cancel"} <= set(said.get(rule, ())):  # refused both: the target was not touched
            assert celery_zset_scheduler.lookup(owner, target) is not None, rule
        store_db.flushdb()
    # Each store rule a producer's writes use is said when missing: the scripts, the keys.
    for needed in ("+evalsha", "+hset", "+zadd", f"~{plan.rules.keys[0]}", f"~{plan.rules.keys[1]}"):
        assert needed in said, (needed, sorted(said))


def test_a_worker_without_the_revoke_channel_says_so_once_and_still_drops_revoked_tasks(
    apps: AppFactory, redis_server: RedisServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="celery_zset_scheduler")
    monkeypatch.setattr(permissions, "_last", {})
    owner = apps()
    (plan,) = plan_users(owner, "worker")
    channel = f"&{apps.store(owner).keys.revoke_channel}"
    assert channel in plan.rules.words()
    worker = _app_as(apps, redis_server, [w for w in plan.rules.words() if w != channel])
    # Revoked while no worker runs: only the store's record can stop it.
    revoked = owner.tasks["t.record"].apply_async(kwargs={"tag": "revoked"}, countdown=60)
    celery_zset_scheduler.cancel(owner, revoked.id)  # out of the store, as if already handed off
    owner.control.revoke(revoked.id)
    apps.worker(worker)
    owner.tasks["t.record"].apply_async(kwargs={"tag": "revoked"}, task_id=revoked.id)  # it arrives anyway
    ran = owner.tasks["t.record"].apply_async(kwargs={"tag": "ran"})
    wait_for(lambda: ran.id in {r["id"] for r in apps.executions()}, timeout=30, what="the other task")
    assert revoked.id not in {r["id"] for r in apps.executions()}
    lines = [r.getMessage() for r in caplog.records if "config.refused" in r.getMessage()]
    assert len(lines) == 1, lines
    assert f"grant={channel}" in lines[0] and "every 5 s" in lines[0], lines
    assert "revokes.outage_started" not in caplog.text

"""Least privilege: each role as a Redis user made from exactly the rules `celery zset acl` prints
(real redis-server, real ACL users, a real worker), and what a missing rule does."""

from __future__ import annotations

import fnmatch
import logging
import re
from typing import Any

import pytest
from celery import Celery

import celery_zset_scheduler
from celery_zset_scheduler.celery.core.acl import plan_users
from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store import permissions
from celery_zset_scheduler.store.acl import Rules
from celery_zset_scheduler.testing import RedisServer

from ..support import acl
from ..support.cli_support import invoke, out
from ..support.helpers import BACKEND_DB, BROKER_DB, STORE_DB, AppFactory, wait_for


def role_app(apps: AppFactory, server: RedisServer, role: str, **conf: Any) -> tuple[Celery, str]:
    """An app whose store, broker and backend are reached as a user of ``role``'s printed rules."""
    probe = apps(install=False, **conf)
    (plan,) = plan_users(probe, role)  # one server: store, broker and backend are its databases
    name = acl.create_user(server.client(), plan.rules)
    urls = {"zset_scheduler_url": STORE_DB, "broker_url": BROKER_DB, "result_backend": BACKEND_DB}
    app = apps(**conf, **{k: acl.as_user(server.url_db(db), name) for k, db in urls.items()})
    return app, name


@pytest.mark.default_user("it compares the printed users with the app's URLs")
def test_the_printed_rules_follow_the_prefix_the_queues_and_the_url(
    apps: AppFactory, redis_server: RedisServer
) -> None:
    app = apps(prefix="shop.eu", task_default_queue="mail[eu]",
               zset_scheduler_url=f"redis://svc:pw@127.0.0.1:{redis_server.port}/0")
    data = out(invoke(app, "acl", "--role", "dispatcher", "--json"))
    # two users on one server: the store's (svc, from its URL) and the broker's
    assert [p["serves"] for p in data] == [["the store"], ["the broker"]]
    store = data[0]["rules"]
    assert "~shop.eu:*" in store and "~{shop.eu:*" in store
    assert "&shop.eu:wake" in store and "+info" in store and "+subscribe" in store
    assert not [r for r in store if r.startswith("+@") and r != "-@all"], store  # commands by name
    assert "pw" not in data[0]["command"] and data[0]["command"].startswith("ACL SETUSER svc on #")
    broker = data[1]["rules"]
    assert "~mail\\[eu\\]*" in broker and "~_kombu.binding*" in broker and "+lpush" in broker
    worker = out(invoke(app, "acl", "--role", "worker", "--json"))
    assert "~*.celery.pidbox*" in worker[1]["rules"] and "+brpop" in worker[1]["rules"]
    assert "&shop.eu:revokes" in worker[0]["rules"]
    text = invoke(app, "acl", "--role", "producer", "--user", "web").output
    assert text.count("ACL SETUSER") == 2 and "ACL SETUSER svc on #" in text and "ACL SETUSER web on >" in text


def test_each_role_works_as_a_user_of_exactly_its_rules(apps: AppFactory, redis_server: RedisServer) -> None:
    producer, p_user = role_app(apps, redis_server, "producer")
    worker, w_user = role_app(apps, redis_server, "worker")
    dispatcher, d_user = role_app(apps, redis_server, "dispatcher")
    cli, c_user = role_app(apps, redis_server, "cli")
    apps.worker(worker)
    apps.dispatcher(dispatcher)
    ids = [producer.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=0.5 + i * 0.1).id for i in range(8)]
    gone = producer.tasks["t.record"].apply_async(kwargs={"tag": "revoked"}, countdown=60)
    gone.revoke()
    retried = producer.tasks["t.retry_once"].apply_async(kwargs={"countdown": 0.5}, countdown=0.3)
    charged = producer.tasks["t.charge"].apply_async(kwargs={"order_id": 7}, countdown=0.3)
    wait_for(lambda: set(ids) <= {r["id"] for r in apps.executions()}, timeout=30, what="the timed tasks")
    assert retried.get(timeout=30) == "done" and charged.get(timeout=30) == {"order_id": 7, "charged": 10}
    assert celery_zset_scheduler.lookup(producer, gone.id) is None
    status = out(invoke(cli, "status", "--json"))
    assert status["totals"]["pending"] == 0 and status["dispatchers"]
    doctor = {c["name"]: c for c in out(invoke(cli, "doctor", "--json"))["checks"]}
    assert doctor["redis"]["status"] != "fail" and doctor["shards"]["status"] == "ok"
    assert doctor["workers"]["status"] == "ok", doctor["workers"]  # remote control through the broker
    admin = redis_server.client()
    for user in (p_user, w_user, d_user, c_user):
        assert acl.refusals(admin, user) == [], user  # nothing was refused, not even quietly


def _waiting(client: Any, keys: KeySpace) -> int:
    """Entries due or in flight in the store (read by the default user)."""
    shards = [keys.shard(s) for s in range(keys.shards)]
    return sum(int(client.zcard(k.due)) + int(client.zcard(k.inflight)) for k in shards)


def test_dropping_any_rule_of_the_dispatcher_is_said_with_its_grant_and_loses_nothing(
    apps: AppFactory, redis_server: RedisServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = str(redis_server.client().info("server")["redis_version"])
    if int(version.split(".")[0]) < 7:
        pytest.skip(f"Redis {version}: its scripts cannot ask ACL (redis.acl_check_cmd is 7.0's), so a "
                    "dispatcher cannot check its permissions before a claim (docs/acl.md)")
    caplog.set_level(logging.INFO, logger="celery_zset_scheduler")
    producer = apps()  # the default user: the tasks are stored whatever the dispatcher may do
    (plan,) = plan_users(producer, "dispatcher")
    rules = plan.rules.words()[3:]  # after resetkeys resetchannels -@all
    admin = redis_server.client()
    broker = redis_server.client(BROKER_DB)
    keys = apps.store(producer).keys
    store_db = redis_server.client(STORE_DB)
    said, unused = [], []
    for rule in rules:
        monkeypatch.setattr(permissions, "_last", {})  # each rule's message counts, not the last one's
        caplog.clear()
        broker.delete("celery")
        ids = [producer.tasks["t.record"].apply_async(countdown=0.05).id for _ in range(3)]
        name = acl.create_user(admin, [w for w in plan.rules.words() if w != rule])
        app = apps(zset_scheduler_url=acl.as_user(redis_server.url_db(STORE_DB), name),
                   broker_url=acl.as_user(redis_server.url_db(BROKER_DB), name), result_backend=None)
        dispatcher = apps.dispatcher(app)

        def said_lines() -> list[str]:
            # config.refused, or fast_path.off saying why (it takes the generic path)
            return [m for m in (r.getMessage() for r in caplog.records) if "config.refused" in m or
                    ("fast_path.off" in m and "ACL" in m)]

        try:
            wait_for(lambda: broker.llen("celery") >= 3 or said_lines(), timeout=10,
                     what=f"a hand-off or a config.refused line without {rule}: {acl.refusals(admin, name)}")
        finally:
            dispatcher.stop()
            dispatcher.thread.join(timeout=30)  # type: ignore[attr-defined]
        lines = said_lines()
        if lines:
            named = [k for line in lines for k in re.findall(r"what=the key (\S+)", line)]
            # the very rule dropped, or the key it covers
            assert any(rule in line for line in lines) or any(
                rule[0] == "~" and fnmatch.fnmatchcase(k, rule[1:]) for k in named), (rule, lines)
            assert "outage.started" not in caplog.text, (rule, caplog.text[-3000:])
            said.append(rule)
        else:
            assert acl.refusals(admin, name) == [], (rule, "refused without a word")
            unused.append(rule)
        # Nothing lost: what was not handed off waits in the store (or in flight, reaped later).
        total = _waiting(store_db, keys) + int(broker.llen("celery"))
        assert total >= 3, (rule, total)
        store_db.flushdb()
        broker.delete("celery")
        admin.execute_command("ACL", "DELUSER", name)
        assert ids
    assert len(said) >= len(rules) // 2, (said, unused)
    # The core of each part is needed on this path: the scripts, the store's keys, the queues.
    for needed in ("+evalsha", "+lpush", f"~{plan.rules.keys[0]}", "~celery*"):
        assert needed in said, (needed, said, unused)


def test_rules_merge_without_repeats() -> None:
    a = Rules(("get", "set"), ("a*",), ("c",))
    b = Rules(("set", "del"), ("a*", "b*"), ())
    assert (a + b).words() == ["resetkeys", "resetchannels", "-@all", "+get", "+set", "+del", "~a*", "~b*", "&c"]

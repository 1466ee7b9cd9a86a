"""The store through Redis Sentinel, set up as Celery's docs set up a Sentinel broker: a master, a
replica and three real sentinels on loopback ports, all with a password (the sentinels' own too)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import redis
from celery import Celery

from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.errors import ConfigurationError, NotReplicated
from celery_zset_scheduler.settings import Settings
from celery_zset_scheduler.store.client import location, make_client
from celery_zset_scheduler.testing.sentinel import RedisSentinelSet

from ..support.cli_support import invoke, out
from ..support.helpers import BROKER_DB, STORE_DB, AppFactory, wait_for

PASSWORD = "s3nt-pw"


def sentinel_conf(sentinels: RedisSentinelSet, broker_db: int = BROKER_DB) -> dict[str, Any]:
    """What a Sentinel user writes for Celery's broker, and nothing for the store."""
    return {
        "broker_url": sentinels.url(broker_db),
        "broker_transport_options": {"master_name": sentinels.master_name,
                                     "sentinel_kwargs": {"password": PASSWORD}},
        "zset_scheduler_url": None,
    }


def due_count(sentinels: RedisSentinelSet, app: Celery, apps: AppFactory) -> int:
    keys = apps.store(app).keys
    client = sentinels.master().client(db=BROKER_DB)
    return sum(int(client.zcard(keys.shard(s).due)) for s in range(keys.shards))


@pytest.mark.parametrize("url", [
    "sentinel://h1:26379/0",
    "sentinel://:pw@h1:26379/0;sentinel://h2:26380/0; sentinel://h3",
    "sentinel://user:pw@h1",
])
def test_sentinel_urls_are_accepted(url: str) -> None:
    assert Settings.from_config(lambda _: None, [], url=url, master_name="m").url == url


@pytest.mark.parametrize(("url", "words"), [
    ("sentinel://h1:26379/0;redis://h2:6379/0", "got a redis:// URL in a ;-separated list of sentinel:// URLs"),
    ("sentinel://h1:99999/0", "the port must be a number from 1 to 65535, got 99999 (e.g. sentinel://localhost:26379/0)"),
    ("sentinel://h1:26379/zero", "the database after the host must be a number"),
    ("sentinel://:pw@h1:notaport/0", "the port must be a number from 1 to 65535 (e.g. sentinel://"),
])
def test_bad_sentinel_urls_are_refused_without_showing_them(url: str, words: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Settings.from_config(lambda _: None, [], url=url)
    assert words in str(raised.value)
    assert "pw" not in str(raised.value) and "h1" not in str(raised.value)


def test_a_sentinel_store_without_a_master_name_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="zset_scheduler_master_name"):
        make_client("sentinel://127.0.0.1:26379/0")


def test_the_one_line_install_takes_the_brokers_sentinels(
    apps: AppFactory, sentinels: RedisSentinelSet, caplog: pytest.LogCaptureFixture
) -> None:
    """Celery's documented Sentinel broker, then install(app): the store is the broker's master
    and database, found through the same sentinels, and the fast path applies."""
    app = apps(**sentinel_conf(sentinels))
    inst = installation_for(app)
    assert inst is not None
    s = inst.settings
    assert s.url == sentinels.url(BROKER_DB) and s.master_name == "mymaster"
    assert s.sentinel_kwargs == {"password": PASSWORD}
    client = apps.store(app).client
    client.ping()  # the master's address is known once a connection was made
    assert f"master mymaster (now 127.0.0.1:{sentinels.master_port()})" in location(client)
    assert PASSWORD not in location(client) and location(client).startswith("sentinel://:***@")

    result = app.tasks["t.record"].apply_async(kwargs={"tag": "later"}, countdown=600)
    assert due_count(sentinels, app, apps) == 1  # on the master, in the broker's database
    assert app.AsyncResult(result.id).state == "PENDING"

    caplog.set_level(logging.INFO, logger="celery_zset_scheduler")
    apps.worker(app)
    apps.dispatcher(app)
    soon = app.tasks["t.record"].apply_async(kwargs={"tag": "soon"}, countdown=0.5)
    wait_for(lambda: soon.id in {r["id"] for r in apps.executions()}, timeout=30, what="the countdown task to run")
    assert "fast_path.on" in caplog.text, caplog.text


def test_the_fast_path_says_why_it_does_not_apply(
    apps: AppFactory, sentinels: RedisSentinelSet, caplog: pytest.LogCaptureFixture
) -> None:
    conf = {**sentinel_conf(sentinels), "zset_scheduler_url": sentinels.url(STORE_DB)}
    app = apps(**conf)  # the master name and the sentinels' password still come from the broker's options
    caplog.set_level(logging.INFO, logger="celery_zset_scheduler")
    apps.worker(app)
    apps.dispatcher(app)
    done = app.tasks["t.record"].apply_async(countdown=0.3)
    wait_for(lambda: done.id in {r["id"] for r in apps.executions()}, timeout=30, what="the task to run")
    assert f"the broker uses database {BROKER_DB} of the store's server, the store database {STORE_DB}" in caplog.text


def test_doctor_reports_the_master_the_sentinels_and_the_replicas(
    apps: AppFactory, sentinels: RedisSentinelSet
) -> None:
    app = apps(**sentinel_conf(sentinels))
    data = out(invoke(app, "doctor", "--json"))
    (check,) = [c for c in data["checks"] if c["name"] == "sentinel"]
    assert check["status"] == "ok", check
    master = f"127.0.0.1:{sentinels.master_port()}"
    expected = f"master 'mymaster' at {master}; 3 of 3 sentinels answered (quorum 2); 1 replica(s) in sync"
    assert expected in check["detail"]
    text = invoke(app, "doctor").output + invoke(app, "status").output
    assert PASSWORD not in text

    app_waiting = apps(**sentinel_conf(sentinels), zset_scheduler_wait_replicas=2)
    data = out(invoke(app_waiting, "doctor", "--json"))
    (check,) = [c for c in data["checks"] if c["name"] == "sentinel"]
    assert check["status"] == "warn" and "zset_scheduler_wait_replicas is 2" in check["detail"]


def test_one_sentinel_down_changes_nothing_while_a_quorum_remains(
    apps: AppFactory, sentinels: RedisSentinelSet
) -> None:
    app = apps(**sentinel_conf(sentinels))
    app.tasks["t.record"].apply_async(countdown=600)  # the store is made before the sentinel goes
    first = sentinels.sentinels[0]
    first.stop(kill=True)
    try:
        apps.worker(app)
        apps.dispatcher(app)
        ids = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=0.2).id for i in range(20)]
        wait_for(lambda: set(ids) <= {r["id"] for r in apps.executions()}, timeout=30, what="every task to run")
        data = out(invoke(app, "doctor", "--json"))
        (check,) = [c for c in data["checks"] if c["name"] == "sentinel"]
        assert check["status"] == "warn" and "2 of 3 sentinels answered" in check["detail"]
        assert f"sentinel 127.0.0.1:{first.port}" in check["detail"]
    finally:
        first.start()


def test_with_wait_replicas_a_master_hands_off_only_with_its_replicas(
    apps: AppFactory, sentinels: RedisSentinelSet, caplog: pytest.LogCaptureFixture
) -> None:
    """The fast path's fence: the Sentinel master has its replica and dispatches; a standalone
    server without one refuses to hand off (an outage, said once) and keeps the task."""
    caplog.set_level(logging.INFO, logger="celery_zset_scheduler")
    app = apps(**sentinel_conf(sentinels), zset_scheduler_wait_replicas=1)
    apps.worker(app)
    apps.dispatcher(app)
    done = app.tasks["t.record"].apply_async(countdown=0.2)
    wait_for(lambda: done.id in {r["id"] for r in apps.executions()}, timeout=30, what="the task to run")
    assert "fast_path.on" in caplog.text

    alone = apps(prefix="alone", zset_scheduler_wait_replicas=1, zset_scheduler_wait_timeout=0.05)
    store = apps.store(alone)
    with pytest.raises(NotReplicated):  # stored on the master, not confirmed
        alone.tasks["t.record"].apply_async(countdown=0.1, task_id="kept")
    apps.dispatcher(alone)
    wait_for(lambda: "NOREPLICAS 0 of the 1 replicas asked for" in caplog.text, timeout=10,
             what="the dispatcher to say why it hands off nothing")
    time.sleep(1.0)
    assert store.get("kept") is not None and "kept" not in {r["id"] for r in apps.executions()}


def test_a_subscriber_follows_a_graceful_failover_within_seconds(sentinels: RedisSentinelSet) -> None:
    """The wake channel and the revoke follower are pub/sub connections, in use all along: after
    a ``SENTINEL FAILOVER`` they hear the new master within seconds, not once the sentinels
    reconfigure the old one (about ten seconds later, when it closes its clients)."""
    client = make_client(sentinels.url(STORE_DB), master_name=sentinels.master_name,
                         sentinel_kwargs={"password": PASSWORD})
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("wake")
    assert pubsub.get_message(timeout=1.0) is None
    old = sentinels.master_port()
    new = sentinels.failover()
    promoted = time.monotonic()
    publisher = sentinels.node(new).client(db=STORE_DB)
    heard = None
    while heard is None and time.monotonic() - promoted < 8.0:
        client.ping()  # any use of the pool: it asks the sentinels at most once a second
        publisher.publish("wake", b"1")
        try:
            heard = pubsub.get_message(timeout=0.2)
        except redis.ConnectionError:  # its connection to the old master was closed: resubscribes
            continue
    assert heard is not None and heard["data"] == b"1", f"nothing heard from the new master ({old} -> {new})"
    assert client.connection_pool.master_address == ("127.0.0.1", new)
    pubsub.close()


def test_celery_reports_show_no_sentinel_password(apps: AppFactory, sentinels: RedisSentinelSet) -> None:
    app = apps(**{**sentinel_conf(sentinels), "zset_scheduler_url": sentinels.url(STORE_DB),
                  "zset_scheduler_sentinel_kwargs": {"password": PASSWORD}})
    apps.store(app).client.ping()
    shown = app.conf.humanize(with_defaults=False, censored=True)
    assert "zset_scheduler_url" in shown and "zset_scheduler_sentinel_kwargs" in shown
    assert PASSWORD not in shown

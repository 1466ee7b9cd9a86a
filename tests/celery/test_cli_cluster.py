"""``celery zset status`` and ``doctor`` on a store on Redis Cluster (the session's cluster; the
broker on the standalone test server)."""

from __future__ import annotations

from typing import Any

from celery_zset_scheduler.testing.cluster import RedisClusterServer

from ..support.cli_support import invoke, out
from ..support.helpers import AppFactory


def cluster_app(apps: AppFactory, cluster: RedisClusterServer, **conf: Any) -> Any:
    return apps(shards=12, zset_scheduler_url=cluster.url, **conf)


def test_status_names_the_master_of_each_shard(apps: AppFactory, cluster: RedisClusterServer) -> None:
    app = cluster_app(apps, cluster)
    for i in range(30):
        app.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=3600)
    data = out(invoke(app, "status", "--json"))
    store = apps.store(app)
    masters = {f"127.0.0.1:{p}" for p in cluster.master_ports()}
    for shard in data["shards"]:
        expected = cluster.master_of(store.keys.shard(shard["shard"]).due)
        assert shard["node"] == f"127.0.0.1:{expected.port}"
    assert {m["address"] for m in data["cluster"]["masters"]} == masters
    assert data["cluster"]["state"] == "ok" and data["cluster"]["slots_ok"] == 16384
    assert sum(len(m["shards"]) for m in data["cluster"]["masters"]) == 12
    assert all(m["replicas"] == 1 and m["aof"] for m in data["cluster"]["masters"])
    assert data["totals"]["pending"] == 30
    text = invoke(app, "status").output
    assert "NODE" in text and "cluster: ok, 16,384 of 16,384 slots served, 3 masters" in text


def test_doctor_checks_the_cluster(apps: AppFactory, cluster: RedisClusterServer) -> None:
    app = cluster_app(apps, cluster)
    checks = {c["name"]: c for c in out(invoke(app, "doctor", "--json"))["checks"]}
    assert checks["cluster"]["status"] == "ok", checks["cluster"]
    assert "3 masters, all 16384 slots served" in checks["cluster"]["detail"]
    assert "maxmemory_policy" not in checks and "persistence" not in checks  # checked per master instead
    # A master without its replica: a warning naming it (the replica is started again afterwards).
    master = cluster.master_of(apps.store(app).keys.shard(0).due)
    cluster.kill(cluster.replica_of(master))
    checks = {c["name"]: c for c in out(invoke(app, "doctor", "--json"))["checks"]}
    assert checks["cluster"]["status"] == "warn"
    assert f"127.0.0.1:{master.port} has no replica in sync" in checks["cluster"]["detail"]


def test_doctor_says_when_masters_hold_no_shard(apps: AppFactory, cluster: RedisClusterServer) -> None:
    app = apps(shards=1, zset_scheduler_url=cluster.url)
    checks = {c["name"]: c for c in out(invoke(app, "doctor", "--json"))["checks"]}
    assert checks["cluster"]["status"] == "warn"
    assert "2 of 3 masters hold no shard" in checks["cluster"]["detail"]

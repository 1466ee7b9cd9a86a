"""Health checks of an installation (``celery zset doctor``; reusable by other front ends).

Each check returns ok, warn or fail with a one-line reason. A fail means tasks can be lost or
will not run as scheduled; a warn means a guarantee of the README does not hold as configured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import redis

from ...model.clock import time_ms
from ...model.keys import FORMAT_VERSION
from ...model.urls import mask_url
from ...ops.cluster import read_cluster
from ...ops.status import read_status
from ...store import meta
from ...store.client import is_cluster
from ...store.pending import Store
from ...store.sentinel import is_sentinel, read_sentinels
from ..core.state import ensure_installation
from ..worker.hooks import CONTROL_COMMAND

Status = Literal["ok", "warn", "fail"]

MIN_VERSION = (6, 2)  # the scripts use ZMSCORE (6.2) and read TIME before writing (5.0)
CLOCK_WARN_MS = 1000
CLOCK_FAIL_MS = 60_000
WORKER_REPLY_TIMEOUT = 1.0  # seconds the doctor waits for workers to answer


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


def run_checks(app: Any) -> list[Check]:
    """Every check, in order; the Redis checks are left out when Redis cannot be reached."""
    inst = ensure_installation(app)
    try:
        settings = inst.settings
    except Exception as exc:  # any configuration error is the first thing to fix
        return [Check("settings", "fail", str(exc)), check_broker(app)]
    store = inst.store
    url = mask_url(str(settings.url))
    try:
        info = store.client.info("server")
    except redis.exceptions.NoPermissionError as exc:  # reached: the user may not run INFO
        checks = [Check("redis", "warn", f"reached Redis at {url}, but {_lacks(exc)}: its version, "
                                         "eviction policy and persistence were not checked")]
        info = None
    except redis.RedisError as exc:
        return [Check("redis", "fail", f"cannot reach Redis at {url}: {exc}"), check_broker(app)]
    else:
        checks = [check_version(info, url)]
    clustered = is_cluster(store.client)
    local: tuple[Callable[[Store], Check], ...] = (
        () if info is None else (check_cluster,) if clustered else (check_eviction, check_persistence))
    if is_sentinel(store.client):
        local = (check_sentinel, *local)
    for check in (*local, check_shards, check_clock, check_dispatchers):
        checks.append(_guarded(check, store))
    broker = check_broker(app)
    checks.append(broker)
    if broker.status == "ok":
        checks.append(check_workers(app, prefix=settings.prefix))
    return checks


def _guarded(check: Callable[[Store], Check], store: Store) -> Check:
    name = check.__name__.removeprefix("check_")
    try:
        return check(store)
    except redis.exceptions.NoPermissionError as exc:
        return Check(name, "warn", f"could not check: {_lacks(exc)}")
    except redis.RedisError as exc:
        return Check(name, "fail", f"could not check: {exc}")


def _lacks(exc: BaseException) -> str:
    """A refused permission, in words, with Redis's own (it names the command, key or channel)."""
    return f"this Redis user lacks a permission ({' '.join(str(exc).split())})"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


def check_version(info: dict[str, Any], url: str) -> Check:
    version = str(info.get("redis_version", "0"))
    found = _version(version)
    label = f"Redis {version} at {url}"
    if found < MIN_VERSION:
        return Check("redis", "fail", f"{label}: 6.2 or newer is required (the scripts use ZMSCORE)")
    return Check("redis", "ok", label)


def check_eviction(store: Store) -> Check:
    policy = str(store.client.info("memory").get("maxmemory_policy", "unknown"))
    if policy == "noeviction":
        return Check("maxmemory_policy", "ok", "noeviction: a full Redis refuses writes instead of dropping keys")
    return Check(
        "maxmemory_policy", "fail",
        f"{policy}: Redis may evict pending tasks when memory is full and they vanish silently; "
        "set maxmemory-policy noeviction",
    )


def check_persistence(store: Store) -> Check:
    info = store.client.info("persistence")
    if int(info.get("aof_enabled", 0)) == 1:
        return Check("persistence", "ok", "AOF is on: pending tasks survive a Redis restart")
    return Check(
        "persistence", "warn",
        "AOF is off: a Redis crash or restart loses the tasks scheduled since the last RDB snapshot "
        "(all of them without one); set appendonly yes (see the README)",
    )


def check_cluster(store: Store) -> Check:
    """A Redis Cluster: every slot served, every master with a replica, AOF and noeviction on
    every master, and the store's shards spread over all of them."""
    view = read_cluster(store)
    if view is None:
        return Check("cluster", "ok", "standalone Redis")
    masters = len(view.masters)
    if not view.covered:
        return Check("cluster", "fail", f"cluster state {view.state}, {view.slots_ok} of 16384 slots served: "
                                        "the shards of the missing slots wait until their master is back")
    problems: list[str] = []
    fails: list[str] = []
    for m in view.masters:
        if m.error:
            fails.append(f"{m.address} cannot be asked ({m.error})")
            continue
        if m.maxmemory_policy != "noeviction":
            fails.append(f"{m.address} has maxmemory-policy {m.maxmemory_policy} (it may evict pending tasks)")
        if not m.aof:
            problems.append(f"{m.address} has AOF off (a restart loses its shards' tasks)")
        if m.replicas == 0:
            problems.append(f"{m.address} has no replica in sync (its failure stops its shards until it is back)")
    idle = [m.address for m in view.masters if m.slots and not m.shards]
    if idle:
        problems.append(f"{len(idle)} of {masters} masters hold no shard ({', '.join(idle)}): raise "
                        "zset_scheduler_shards (several per master, see the README)")
    if fails:
        return Check("cluster", "fail", "; ".join(fails + problems))
    if problems:
        return Check("cluster", "warn", "; ".join(problems))
    spread = ", ".join(f"{m.address}: {len(m.shards)}" for m in view.masters)
    return Check("cluster", "ok", f"{masters} masters, all 16384 slots served, each with a replica and AOF on, "
                                  f"noeviction; shards per master: {spread}")


def check_sentinel(store: Store) -> Check:
    """Through Sentinel: the master the sentinels name, how many answered (against the quorum),
    and the master's replicas in sync (what a failover promotes, what ``wait_replicas`` counts)."""
    view = read_sentinels(store.client)
    where = f"master {view.master_name!r}"
    if not view.reached:
        return Check("sentinel", "fail", f"{where}: no sentinel answered ({'; '.join(view.problems)})")
    masters = sorted(set(view.masters))
    online = [r for r in view.replicas if r[1] == "online"]
    wanted = store.scripts.wait[0] if store.scripts.wait else 0
    text = (f"{where} at {', '.join(masters)}; {len(view.reached)} of {len(view.sentinels)} sentinels "
            f"answered (quorum {view.quorum}); {len(online)} replica(s) in sync"
            + "".join(f", {address} lag {lag}s" for address, _, lag in online))
    problems = [f"sentinel {p}" for p in view.problems]
    if len(masters) > 1:
        problems.append("the sentinels name different masters (a failover under way, or a split)")
    if view.quorum and len(view.reached) < view.quorum:
        problems.append(f"fewer sentinels answer than the quorum ({view.quorum}): no failover can be agreed")
    if not online:
        problems.append("no replica is in sync: a failover has nothing to promote")
    if wanted > len(online):
        problems.append(f"zset_scheduler_wait_replicas is {wanted}: every schedule waits for replicas that "
                        "are not there and fails with NotReplicated")
    return Check("sentinel", "warn" if problems else "ok", "; ".join([text, *problems]))


def check_shards(store: Store) -> Check:
    recorded = meta.read(store.client, store.keys)
    prefix = store.keys.prefix
    if recorded.shards is None:
        return Check("shards", "ok", f"store {prefix!r} not created yet: first use records {store.shards} shards")
    found = meta.problem(store.keys, recorded, store.configured)
    if found:
        return Check("shards", "fail", f"{found}; until then clients and dispatchers refuse to start")
    if recorded.moving_to is not None:
        return Check("shards", "warn", f"store {prefix!r} is being resharded from {recorded.shards} to "
                     f"{recorded.moving_to} shards (`celery zset reshard --to {recorded.moving_to}` resumes it)")
    return Check("shards", "ok", f"store {prefix!r}: {store.shards} shards, format {FORMAT_VERSION}")


def check_clock(store: Store) -> Check:
    sent = time.time()
    now = time_ms(store.client.time())
    back = time.time()
    skew = now - (sent + back) / 2 * 1000
    error = (back - sent) * 500
    direction = "behind" if skew > 0 else "ahead of"
    text = f"this host is {abs(skew) / 1000:.3f}s {direction} Redis (measured to ±{error / 1000:.3f}s)"
    if abs(skew) - error <= CLOCK_WARN_MS:
        return Check("clock", "ok", text)
    why = "countdowns computed on this host become due that much early or late"
    return Check("clock", "fail" if abs(skew) - error > CLOCK_FAIL_MS else "warn", f"{text}: {why}; sync it (NTP)")


def check_dispatchers(store: Store) -> Check:
    status = read_status(store)
    alive = len(status.dispatchers)
    leaderless = [s.shard for s in status.shards if not s.locked]
    if alive == 0:
        return Check("dispatchers", "warn", f"no dispatcher is running: {status.pending:,} pending tasks wait; "
                                            "start `celery -A proj zset run` or `beat -S zset`")
    if leaderless:
        shown = ",".join(map(str, leaderless[:20])) + ("..." if len(leaderless) > 20 else "")
        return Check("dispatchers", "warn", f"{alive} alive, but shards {shown} have no leader")
    return Check("dispatchers", "ok", f"{alive} alive, every shard has a leader")


def check_broker(app: Any) -> Check:
    url = mask_url(str(app.conf.broker_write_url or app.conf.broker_url or "amqp://"))
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0.2, timeout=5)
    except Exception as exc:  # kombu raises many types: any failure means not reachable
        return Check("broker", "fail", f"cannot reach the broker at {url}: {' '.join(str(exc).split())}")
    return Check("broker", "ok", f"reachable at {url}")


def check_workers(app: Any, *, prefix: str | None = None, timeout: float = WORKER_REPLY_TIMEOUT) -> Check:
    """Ask every worker (remote control) whether its app has the plugin installed.

    A worker without it publishes retries as native ETA messages held in its memory, discards
    messages for task names it does not know, dead-letters nothing and keeps no durable revokes:
    that is a fail. Workers started with remote control disabled cannot be asked.
    """
    try:
        # A connection of its own: collecting replies leaves a poll pending on the connection,
        # which must not go back to the app's pool for a producer to inherit.
        with app.connection_for_write() as connection:
            replies = app.control.broadcast(CONTROL_COMMAND, reply=True, timeout=timeout, connection=connection)
    except Exception as exc:  # kombu raises many types
        return Check("workers", "warn", f"could not ask the workers: {' '.join(str(exc).split())}")
    answers: dict[str, Any] = {}
    for reply in replies or ():
        answers.update(reply)
    if not answers:
        return Check("workers", "warn", f"no worker answered within {timeout:g}s (none running, or remote "
                                        "control disabled): cannot tell whether they have the plugin")
    without = sorted(n for n, a in answers.items() if not (isinstance(a, dict) and a.get("installed")))
    elsewhere = sorted(n for n, a in answers.items()
                       if n not in without and prefix is not None and a.get("prefix") not in (None, prefix))
    if without:
        return Check("workers", "fail", (
            f"{len(without)} of {len(answers)} workers run without the plugin: {', '.join(without)}; their "
            "retries wait in worker memory as native ETA messages and unknown tasks are discarded. "
            "Call celery_zset_scheduler.install(app) in the module the worker loads (-A)"
        ))
    if elsewhere:
        return Check("workers", "warn", f"{len(elsewhere)} of {len(answers)} workers use another store prefix: "
                                        f"{', '.join(elsewhere)}")
    return Check("workers", "ok", f"{len(answers)} answered, every one with the plugin installed")

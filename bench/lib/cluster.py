"""The store on a 3-master Redis Cluster next to one standalone Redis, in the same run
(``python -m bench --cluster``): bulk scheduling, ``apply_async(countdown=…)`` and the dispatch
rate of one dispatcher, with the broker on a standalone Redis in both cases (Kombu has no
cluster transport).

Both stores get the same shard count, AOF with ``appendfsync everysec``, the same tasks and the
same broker server, so the
difference is the cluster: one connection per master for the bulk stream, the calls of a
dispatch pass grouped per master (one round trip for all of them), and three ``redis-server``
processes sharing the machine's cores with the benchmark itself.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any

from celery_zset_scheduler.testing import RedisServer
from celery_zset_scheduler.testing.cluster import RedisClusterServer, cluster_support

from .dispatching import dispatch_rate
from .environment import make_env
from .scheduling import apply_async, bulk


@dataclass(frozen=True)
class StoreFigures:
    store: str
    shards: int
    bulk_per_s: float
    apply_async_per_s: float
    dispatch_per_s: float


def run_cluster_benchmark(*, bulk_count: int, calls: int, dispatch: int, shards: int,
                          progress: Callable[[str], None]) -> list[StoreFigures]:
    why = cluster_support()
    if why is not None:
        raise RuntimeError(f"cannot start a local Redis Cluster: {why}")
    out = []
    with ExitStack() as stack:
        broker = stack.enter_context(RedisServer())
        # AOF on both, fsync once a second (the usual production setting): like for like.
        standalone = stack.enter_context(RedisServer(appendonly=True, extra=["--appendfsync", "everysec"]))
        progress("starting a 3-master cluster (one replica each, AOF on, fsync every second)")
        cluster = stack.enter_context(RedisClusterServer(appendfsync="everysec"))
        for label, url in (("standalone Redis", standalone.url), ("Redis Cluster, 3 masters", cluster.url)):
            env = make_env(url, broker.url, shards=shards, topology=label)
            progress(f"{label}: bulk scheduling of {bulk_count:,}")
            rate = bulk(env, bulk_count)
            progress(f"{label}: {calls:,} apply_async(countdown=...)")
            single = apply_async(env.ours, calls, countdown=3600.0)
            progress(f"{label}: dispatching {dispatch:,} due tasks")
            drained = dispatch_rate(env, dispatch)
            out.append(StoreFigures(label, shards, rate.per_second, single.per_second, drained.per_second))
            env.ours.close()
            env.plain.close()
            if url == cluster.url:
                cluster.flushall()
            else:
                standalone.client().flushall()
    return out


def format_cluster_report(figures: list[StoreFigures]) -> str:
    rows = [("store", "shards", "bulk scheduling", "apply_async(countdown)", "dispatch, one dispatcher")]
    for f in figures:
        rows.append((f.store, str(f.shards), f"{f.bulk_per_s:,.0f} tasks/s", f"{f.apply_async_per_s:,.0f} calls/s",
                     f"{f.dispatch_per_s:,.0f} tasks/s"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def cluster_json(figures: list[StoreFigures]) -> list[dict[str, Any]]:
    return [asdict(f) for f in figures]

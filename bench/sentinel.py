"""The store through Redis Sentinel: ``python -m bench.sentinel`` (own servers, about a minute).

1. **Rates**: on one Sentinel-managed master (a replica, three sentinels, AOF ``everysec``), the
   same app with ``redis://`` to the master and with ``sentinel://`` through the sentinels, in
   turns: ``apply_async(countdown=…)`` one call at a time, and one dispatcher draining due tasks
   (the broker is the same master and database: the fast path), next to plain Celery's
   ``apply_async(countdown=…)`` to the same broker. Discovery costs one sentinel round trip per new
   connection, and the pool asks the sentinels once a second while in use.
2. **What a failover loses**: a producer schedules as fast as it can through Sentinel; the master
   is ``kill -9``'d right after its replica fell ``--lag`` seconds behind (paused: a slow link or
   host); once that replica is promoted, the acknowledged schedules missing from it are
   counted, with ``zset_scheduler_wait_replicas`` 0 (asynchronous replication) and 1, for
   ``apply_async`` one call at a time and for ``schedule_many`` of 500 a call.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

from celery_zset_scheduler import schedule_many
from celery_zset_scheduler.errors import StoreUnavailable
from celery_zset_scheduler.testing.sentinel import RedisSentinelSet

from .lib.dispatching import dispatch_rate
from .lib.environment import BenchEnv, make_env
from .lib.scheduling import apply_async

SERVER_ARGS = ["--appendfsync", "everysec"]


def sentinel_env(sentinels: RedisSentinelSet, *, through: str, token: str, shards: int,
                 conf: dict[str, Any] | None = None) -> BenchEnv:
    """The store on the broker's master and database (db 0), reached ``through`` the sentinels or
    with a plain URL to today's master."""
    if through == "sentinel":
        url = sentinels.url(0)
        options = {"broker_transport_options": {"master_name": sentinels.master_name}}
        return make_env(url, url, shards=shards, topology="sentinel://", token=token,
                        both=options, conf={"zset_scheduler_master_name": sentinels.master_name, **(conf or {})})
    url = sentinels.master().url_db(0)
    return make_env(url, url, shards=shards, topology="redis://", token=token, conf=conf)


def rates(calls: int, dispatch: int, shards: int, rounds: int, say: Callable[[str], None]) -> list[str]:
    lines = []
    with RedisSentinelSet(server_args=SERVER_ARGS) as sentinels:
        for round_ in range(1, rounds + 1):
            for through in ("redis", "sentinel"):
                env = sentinel_env(sentinels, through=through, token=f"{through[:3]}{round_}", shards=shards)
                say(f"round {round_}, {env.topology}: {calls:,} apply_async, {dispatch:,} dispatched")
                ours = apply_async(env.ours, calls, countdown=3600.0)
                plain = apply_async(env.plain, calls, countdown=3600.0)
                env.purge_queue()
                drained = dispatch_rate(env, dispatch)
                lines.append(f"round {round_}  {env.topology:<11} apply_async(countdown) {ours.per_second:>7,.0f} "
                             f"calls/s (plain Celery {plain.per_second:,.0f})  dispatch {drained.per_second:>8,.0f} "
                             f"tasks/s")
                env.cleanup()
                env.ours.close()
                env.plain.close()
    return lines


def failover_loss(wait_replicas: int, bulk: int, seconds: float, lag: float, say: Callable[[str], None]) -> str:
    """Acknowledged schedules missing on the promoted replica after a ``kill -9`` of the master;
    ``bulk``: 0, one ``apply_async`` at a time; else ``schedule_many`` of that many a call."""
    with RedisSentinelSet(server_args=SERVER_ARGS) as sentinels:
        conf = {"zset_scheduler_wait_replicas": wait_replicas, "zset_scheduler_wait_timeout": 1.0}
        env = sentinel_env(sentinels, through="sentinel", token=f"loss{wait_replicas}", shards=8, conf=conf)
        task = env.task(env.ours)
        acked: list[str] = []
        refused = 0
        stop = threading.Event()

        def produce() -> None:
            nonlocal refused
            i = 0
            while not stop.is_set():
                try:
                    if bulk:
                        acked.extend(schedule_many(task, (((j, j), {}, 3600) for j in range(i, i + bulk))))
                    else:
                        task.apply_async((i, i), countdown=3600, task_id=f"loss-{i}")
                        acked.append(f"loss-{i}")
                except StoreUnavailable:
                    refused += max(bulk, 1)
                    time.sleep(0.01)
                i += max(bulk, 1)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        time.sleep(seconds)
        replica = next(n for n in sentinels.nodes if n.port != sentinels.master_port())
        if lag:  # a replica behind (a slow link, a busy host): paused, then the master dies
            replica.pause()
            time.sleep(lag)
        say(f"wait_replicas={wait_replicas}: kill -9 of the master after {len(acked):,} schedules")
        old = sentinels.kill_master()
        replica.resume()
        killed_at = len(acked)
        promoted = sentinels.wait_new_master(old.port)
        time.sleep(1.0)
        stop.set()
        producer.join(timeout=30)
        store = env.store
        present = 0
        for start in range(0, len(acked), 1000):
            ids = acked[start:start + 1000]
            present += sum(1 for task_id in ids if store.get(task_id) is not None)
        lost = len(acked) - present
        how = f"schedule_many of {bulk}" if bulk else "apply_async one at a time"
        return (f"wait_replicas={wait_replicas}  {how}, replica {lag:g} s behind: acknowledged "
                f"{len(acked):,} ({killed_at:,} before the kill), missing on the promoted master (port {promoted}) "
                f"{lost:,}; refused and not acknowledged {refused:,}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sentinel", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="apply_async calls per round and URL")
    parser.add_argument("--dispatch", type=int, default=50_000, help="due tasks drained per round and URL")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0, help="scheduling before the master is killed")
    parser.add_argument("--lag", type=float, default=3.0,
                        help="the replica is paused this long right before the master is killed (0: not at all)")
    parser.add_argument("--no-failover", action="store_true", help="the rates only")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    say: Callable[[str], None] = (lambda _: None) if args.quiet else (lambda m: print(f"# {m}", flush=True))
    for line in rates(args.calls, args.dispatch, args.shards, args.rounds, say):
        print(line, flush=True)
    for bulk in () if args.no_failover else (0, 500):
        for wait_replicas in (0, 1):
            print(failover_loss(wait_replicas, bulk, args.seconds, args.lag, say), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What collecting shared prefixes costs: ``python -m bench.collect [--size N] [--shards S] [--rounds K]``.

Starts its own redis-server and stores ``--size`` pending ``add(i, i)`` tasks (``schedule_many``),
then writes 2,000 more under another ``origin`` (a producer since restarted) and cancels them.
Each round runs one whole collection cycle of every shard, a step at a time (500 values a step,
what a dispatcher's leader does at each heartbeat) and prints: steps a cycle, the Redis time of a
step (``INFO commandstats``: the script's own time, over the cycle only), the slowest step seen by
the client (round trip included), and what one step a second per shard costs the server. The
second round deletes what the first set aside. Then, ``--drains`` times in turn, the fast path's
drain of ``--due`` tasks (``bench.drain``'s) by a dispatcher that collects (a cycle always under
way: one step per shard each heartbeat) and by one that does not, on top of the same pending tasks.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from dataclasses import replace
from typing import Any

from celery_zset_scheduler.model.codec import decode, encode
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry
from celery_zset_scheduler.store.shared_gc import STEP_VALUES, Step, step_call, usage
from celery_zset_scheduler.testing import RedisServer

from .drain import drain_once
from .lib.environment import make_env
from .lib.scheduling import bulk


def _script_usec(client: Any) -> tuple[float, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec", 0)), int(stats.get("calls", 0))


def _gone_producer(store: Store, count: int) -> int:
    """Entries under another ``origin`` (a new shared prefix in every shard), then cancelled."""
    sample = store.page(0, limit=1, with_payloads=True).entries[0]
    message = decode(sample.task_id, sample.payload or b"")
    entries = []
    for _ in range(count):
        task_id = str(uuid.uuid4())
        headers = {**message.headers, "id": task_id, "root_id": task_id, "origin": "gen1@gone-host"}
        properties = {**message.properties, "correlation_id": task_id}
        raw = encode(replace(message, task_id=task_id, headers=headers, properties=properties))
        entries.append(NewEntry(task_id, sample.due_ms, raw))
    store.schedule_many(entries)
    return sum(status == "cancelled" for status in store.cancel([e.task_id for e in entries]).values())


def one_cycle(store: Store, client: Any, shards: int) -> dict[str, Any]:
    """Every shard's cycle, from its first step to its end."""
    client.config_resetstat()
    walls: list[float] = []
    deleted = steps = 0
    for shard in range(shards):
        while True:
            started = time.perf_counter()
            step: Step = store.scripts.run(step_call(store.keys, shard, 0, STEP_VALUES))
            walls.append(time.perf_counter() - started)
            steps += 1
            if step.phase == "wait":  # the first look at a shard
                continue
            if step.phase == "ended":
                deleted += step.first
                break
    usec, calls = _script_usec(client)
    return {"steps": steps / shards, "step_us": usec / calls, "slowest_ms": max(walls) * 1000,
            "median_ms": statistics.median(walls) * 1000, "deleted": deleted}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.collect", description=__doc__.split("\n", 1)[0])
    p.add_argument("--size", type=int, default=1_000_000, help="pending tasks (1,000,000)")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2, help="cycles of every shard, one after the other")
    p.add_argument("--due", type=int, default=100_000, help="tasks a drain hands over (100,000)")
    p.add_argument("--drains", type=int, default=3, help="drains with and without collecting, in turn")
    args = p.parse_args(argv)
    with RedisServer() as server:
        client = server.client()
        env = make_env(server.url, server.url, shards=args.shards, conf={"zset_scheduler_collect_interval": 0})
        scheduled = bulk(env, args.size)
        print(f"schedule_many of {args.size:,} tasks: {scheduled.per_second:,.0f} tasks/s", flush=True)
        store = env.store
        gone = _gone_producer(store, 2000)
        print(f"a gone producer: {gone:,} tasks written under another origin, then cancelled", flush=True)
        before = usage(client, store.keys, range(args.shards))
        print(f"prefixes: {sum(u.live for u in before)} in {args.shards} shards", flush=True)
        for n in range(args.rounds):
            found = one_cycle(store, client, args.shards)
            per_second = found["step_us"] * args.shards / 1e6  # one step a second per shard
            print(f"cycle {n + 1}: {found['steps']:,.0f} steps a shard; a step {found['step_us']:,.0f} µs of Redis "
                  f"(client: median {found['median_ms']:.2f} ms, slowest {found['slowest_ms']:.2f} ms); "
                  f"at one step a second per shard {per_second * 100:.2f} % of a Redis core; "
                  f"prefixes deleted {found['deleted']}", flush=True)
        token = env.prefix.removeprefix("zbench-")
        collecting = make_env(server.url, server.url, shards=args.shards, token=token,
                              conf={"zset_scheduler_collect_interval": 0.001})
        for _ in range(args.drains):
            for name, drainer in (("collecting", collecting), ("not collecting", env)):
                rate = drain_once(drainer, client, args.due)["rate"]
                print(f"drain of {args.due:,} due over {args.size:,} pending, {name:14}: {rate:9,.0f} tasks/s  "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a dispatched task's Redis time goes: ``python -m bench.drain [--size N] [--rounds K]
[--broker-server]``.

Starts its own redis-server, then, ``--rounds`` times in turn, drains ``--size`` ``add(i, i)``
tasks all due (scheduled by ``schedule_many`` first, not timed) with one dispatcher leading every
shard, on the fast path (store and broker on db 0) and on the generic path (broker on db 1: the
claim builds the envelopes, Python forwards them; with ``--broker-server``, on a redis-server of
its own: the store's CPU is then the claim's alone). For each drain it prints the rate (first claim
to last hand-off, the dispatcher's own observer), the server's CPU per task (``INFO cpu``, user +
system, over the drain only) and the commands that took most of its time per task (``INFO
commandstats``; a script's own time includes the commands it calls). Running it on two checkouts
in turn (``PYTHONPATH=<checkout>``) gives before / after pairs from the same minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from celery_zset_scheduler.testing import RedisServer

from .lib.dispatching import Recorder, running
from .lib.environment import BenchEnv, make_env
from .lib.scheduling import bulk


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def drain_once(env: BenchEnv, client: Any, count: int) -> dict[str, Any]:
    env.purge_queue()
    bulk(env, count, (((i, i), {}, 0.0) for i in range(count)))
    recorder = Recorder()
    recorder.expected = count
    client.config_resetstat()
    before = _cpu(client)
    with running(env, recorder):
        if not recorder.done.wait(600):
            raise RuntimeError(f"dispatched {recorder.count} of {count} tasks in 600 s")
    cpu = _cpu(client) - before
    stats = client.info("commandstats")
    env.purge_queue()
    assert recorder.first_claim is not None and recorder.last_publish is not None
    top = sorted(((float(v["usec"]), k.removeprefix("cmdstat_")) for k, v in stats.items()), reverse=True)[:4]
    return {"rate": count / (recorder.last_publish - recorder.first_claim), "redis_us": cpu / count * 1e6,
            "top": [(name, usec / count) for usec, name in top]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.drain", description=__doc__.split("\n", 1)[0])
    p.add_argument("--size", type=int, default=100_000, help="tasks per drain (100,000)")
    p.add_argument("--rounds", type=int, default=2, help="drains of each path, in turn")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--broker-server", action="store_true",
                   help="the generic path's broker on a redis-server of its own (default: db 1 of the store's)")
    args = p.parse_args(argv)
    with RedisServer() as server, contextlib.ExitStack() as stack:
        client = server.client()
        broker = stack.enter_context(RedisServer()).url if args.broker_server else server.url_db(1)
        paths = {"fast": make_env(server.url, server.url, shards=args.shards),
                 "generic": make_env(server.url, broker, shards=args.shards)}
        for _ in range(args.rounds):
            for name, env in paths.items():
                found = drain_once(env, client, args.size)
                top = ", ".join(f"{cmd} {us:.1f}" for cmd, us in found["top"])
                print(f"{name:8} {found['rate']:9,.0f} tasks/s  Redis CPU {found['redis_us']:5.1f} µs a task"
                      f"  (µs a task: {top})  load {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a dispatched task's Redis time goes: ``python -m bench.drain [--size N] [--rounds K]
[--broker-server] [--pending N] [--redis-args ARGS] [--tables]``.

Starts its own redis-server, then, ``--rounds`` times in turn, drains ``--size`` ``add(i, i)``
tasks all due (scheduled by ``schedule_many`` first, not timed) with one dispatcher leading every
shard, on the fast path (store and broker on db 0) and on the generic path (broker on db 1: the
claim builds the envelopes, Python forwards them; with ``--broker-server``, on a redis-server of
its own: the store's CPU is then the claim's alone). For each drain it prints the rate (first claim
to last hand-off, the dispatcher's own observer), the server's CPU per task (``INFO cpu``, user +
system, over the drain only) and the commands that took most of its time per task (``INFO
commandstats``; a script's own time includes the commands it calls), then this process's CPU per
task (the dispatcher's thread and the benchmark's recorder; with ``--broker-server``, the broker
server's too). Running it on two checkouts in turn (``PYTHONPATH=<checkout>``) gives before /
after pairs from the same minutes.

``--pending N`` stores N far-future tasks first (``schedule_many``, its rate printed with the
server's memory), so every drain runs over a store that full; ``--redis-args`` passes options to the
redis-server it starts (say ``"--disable-thp no"``, with ``MALLOC_CONF=thp:always`` in the
environment for jemalloc's huge pages): the printed ``AnonHugePages`` shows what the kernel gave.
``--tables`` prints, after the fill and after each drain, the hash tables of shard 0's ``msg`` hash
and sorted set (``DEBUG HTSTATS-KEY``, enabled on the server it starts): whether Redis is still
moving them to a doubled table, which makes every lookup look in both, and how far it got.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import shlex
import sys
from typing import Any

import redis

from celery_zset_scheduler.testing import RedisServer

from .lib.dispatching import Recorder, running
from .lib.environment import BenchEnv, make_env
from .lib.scaling import pending
from .lib.scheduling import bulk, far_future_calls


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def drain_once(env: BenchEnv, client: Any, count: int, broker: Any = None) -> dict[str, Any]:
    """One drain; ``broker``: a client of the broker's own server, whose CPU is then measured too."""
    env.purge_queue()
    bulk(env, count, (((i, i), {}, 0.0) for i in range(count)))
    recorder = Recorder()
    recorder.expected = count
    client.config_resetstat()
    before, own_before = _cpu(client), _own_cpu()
    broker_before = _cpu(broker) if broker is not None else 0.0
    with running(env, recorder):
        if not recorder.done.wait(600):
            raise RuntimeError(f"dispatched {recorder.count} of {count} tasks in 600 s")
    cpu, own = _cpu(client) - before, _own_cpu() - own_before
    broker_us = (_cpu(broker) - broker_before) / count * 1e6 if broker is not None else None
    stats = client.info("commandstats")
    env.purge_queue()
    assert recorder.first_claim is not None and recorder.last_publish is not None
    top = sorted(((float(v["usec"]), k.removeprefix("cmdstat_")) for k, v in stats.items()), reverse=True)[:4]
    return {"rate": count / (recorder.last_publish - recorder.first_claim), "redis_us": cpu / count * 1e6,
            "top": [(name, usec / count) for usec, name in top], "dispatcher_us": own / count * 1e6,
            "broker_us": broker_us}


def _memory(server: RedisServer) -> str:
    """The server's resident memory and the part of it in transparent huge pages (Linux)."""
    assert server.process is not None
    fields: dict[str, int] = {}
    with contextlib.suppress(OSError), open(f"/proc/{server.process.pid}/smaps_rollup", encoding="ascii") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("Rss", "AnonHugePages"):
                fields[name] = int(rest.split()[0])
    if not fields:
        return "memory not readable (no /proc)"
    return f"RSS {fields.get('Rss', 0) / 1024:,.0f} MB, AnonHugePages {fields.get('AnonHugePages', 0) / 1024:,.0f} MB"


def _tables(client: Any, env: BenchEnv) -> str:
    """Shard 0's two big tables: their sizes, and how far a move to a doubled one got."""
    keys = env.store.keys.shard(0)
    parts = []
    for name, key in (("msg", keys.msg), ("due", keys.due)):
        try:
            text = client.execute_command("DEBUG", "HTSTATS-KEY", key).decode()
        except redis.ResponseError as e:  # no such key, or too small for a hash table (a listpack)
            parts.append(f"{name}: {e}")
            continue
        # Redis says "elements", Valkey 8 "entries" (and counts its table size in entries).
        tables = [(int(size), int(count)) for size, count in
                  re.findall(r"table size: (\d+)\s+number of (?:elements|entries): (\d+)", text)]
        if len(tables) == 2:
            (old, left), (new, moved) = tables
            parts.append(f"{name} moving {old:,} -> {new:,}, {moved / max(1, left + moved):.0%} moved")
        elif tables:
            parts.append(f"{name} table {tables[0][0]:,}")
        else:
            parts.append(f"{name}: {text.strip().splitlines()[0] if text.strip() else 'no table'}")
    return "shard 0: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.drain", description=__doc__.split("\n", 1)[0])
    p.add_argument("--size", type=int, default=100_000, help="tasks per drain (100,000)")
    p.add_argument("--rounds", type=int, default=2, help="drains of each path, in turn")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--broker-server", action="store_true",
                   help="the generic path's broker on a redis-server of its own (default: db 1 of the store's)")
    p.add_argument("--pending", type=int, default=0,
                   help="far-future tasks stored before the drains, which run over them (0)")
    p.add_argument("--redis-args", default="", help='options for the redis-server it starts, e.g. "--disable-thp no"')
    p.add_argument("--tables", action="store_true",
                   help="print shard 0's hash tables after the fill and each drain (DEBUG HTSTATS-KEY)")
    args = p.parse_args(argv)
    if args.pending < 0 or args.size <= 0:
        p.error("--size must be positive and --pending not negative")
    extra = shlex.split(args.redis_args) + (["--enable-debug-command", "yes"] if args.tables else [])
    with RedisServer(extra=extra) as server, contextlib.ExitStack() as stack:
        client = server.client()
        broker_server = stack.enter_context(RedisServer()) if args.broker_server else None
        broker = broker_server.url if broker_server else server.url_db(1)
        # One store for both paths (a shared token), so the pending tasks lie under both drains.
        token = secrets.token_hex(3)
        fast = make_env(server.url, server.url, shards=args.shards, token=token)
        paths = {"fast": fast, "generic": make_env(server.url, broker, shards=args.shards, token=token)}
        if args.pending:
            rate = bulk(fast, args.pending, far_future_calls(args.pending, start=args.size))
            print(f"pending  {args.pending:,} stored at {rate.per_second:,.0f} tasks/s; server {_memory(server)}",
                  flush=True)
        if args.tables:
            print(f"tables   {_tables(client, fast)}", flush=True)
        for _ in range(args.rounds):
            for name, env in paths.items():
                own_broker = broker_server.client() if broker_server and name == "generic" else None
                found = drain_once(env, client, args.size, own_broker)
                top = ", ".join(f"{cmd} {us:.1f}" for cmd, us in found["top"])
                others = f"  dispatcher {found['dispatcher_us']:.1f} µs a task"
                if found["broker_us"] is not None:
                    others += f", broker {found['broker_us']:.1f}"
                print(f"{name:8} {found['rate']:9,.0f} tasks/s  Redis CPU {found['redis_us']:5.1f} µs a task"
                      f"  (µs a task: {top}){others}  load {os.getloadavg()[0]:.2f}", flush=True)
                if args.tables:
                    print(f"tables   {_tables(client, fast)}", flush=True)
        if args.pending:
            print(f"after    {pending(fast):,} still pending; server {_memory(server)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The fast path's benchmark: ``python -m bench.fastpath [--size N] [--quick] [--json]``.

Starts its own redis-server (store and broker on db 0: the fast path's condition), then measures,
in one run: plain Celery ``apply_async()`` into the queue, and for the fast and the generic path
the drain rate with 10k / 100k / 1M tasks pending (the sizes up to ``--size``) and a burst of
``--size`` tasks due at the same second (time until the last is in the queue). ``--quick``: 10k.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any

from celery_zset_scheduler.testing import RedisServer

from .lib.environment import describe_machine, make_env
from .lib.fastpath import burst, drain, load, plain_rate
from .lib.lateness import steady_lateness

SIZES = (10_000, 100_000, 1_000_000)
TARGET_RATE = 200_000
TARGET_BURST_S = 10.0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fastpath", description=__doc__.split("\n", 1)[0])
    p.add_argument("--size", type=int, default=1_000_000, help="largest pending size and the burst (1,000,000)")
    p.add_argument("--quick", action="store_true", help="10,000 tasks only (a smoke run)")
    p.add_argument("--generic-max", type=int, default=1_000_000,
                   help="largest size the generic path is measured at (it is ~10x slower)")
    p.add_argument("--calls", type=int, default=5_000, help="plain apply_async() calls timed")
    p.add_argument("--lateness", default="1000,10000", help="steady due/s for lateness figures ('' skips)")
    p.add_argument("--lateness-seconds", type=float, default=10.0)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--json", action="store_true")
    p.add_argument("--save", metavar="PATH", help="also write the JSON results to PATH")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    size = 10_000 if args.quick else args.size
    sizes = [s for s in SIZES if s <= size] or [size]
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text} (load {load()})", file=sys.stderr, flush=True)

    results: dict[str, Any] = {"loads": [], "command": "python -m bench.fastpath " + " ".join(argv or sys.argv[1:])}

    def keep() -> None:  # after every figure: a run cut short keeps what it measured
        if args.save:
            with open(args.save, "w", encoding="utf-8") as f:
                f.write(json.dumps(results, indent=2) + "\n")
    with ExitStack() as stack:
        server = stack.enter_context(RedisServer())
        envs = {
            "fast": make_env(server.url, server.url, shards=args.shards, topology="one redis-server, db 0"),
            "generic": make_env(server.url, server.url, shards=args.shards, topology="one redis-server, db 0",
                                conf={"zset_scheduler_fast_path": False}),
        }
        try:
            results["environment"] = describe_machine(envs["fast"])
            say(f"plain apply_async() x{args.calls:,}")
            results["plain_apply_async_per_s"] = round(plain_rate(envs["fast"], args.calls))
            keep()
            results["drain"] = []
            for n in sizes:
                for path in ("fast", "generic"):
                    if path == "generic" and n > args.generic_max:
                        continue
                    say(f"{path}: drain {n:,} pending")
                    d = drain(envs[path], path, n)
                    results["drain"].append({**asdict(d), "per_second": round(d.per_second)})
                    results["loads"].append(load())
                    keep()
                    say(f"{path}: {d.per_second:,.0f} tasks/s, {d.queued:,} in the queue")
            results["burst"] = []
            for path in ("fast", "generic"):
                if path == "generic" and size > args.generic_max:
                    continue
                say(f"{path}: burst of {size:,} due at one instant")
                b = burst(envs[path], path, size)
                results["burst"].append(asdict(b))
                results["loads"].append(load())
                keep()
                say(f"{path}: last in the queue {b.last_in_queue_ms / 1000:.2f}s after the due time")
            results["lateness"] = []
            for rate in [int(r) for r in args.lateness.split(",") if r.strip()]:
                for path in ("fast", "generic"):
                    say(f"{path}: lateness at {rate:,} due/s for {args.lateness_seconds:g}s")
                    late = steady_lateness(envs[path], rate, args.lateness_seconds)
                    results["lateness"].append({"path": path, "rate": rate, **asdict(late)})
                    results["loads"].append(load())
                    keep()
        finally:
            for env in envs.values():
                env.cleanup()
    keep()
    print(json.dumps(results, indent=2) if args.json else report(results))
    return 0


def report(r: dict[str, Any]) -> str:
    lines = [f"environment: {r['environment']}", f"load averages seen: {', '.join(r['loads'])}",
             f"plain Celery apply_async() into the queue: {r['plain_apply_async_per_s']:,} tasks/s", "",
             "| pending | fast path | generic path |", "| ---: | ---: | ---: |"]
    by = {(d["path"], d["pending"]): d for d in r["drain"]}
    for n in sorted({d["pending"] for d in r["drain"]}):
        cells = [f"{by[(p, n)]['per_second']:,} tasks/s" if (p, n) in by else "-" for p in ("fast", "generic")]
        lines.append(f"| {n:,} | {cells[0]} | {cells[1]} |")
    lines.append("")
    for b in r["burst"]:
        mark = " (target <= 10 s)" if b["path"] == "fast" else ""
        lines.append(f"burst {b['count']:,} due at once, {b['path']}: last in the queue after "
                     f"{b['last_in_queue_ms'] / 1000:.2f} s{mark}")
    for late in r.get("lateness", []):
        lines.append(f"lateness at {late['rate']:,}/s, {late['path']}: p50 {late['p50_ms']:.0f} ms, "
                     f"p99 {late['p99_ms']:.0f} ms, max {late['max_ms']:.0f} ms")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""Big messages among small ones: ``python -m bench.mix [--small 1000] [--big 5] [--big-mb 20] [--rounds 1]``
(``--lead S``: the due time S seconds after the scheduling starts; ``--save PATH``).

Starts two redis-servers of its own (the store, and the broker on a server of its own: the
generic path's built lane) and a real ``celery worker`` (threads pool, 4 threads) per case, then
runs the same due moment four ways: the plugin with small tasks only and with ``--big`` tasks of
``--big-mb`` MB among them, and plain Celery ETA the same two ways. Prints, per case, the small
tasks' start lateness (p50/p99/max), the big ones' latest start, the time to drain (the last
start after the due time) and, for the plugin, its dispatch lateness of the small ones.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

from .lib.environment import describe_machine, local_env
from .lib.mix import MixResult, run_case


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.mix", description=__doc__.split("\n", 1)[0])
    p.add_argument("--small", type=int, default=1_000, help="small tasks due at the moment (default 1,000)")
    p.add_argument("--big", type=int, default=5, help="big tasks due with them (default 5)")
    p.add_argument("--big-mb", type=int, default=20, help="size of a big task's argument, MB (default 20)")
    p.add_argument("--rounds", type=int, default=1, help="times to run the four cases (default 1)")
    p.add_argument("--lead", type=float, default=6.0,
                   help="seconds from the start of the scheduling to the due time (default 6)")
    p.add_argument("--save", metavar="PATH", help="also write the figures as JSON to PATH")
    args = p.parse_args(argv)
    if args.small < 1 or args.big < 1 or args.big_mb < 1 or args.rounds < 1:
        p.error("--small, --big, --big-mb and --rounds must be at least 1")
    return args


def fmt(ms: float) -> str:
    return "n/a" if math.isnan(ms) else f"{ms:,.0f}"


def table(results: list[MixResult]) -> str:
    lines = ["| case | small start p50 | p99 | max | big start max | drain | dispatch p50 | p99 | max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.case} | {fmt(r.start_p50_ms)} | {fmt(r.start_p99_ms)} | {fmt(r.start_max_ms)} | "
                     f"{fmt(r.big_start_max_ms)} | {fmt(r.drain_ms)} | {fmt(r.dispatch_p50_ms)} | "
                     f"{fmt(r.dispatch_p99_ms)} | {fmt(r.dispatch_max_ms)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    results: list[MixResult] = []
    machine: dict[str, Any] = {}
    with local_env(servers=2) as env:
        machine = describe_machine(env)
        for n in range(args.rounds):
            for plugin in (True, False):
                for big in (0, args.big):
                    r = run_case(env, plugin, args.small, big, args.big_mb, lead=args.lead)
                    results.append(r)
                    print(f"round {n + 1}: {r.case}: small start p50 {fmt(r.start_p50_ms)} ms, "
                          f"p99 {fmt(r.start_p99_ms)} ms, drain {fmt(r.drain_ms)} ms "
                          f"(load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
    print(f"ms after the due time; {args.small:,} small tasks, worker: threads pool, 4 threads; {machine['topology']}; "
          f"Redis {machine['redis']}, {machine['cpus']} CPUs, Python {machine['python']}")
    print(table(results))
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump({"machine": machine, "results": [r.as_dict() for r in results]}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

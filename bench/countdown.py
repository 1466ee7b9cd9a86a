"""``apply_async(countdown=…)``: ours next to plain Celery's, interleaved, on one redis-server.

``python -m bench.countdown [--pairs 3] [--calls 5000]`` starts a redis-server (store db 0, broker
db 1, as ``python -m bench``), then times ``add.apply_async((i, i), countdown=3600)`` of our app and
of plain Celery's app in alternation (ours, plain, ours, plain, ...), each after one warm-up call,
and prints each pair's rates and ratio with the load average. ``--profile N`` prints a cProfile of
N of our calls instead (cumulative time, the first lines).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys

from .lib.environment import local_env
from .lib.scheduling import apply_async


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.countdown", description=__doc__)
    p.add_argument("--pairs", type=int, default=3, help="alternating ours/plain pairs")
    p.add_argument("--calls", type=int, default=5_000, help="apply_async calls timed per rate")
    p.add_argument("--countdown", type=float, default=3600.0)
    p.add_argument("--profile", type=int, default=0, help="profile this many of our calls instead")
    args = p.parse_args(argv)
    with local_env() as env:
        if args.profile:
            task = env.task(env.ours)
            task.apply_async((0, 0), countdown=args.countdown)
            prof = cProfile.Profile()
            prof.enable()
            for i in range(args.profile):
                task.apply_async((i, i), countdown=args.countdown)
            prof.disable()
            pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(45)
            return 0
        ratios = []
        for n in range(args.pairs):
            ours = apply_async(env.ours, args.calls, args.countdown).per_second
            env.purge_queue()
            plain = apply_async(env.plain, args.calls, args.countdown).per_second
            env.purge_queue()
            ratios.append(ours / plain)
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"pair {n + 1}: ours {ours:,.0f}/s, plain {plain:,.0f}/s, {ours / plain:.2f}x (load {load})",
                  flush=True)
        print(f"ratio min {min(ratios):.2f}x, max {max(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

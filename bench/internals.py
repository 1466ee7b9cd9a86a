"""What each private internal saves: ``python -m bench.internals [--size N] [--calls N] [--rounds K] [--json]``.

Starts its own two redis-servers (a store, and a broker of its own for the "broker elsewhere" case),
then measures, ``--rounds`` times in turn, each path that reads a private internal
(:mod:`celery_zset_scheduler.model.internals`) with every internal as its check decides and with
that one internal off (its public path), and with all of them off (``zset_scheduler_internals =
"public"``):

- ``apply_async(countdown=60)`` calls a second (``--calls``), plain Celery's ETA message next to it;
- ``schedule_many`` of ``--size`` tasks, tasks a second;
- draining ``--size`` due tasks with the broker on the store's own database (the same-Redis fast
  path) and on the other server (the built lane): tasks a second, and this process's CPU a task
  (the dispatcher), plain Celery's ``apply_async()`` into the same queue next to them.

Each figure is the best of its rounds (the machine's noise only slows a run down).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from celery_zset_scheduler.celery.core.compat import LANE
from celery_zset_scheduler.celery.dispatcher import build as _dispatcher  # noqa: F401  (registers its internals)
from celery_zset_scheduler.celery.publishers.kombu_internals import KOMBU_REDIS
from celery_zset_scheduler.model import internals
from celery_zset_scheduler.store.resp import READER
from celery_zset_scheduler.testing import RedisServer

from .drain import drain_once
from .lib.environment import BenchEnv, make_env
from .lib.scheduling import apply_async, bulk, far_future_calls

#: Each case: the internals turned off ("all" for the setting), as a row's label.
CASES: tuple[tuple[str, tuple[internals.Internal, ...] | None], ...] = (
    ("every check passed", ()),
    ("reply reader off", (READER,)),
    ("Kombu Redis steps off", (KOMBU_REDIS,)),
    ("lane codec table off", (LANE,)),
    ("zset_scheduler_internals='public'", None),
)


@contextmanager
def deciding(off: tuple[internals.Internal, ...] | None) -> Iterator[None]:
    internals.reset()
    if off is None:
        internals.force_public("the benchmark's public case")
    else:
        for item in off:
            internals.turn_off(item)
    try:
        yield
    finally:
        internals.reset()


def _best(rounds: list[float], higher: bool = True) -> float:
    return max(rounds) if higher else min(rounds)


def measure(store: RedisServer, broker: RedisServer, size: int, calls: int, rounds: int
            ) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, list[float]]] = {}

    def env_for(broker_url: str) -> BenchEnv:
        return make_env(store.url, broker_url, token=secrets.token_hex(3))

    def add(label: str, name: str, value: float) -> None:
        figures.setdefault(label, {}).setdefault(name, []).append(value)

    for _ in range(rounds):
        for label, off in CASES:
            with deciding(off):
                for where, url, own in (("same", store.url, None), ("elsewhere", broker.url, broker.client())):
                    env = env_for(url)
                    try:
                        drained = drain_once(env, store.client(), size, own)
                        add(label, f"drain_{where}", drained["rate"])
                        add(label, f"drain_{where}_cpu_us", drained["dispatcher_us"])
                        if where == "same":
                            add(label, "apply_async", apply_async(env.ours, calls, 60.0).per_second)
                            add(label, "schedule_many", bulk(env, size, far_future_calls(size)).per_second)
                            add("plain Celery", "apply_async", apply_async(env.plain, calls, 60.0).per_second)
                            env.purge_queue()
                            add("plain Celery", "drain_same", apply_async(env.plain, calls, None).per_second)
                            env.purge_queue()
                    finally:
                        env.cleanup()
    lower = ("_cpu_us",)
    return {label: {name: _best(v, not name.endswith(lower)) for name, v in row.items()}
            for label, row in figures.items()}


COLUMNS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("apply_async", "apply_async(countdown) /s", lambda v: f"{v:,.0f}"),
    ("schedule_many", "schedule_many /s", lambda v: f"{v:,.0f}"),
    ("drain_same", "drain, same Redis /s", lambda v: f"{v:,.0f}"),
    ("drain_same_cpu_us", "CPU µs/task", lambda v: f"{v:.1f}"),
    ("drain_elsewhere", "drain, broker elsewhere /s", lambda v: f"{v:,.0f}"),
    ("drain_elsewhere_cpu_us", "CPU µs/task", lambda v: f"{v:.1f}"),
)


def table(figures: dict[str, dict[str, float]]) -> str:
    head = ["case", *(title for _, title, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, row in figures.items():
        cells = [fmt(row[key]) if key in row else "" for key, _, fmt in COLUMNS]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.internals", description=__doc__.split("\n", 1)[0])
    p.add_argument("--size", type=int, default=100_000, help="tasks drained and bulk-scheduled per case (100,000)")
    p.add_argument("--calls", type=int, default=5_000, help="apply_async calls timed per case (5,000)")
    p.add_argument("--rounds", type=int, default=2, help="runs of every case, in turn (2)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if min(args.size, args.calls, args.rounds) <= 0:
        p.error("--size, --calls and --rounds must be positive")
    with ExitStack() as stack:
        store = stack.enter_context(RedisServer())
        broker = stack.enter_context(RedisServer())
        figures = measure(store, broker, args.size, args.calls, args.rounds)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"python -m bench.internals --size {args.size} --calls {args.calls} --rounds {args.rounds}")
        print(table(figures))
        print("plain Celery: its ETA apply_async(countdown=60), and its apply_async() into the same queue "
              "in the drain column")
    return 0


if __name__ == "__main__":
    sys.exit(main())

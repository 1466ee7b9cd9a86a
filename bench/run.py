"""The benchmark in one command: ``python -m bench [--size N] [--json]`` (or ``python bench/run.py``).

With no ``--store-url``/``--broker-url`` it starts its own redis-server (store on db 0, broker on
db 1; ``--servers 2`` puts them on two servers) and removes it afterwards.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from bench.lib import Options, format_report, run_benchmark


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n", 1)[0])
    p.add_argument("--size", type=int, default=1_000_000,
                   help="pending tasks for the bytes and lateness figures (default 1,000,000)")
    p.add_argument("--calls", type=int, default=5_000, help="apply_async calls timed per rate")
    p.add_argument("--dispatch", type=int, default=100_000, help="due tasks the dispatcher drains")
    p.add_argument("--stream-rate", type=int, default=1_000, help="due tasks/s for the lateness figure")
    p.add_argument("--stream-seconds", type=float, default=20.0, help="length of the steady stream")
    p.add_argument("--periodic", type=int, default=100_000,
                   help="periodic entries firing in the same minute (default 100,000; 0 skips them)")
    p.add_argument("--servers", type=int, choices=(1, 2), default=1, help="own redis-servers to start")
    p.add_argument("--store-url", help="benchmark against this store Redis instead of our own")
    p.add_argument("--broker-url", help="and this broker (default: --store-url with db+1)")
    p.add_argument("--rabbitmq", default="auto", metavar="auto|off|URL",
                   help="RabbitMQ figures: auto starts a node of our own (skipped, with the reason, when "
                        "none can be started), off skips them, or an amqp:// URL to use")
    p.add_argument("--rabbitmq-dispatch", type=int, default=50_000,
                   help="due tasks drained into RabbitMQ per queue type (default 50,000)")
    p.add_argument("--only-rabbitmq", action="store_true", help="only the RabbitMQ figures")
    p.add_argument("--cluster", action="store_true",
                   help="only the Redis Cluster figures: a 3-master cluster of our own next to one standalone "
                        "Redis (bulk scheduling of --dispatch tasks, --calls apply_async, dispatching --dispatch)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--save", metavar="PATH", help="also write the JSON report to PATH")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    options = Options(
        size=args.size, calls=min(args.calls, args.size), dispatch=min(args.dispatch, args.size),
        raw=min(100_000, args.size), stream_rate=args.stream_rate, stream_seconds=args.stream_seconds,
        servers=args.servers, periodic=args.periodic, rabbitmq=args.rabbitmq,
        rabbitmq_dispatch=args.rabbitmq_dispatch, only_rabbitmq=args.only_rabbitmq,
    )
    target = None
    if args.store_url:
        target = (args.store_url, args.broker_url or args.store_url)
    started = time.monotonic()

    def say(text: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:6.1f}s] {text}", file=sys.stderr, flush=True)

    if args.cluster:
        return _cluster(args, say)
    report = run_benchmark(target, options, progress=say)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            f.write(report.to_json() + "\n")
    print(report.to_json() if args.json else format_report(report))
    return 0


def _cluster(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    from bench.lib.cluster import cluster_json, format_cluster_report, run_cluster_benchmark

    figures = run_cluster_benchmark(bulk_count=args.dispatch, calls=args.calls, dispatch=args.dispatch,
                                    shards=8, progress=say)
    text = json.dumps(cluster_json(figures), indent=2)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text if args.json else format_cluster_report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The whole performance curve in one run: ``python -m bench.scale [--size N] [--quick] [--json]``.

Starts its own redis-servers (the store's, and a broker's for the generic path on another server)
and measures, next to plain Celery where there is a plain figure: scheduling, bytes per task, the
dispatch rates (fast path; generic path with the broker on db 1 and on a server of its own) and
lateness against the number pending (10k, 100k, 1M, 10M up to ``--size``); a burst of
``--size``/10 due at the same second; lateness at 1,000 and 10,000 due/s at ``--size`` pending;
1, 2, 4 dispatcher processes on one Redis (with its CPU); and a real ``celery worker``'s RSS with
a backlog of waiting tasks, plain ETA against the plugin. Writes ``<out>/scale.md`` (tables,
targets met / not met) and ``<out>/images/scale-*.png``. ``--quick``: at most 100,000 pending and
short stages (about a minute).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from celery_zset_scheduler.testing import RedisServer

from .lib import plots
from .lib.environment import BenchEnv, describe_machine, make_env
from .lib.fastpath import load
from .lib.multi import dispatchers_rate
from .lib.rss import worker_rss
from .lib.scale_report import markdown, targets
from .lib.scaling import CurveOptions, Lane, bursts, curve, lateness_at

SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
STAGES = ("curve", "burst", "lateness", "dispatchers", "rss")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n", 1)[0])
    p.add_argument("--size", type=int, default=10_000_000, help="largest number pending (default 10,000,000)")
    p.add_argument("--quick", action="store_true", help="at most 100,000 pending, short stages (about a minute)")
    p.add_argument("--out", default="docs", help="folder for scale.md and images/ (default docs)")
    p.add_argument("--no-plots", action="store_true", help="no PNG plots (when matplotlib is not installed)")
    p.add_argument("--stages", default=",".join(STAGES), help=f"a subset of {','.join(STAGES)}")
    p.add_argument("--dispatchers", default="1,2,4", help="dispatcher process counts (default 1,2,4)")
    p.add_argument("--generic-burst-max", type=int, default=1_000_000,
                   help="largest burst also run on the generic path (it is several times slower)")
    p.add_argument("--rss-backlog", type=int, help="waiting tasks for the worker RSS (100,000; --quick 5,000)")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of the markdown")
    p.add_argument("--save", metavar="PATH", help="also write the JSON results to PATH (kept after every stage)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    bad = set(args.stages.split(",")) - set(STAGES)
    if bad:
        p.error(f"unknown stages: {', '.join(sorted(bad))}")
    if args.size < 1_000:
        p.error("--size must be at least 1,000")
    return args


def plan(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    size = min(args.size, 100_000) if quick else args.size
    return {
        "size": size,
        "sizes": [s for s in SIZES if s < size] + [size],
        "calls": 300 if quick else 2_000,
        "drain": min(10_000 if quick else 100_000, size),
        "stream_rate": 1_000,
        "stream_seconds": 1.5 if quick else 5.0,
        "burst": max(1_000, size // 10),
        "lateness_rates": [1_000, 10_000],
        "lateness_seconds": 2.0 if quick else 10.0,
        "dispatchers": [int(k) for k in args.dispatchers.split(",") if k.strip()],
        "dispatch_count": min(20_000 if quick else 400_000, max(size, 2_000)),
        "rss_backlog": args.rss_backlog or min(5_000 if quick else 100_000, size),
        "generic_burst_max": args.generic_burst_max,
        "shards": args.shards,
        "stages": args.stages.split(","),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.no_plots and not plots.available():
        print(f"python -m bench.scale: {plots.MISSING}", file=sys.stderr)
        return 2
    opts = plan(args)
    started = time.monotonic()

    def say(text: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - started:6.1f}s] {text} (load {load()})", file=sys.stderr, flush=True)

    shown = " ".join(argv if argv is not None else sys.argv[1:])
    r: dict[str, Any] = {
        "command": f"python -m bench.scale {shown}".strip(), "options": opts,
        "started_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "loads": {"start": load()},
    }

    def keep() -> None:  # after every stage: a run cut short keeps what it measured
        if args.save:
            Path(args.save).write_text(json.dumps(r, indent=2) + "\n", encoding="utf-8")

    try:  # a path that cannot be written fails now, not after the first stage's minutes
        if args.save:
            Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        keep()
    except OSError as exc:
        print(f"python -m bench.scale: cannot write --save {args.save}: {exc}", file=sys.stderr)
        return 2
    with RedisServer() as server, RedisServer() as broker_server:
        _run(server, broker_server, opts, r, say, keep)
    r["loads"]["end"] = load()
    r["duration_s"] = round(time.monotonic() - started, 1)
    r["targets"] = targets(r)
    out = Path(args.out)
    images: list[str] = []
    if args.no_plots:
        r["plots_note"] = "not drawn (--no-plots)"
    else:
        images = plots.write_plots(r, out / "images")
    r["images"] = [str(out / "images" / name) for name in images]
    r["table"] = str(out / "scale.md")
    page = markdown(r, images)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.md").write_text(page, encoding="utf-8")
    keep()
    say(f"wrote {out / 'scale.md'} and {len(images)} plot(s)")
    print(json.dumps(r, indent=2) if args.json else page)
    return 0


def _run(server: RedisServer, broker_server: RedisServer, opts: dict[str, Any], r: dict[str, Any],
         say: Callable[[str], None], keep: Callable[[], None]) -> None:
    shards, stages = opts["shards"], opts["stages"]
    fast = make_env(server.url, server.url, shards=shards, topology="one redis-server; fast: broker db 0")
    token = fast.prefix.removeprefix("zbench-")  # one store for all three lanes
    lanes = [
        Lane("fast", "fast", "db 0", fast),
        Lane("generic", "generic", "db 1",
             make_env(server.url, server.url_db(1), shards=shards, token=token, topology="generic: broker db 1")),
        Lane("generic_server", "generic", "own server",
             make_env(server.url, broker_server.url, shards=shards, token=token,
                      topology="generic: broker on a redis-server of its own")),
    ]
    r["environment"] = describe_machine(fast)
    envs: list[BenchEnv] = [lane.env for lane in lanes]
    r["errors"] = {}

    def stage(name: str, body: Callable[[], None]) -> None:
        """A stage that fails is reported and the run goes on: the others' figures are still written."""
        if name not in stages:
            return
        try:
            body()
        except Exception as e:
            r["errors"][name] = f"{type(e).__name__}: {e}"
            say(f"{name} failed: {r['errors'][name]}")
            for env in envs:
                env.purge_queue()
        keep()

    def curve_stage() -> None:
        r["curve"] = []
        curve(lanes, CurveOptions(opts["sizes"], opts["calls"], opts["drain"], opts["stream_rate"],
                                  opts["stream_seconds"]),
              say, lambda row: (r["curve"].append(row), keep()))

    def burst_stage() -> None:
        rate = r["curve"][-1]["bulk_per_s"] if r.get("curve") else None
        r["burst"] = bursts(lanes, opts["burst"], opts["generic_burst_max"], say, rate)

    def lateness_stage() -> None:
        r["lateness"] = lateness_at(lanes, opts["lateness_rates"], opts["lateness_seconds"], say)

    def dispatchers_stage() -> None:
        r["dispatchers"] = []
        for path, broker, count in (("fast", server.url, opts["dispatch_count"]),
                                    ("generic", server.url_db(1), max(500, opts["dispatch_count"] // 4))):
            env = make_env(server.url, broker, shards=shards, topology=f"{path}: dispatcher processes")
            envs.append(env)
            for k in opts["dispatchers"]:
                r["dispatchers"].append(dispatchers_rate(env, path, k, count, say))
                keep()
            env.cleanup()

    def rss_stage() -> None:
        r["rss"] = []
        for plugin in (False, True):
            server.client().flushall()
            server.client(1).flushall()
            env = make_env(server.url, server.url_db(1), shards=shards, topology="worker RSS")
            envs.append(env)
            r["rss"].append(worker_rss(env, plugin, opts["rss_backlog"], say))
            keep()

    try:
        stage("curve", curve_stage)
        stage("burst", burst_stage)
        stage("lateness", lateness_stage)
        # The big store is not needed any more: free it before the processes of the next stages.
        server.client().flushall()
        server.client(1).flushall()
        broker_server.client().flushall()
        stage("dispatchers", dispatchers_stage)
        stage("rss", rss_stage)
    finally:
        for env in envs:
            # the server may already be gone; it is ours and stops anyway
            with contextlib.suppress(Exception):
                env.cleanup()


if __name__ == "__main__":
    sys.exit(main())

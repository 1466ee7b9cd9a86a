"""Total dispatch rate of 1, 2, 4 … dispatchers on one Redis, each a process of its own.

Each dispatcher process leads its own subset of the shards (``pinned``, round robin), so they never
contend for a lease. The tasks are scheduled due at one instant a little ahead, while the
dispatchers already lead their shards and sleep; the rate is the tasks over the span from the
earliest first claim to the latest last hand-off (``perf_counter`` is CLOCK_MONOTONIC on Linux:
comparable between processes). Next to it, the Redis server's CPU from the first task in the
queue to the last (``INFO cpu`` used_cpu_sys + used_cpu_user delta / wall time, sampled by the
parent): one Redis core is the ceiling when that approaches 1.0.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from celery_zset_scheduler.celery.dispatcher.build import build_dispatcher

from .dispatching import Recorder
from .environment import BenchEnv, make_env
from .fastpath import load
from .scheduling import bulk


def _child(store_url: str, broker_url: str, token: str, shards: int, pinned: list[int], conf: dict[str, Any],
           ready: Any, stop: Any, results: Any) -> None:
    env = make_env(store_url, broker_url, shards=shards, token=token, conf=conf)
    recorder = Recorder()
    dispatcher = build_dispatcher(env.ours, observer=recorder, pinned=set(pinned))
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while len(dispatcher.leadership.owned) < len(pinned) and time.monotonic() < deadline:
        time.sleep(0.01)
    ready.put(len(dispatcher.leadership.owned) == len(pinned))
    stop.wait()
    dispatcher.stop()
    thread.join(timeout=60)
    results.put({"count": recorder.count, "first": recorder.first_claim, "last": recorder.last_publish})


def redis_cpu(env: BenchEnv) -> float:
    info = env.store_client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def dispatchers_rate(env: BenchEnv, path: str, processes: int, count: int, say: Callable[[str], None],
                     conf: dict[str, Any] | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """``processes`` dispatchers of ``env``'s store draining ``count`` tasks due at one instant."""
    ctx = mp.get_context("spawn")  # a fresh interpreter each: no inherited sockets or threads
    ready, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    token = env.prefix.removeprefix("zbench-")
    children = []
    for k in range(processes):
        pinned = list(range(k, env.shards, processes))
        p = ctx.Process(target=_child, args=(env.store_url, env.broker_url, token, env.shards, pinned, conf or {},
                                             ready, stop, results), daemon=True)
        p.start()
        children.append(p)
    try:
        if not all(ready.get(timeout=60) for _ in children):
            raise RuntimeError("a dispatcher process did not acquire its shards")
        env.purge_queue()
        lead = 2.0 + count / 50_000  # scheduling them all before they are due
        due = datetime.now(timezone.utc) + timedelta(seconds=lead)
        bulk(env, count, (((i, i), {}, due) for i in range(count)))
        deadline = time.monotonic() + timeout + lead
        client = env.broker_client
        assert client is not None

        def wait_for(n: int) -> None:
            while int(client.llen(env.queue)) < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{processes} dispatchers: {client.llen(env.queue)} of {count} in the queue")
                time.sleep(0.002)

        # Redis CPU from the first task in the queue to the last, both ends seen from here.
        wait_for(1)
        cpu0, wall0 = redis_cpu(env), time.perf_counter()
        wait_for(count)
        cpu1, wall1 = redis_cpu(env), time.perf_counter()
        stop.set()
        parts = [results.get(timeout=90) for _ in children]
    finally:
        stop.set()
        for p in children:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    env.purge_queue()
    first = min(x["first"] for x in parts if x["first"] is not None)
    last = max(x["last"] for x in parts if x["last"] is not None)
    dispatched = sum(x["count"] for x in parts)
    busy = wall1 - wall0
    result = {
        "path": path, "dispatchers": processes, "count": count, "dispatched": dispatched,
        "seconds": round(last - first, 3), "per_second": round(count / (last - first)) if last > first else 0,
        "per_dispatcher": [x["count"] for x in parts],
        "redis_cpu": round((cpu1 - cpu0) / busy, 2) if busy > 0 else None, "load": load(),
    }
    say(f"{path}, {processes} dispatcher(s): {result['per_second']:,} tasks/s, Redis CPU {result['redis_cpu']}")
    return result

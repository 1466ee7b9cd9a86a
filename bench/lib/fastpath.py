"""The same-Redis fast path against the generic path and plain Celery, in one run on one Redis.

Both paths run on the same server and database (store and broker alike), so the only difference
is the hand-off: the fast path's one script per shard (``fast_push``) against the generic path's
claim -> publish through Kombu (one MULTI/EXEC of LPUSHes) -> ack (``zset_scheduler_fast_path =
False``). Plain Celery's figure is ``apply_async()`` straight into the same Redis queue: what the
application itself achieves without any store.

- **drain**: ``size`` tasks all due, then one dispatcher leading every shard empties the store;
  the rate is from its first claim to its last hand-off (its own observer's figures), and the
  queue is checked to hold every message.
- **burst**: ``burst`` tasks due at the same millisecond, scheduled while the dispatcher already
  runs (it sleeps until then); the figure is the Redis time at which the last one was in the queue
  minus that due time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from celery_zset_scheduler.dispatch.fastpath import FastHandOff

from .dispatching import Recorder, running
from .environment import BenchEnv
from .scheduling import apply_async, bulk


@dataclass(frozen=True)
class Drain:
    path: str
    pending: int
    seconds: float
    queued: int
    pushed_by_script: int

    @property
    def per_second(self) -> float:
        return self.pending / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Burst:
    path: str
    count: int
    last_in_queue_ms: float  # Redis time of the last hand-off minus the shared due time
    queued: int


def check_path(env: BenchEnv, dispatcher: Any, path: str) -> int:
    """The number of entries the fast path's script pushed (0 for the generic path), after making
    sure the dispatcher took the path it is measured for."""
    handoff = dispatcher.handoff
    fast = isinstance(handoff, FastHandOff) and handoff.routes() is not None
    if fast != (path == "fast"):
        raise RuntimeError(f"the {path} run did not take the {path} path")
    return handoff.pushed if isinstance(handoff, FastHandOff) else 0


def queued(env: BenchEnv) -> int:
    client = env.broker_client
    return int(client.llen(env.queue)) if client is not None else 0


def drain(env: BenchEnv, path: str, count: int, timeout: float = 900.0) -> Drain:
    env.purge_queue()
    bulk(env, count, (((i, i), {}, 0.0) for i in range(count)))
    recorder = Recorder()
    recorder.expected = count
    with running(env, recorder) as dispatcher:
        if not recorder.done.wait(timeout):
            raise RuntimeError(f"{path}: dispatched {recorder.count} of {count} tasks in {timeout:.0f}s")
        pushed = check_path(env, dispatcher, path)
    assert recorder.first_claim is not None and recorder.last_publish is not None
    found = queued(env)
    env.purge_queue()
    return Drain(path, count, recorder.last_publish - recorder.first_claim, found, pushed)


def burst(env: BenchEnv, path: str, count: int, timeout: float = 900.0, lead: float | None = None) -> Burst:
    """``count`` tasks due at one instant, far enough ahead for scheduling them all first
    (``lead`` seconds; by default enough at 25,000 tasks/s)."""
    env.purge_queue()
    recorder = Recorder()
    recorder.expected = count
    with running(env, recorder) as dispatcher:
        if lead is None:
            lead = 3.0 + count / 25_000  # bulk scheduling beside a running dispatcher, on a busy machine
        due = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=lead + 1)
        bulk(env, count, (((i, i), {}, due) for i in range(count)))
        if recorder.count:
            raise RuntimeError("the burst was due before it was scheduled: raise the lead")
        if not recorder.done.wait(timeout + lead):
            raise RuntimeError(f"{path}: dispatched {recorder.count} of {count} burst tasks")
        check_path(env, dispatcher, path)
        # The observer reports each hand-off's lateness by Redis time: the last one is the figure.
        last = max(recorder.lateness_ms)
    found = queued(env)
    env.purge_queue()
    return Burst(path, count, float(last), found)


def plain_rate(env: BenchEnv, count: int) -> float:
    rate = apply_async(env.plain, count, None)
    env.purge_queue()
    return rate.per_second


def load() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def now() -> float:
    return time.perf_counter()

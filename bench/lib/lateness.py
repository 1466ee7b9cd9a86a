"""Lateness at a steady rate of due tasks: how long after its due time each task reaches the broker.

The dispatcher runs first, leading every shard while the store holds the far-future pending
tasks. Then the stream is produced live, as an application would: every 10 ms the tasks falling
due in a 10 ms slot ``LEAD_S`` ahead are scheduled (``rate`` a second, each at its own
millisecond), so the dispatcher learns of them by claiming and by wake-ups, not from a store
prepared before it started. Lateness is the dispatcher's own figure (``Observer.published``): Redis
time when the publish returned minus the due time, so it includes the wake-up, the claim, the
decode, the publish to the broker and any sleep overshoot.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from .dispatching import Recorder, running
from .environment import BenchEnv
from .scheduling import bulk

LEAD_S = 0.25  # each task is scheduled this long before it is due
TICK_S = 0.01


@dataclass(frozen=True)
class Lateness:
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float


def percentile(values: list[int], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted list."""
    if not values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(values)))
    return float(values[rank - 1])


def steady_lateness(env: BenchEnv, rate: int, seconds: float) -> Lateness:
    count = int(rate * seconds)
    env.purge_queue()
    recorder = Recorder()
    recorder.expected = count
    per_tick = max(1, round(rate * TICK_S))
    with running(env, recorder):
        start = time.time() + LEAD_S
        for first in range(0, count, per_tick):
            slot = range(first, min(first + per_tick, count))
            tick_at = start - LEAD_S + first / rate
            time.sleep(max(0.0, tick_at - time.time()))
            due = [datetime.fromtimestamp(start + i / rate, tz=timezone.utc) for i in slot]
            bulk(env, len(slot), (((i, i), {}, when) for i, when in zip(slot, due, strict=True)))
        if not recorder.done.wait(LEAD_S + 60):
            raise RuntimeError(f"only {recorder.count} of {count} stream tasks were dispatched")
    env.purge_queue()
    values = sorted(recorder.lateness_ms)
    return Lateness(
        len(values), percentile(values, 50), percentile(values, 99), float(values[-1]),
        sum(values) / len(values),
    )

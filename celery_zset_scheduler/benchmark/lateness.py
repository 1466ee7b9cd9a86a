"""Lateness at a steady rate of due tasks: how long after its due time each task reaches the broker.

The steady stream (``rate`` tasks a second for ``seconds``, each due at its own millisecond) is
scheduled in one bulk call a little ahead of its first due time, while the store holds the
far-future pending tasks; a dispatcher started right after publishes it as it becomes due. (It is
started after the stream is scheduled because an idle leader whose earliest entry is far in the
future does not yet notice entries scheduled later than its next heartbeat: see docs/benchmarks.md.) Lateness is the
dispatcher's own figure (``Observer.published``): Redis time when the publish returned minus the
due time, so it includes the claim, the decode, the publish to the broker and any sleep overshoot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .dispatching import Recorder, running
from .environment import BenchEnv
from .scheduling import bulk

LEAD_S = 2.0  # the stream starts this long after it is scheduled


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
    bulk(env, count, (((i, i), {}, LEAD_S + i / rate) for i in range(count)))
    with running(env, recorder):
        if not recorder.done.wait(LEAD_S + seconds + 60):
            raise RuntimeError(f"only {recorder.count} of {count} stream tasks were dispatched")
    env.purge_queue()
    values = sorted(recorder.lateness_ms)
    return Lateness(
        len(values), percentile(values, 50), percentile(values, 99), float(values[-1]),
        sum(values) / len(values),
    )

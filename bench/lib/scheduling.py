"""Scheduling rates: bulk ``schedule_many`` and ``apply_async`` (ours and plain Celery's)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from celery_zset_scheduler.celery.producer.bulk import Call, schedule_many

from .environment import BenchEnv

FAR_FUTURE_S = 30 * 86400.0  # pending for the whole run: nothing of it becomes due


@dataclass(frozen=True)
class Rate:
    count: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0


def far_future_calls(count: int, start: int = 0) -> Iterator[Call]:
    """``add(i, i)`` calls spread over a day of due times, a month from now."""
    for i in range(start, start + count):
        yield (i, i), {}, FAR_FUTURE_S + (i % 86_400)


def bulk(env: BenchEnv, count: int, calls: Iterator[Call] | None = None) -> Rate:
    """``schedule_many`` of ``count`` tasks, timed from the call to its return."""
    task = env.task(env.ours)
    started = time.perf_counter()
    ids = schedule_many(task, calls if calls is not None else far_future_calls(count))
    elapsed = time.perf_counter() - started
    if len(ids) != count:
        raise RuntimeError(f"schedule_many stored {len(ids)} tasks, expected {count}")
    return Rate(count, elapsed)


def apply_async(app: Any, count: int, countdown: float | None) -> Rate:
    """``count`` calls of ``add.apply_async((i, i), countdown=...)`` after one warm-up call."""
    task = app.tasks["zbench.add"]
    options: dict[str, Any] = {} if countdown is None else {"countdown": countdown}
    task.apply_async((0, 0), **options)  # connections, script loading: not what we measure
    started = time.perf_counter()
    for i in range(count):
        task.apply_async((i, i), **options)
    return Rate(count, time.perf_counter() - started)

"""Periodic entries at scale: Redis bytes per entry, and the lateness of their occurrences when
every one of them fires in the same minute (one crontab per customer, ``* * * * *``).

The entries are written through the API (``periodic.add_many``: Celery builds each entry's message
template, the store keeps definition, state, template and its next fire time). They all start at
the same minute boundary (``start_time``), far enough ahead to be written first. One dispatcher
leading every shard then fires them: lateness is the dispatcher's own figure for each occurrence
(Redis time when its publish returned minus its fire time), so it includes reading the due
entries, planning them (Celery's crontab arithmetic), the fire script, the claim and the publish.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from celery_zset_scheduler import periodic
from celery_zset_scheduler.model.periodic import PeriodicEntry, ms_to_iso
from celery_zset_scheduler.store.snapshot import redis_now_ms

from .dispatching import Recorder, running
from .environment import TASK_NAME, BenchEnv
from .lateness import percentile

MINUTE_MS = 60_000


@dataclass(frozen=True)
class PeriodicFigures:
    entries: int
    add_seconds: float
    used_bytes: int  # used_memory delta of the store's server around the writes
    key_bytes: dict[str, int]  # MEMORY USAGE of each periodic key kind, summed over the shards
    fired: int
    boundary_ms: int
    caught_up: bool  # the writes took longer than planned: the boundary had passed when firing began
    p50_ms: float
    p99_ms: float
    max_ms: float
    last_ms: float  # when the last occurrence was handed over, after the boundary

    @property
    def bytes_per_entry(self) -> float:
        return self.used_bytes / self.entries if self.entries else 0.0

    @property
    def adds_per_second(self) -> float:
        return self.entries / self.add_seconds if self.add_seconds else 0.0


def _entries(count: int, start_iso: str) -> Iterator[PeriodicEntry]:
    spec = {"type": "crontab", "minute": "*", "hour": "*", "day_of_week": "*", "day_of_month": "*",
            "month_of_year": "*", "timezone": "UTC"}
    for i in range(count):
        yield PeriodicEntry(name=f"customer-{i:06d}", task=TASK_NAME, schedule=spec, args=[i, i], start_time=start_iso)


def periodic_at_scale(env: BenchEnv, count: int, say: Callable[[str], None]) -> PeriodicFigures:
    env.purge_queue()
    store = env.store
    now = redis_now_ms(store)
    # The first boundary after the writes: ~10,000 entries/s plus a margin.
    boundary = (now + int(count / 8_000 * 1000) + 20_000) // MINUTE_MS * MINUTE_MS + MINUTE_MS
    before = env.used_memory()
    started = time.perf_counter()
    periodic.add_many(env.ours, _entries(count, ms_to_iso(boundary)))
    add_seconds = time.perf_counter() - started
    used = env.used_memory() - before
    say(f"{count:,} entries written in {add_seconds:.1f}s; they fire at {ms_to_iso(boundary)}")
    key_bytes = _key_bytes(env)
    recorder = Recorder()
    recorder.expected = count
    with running(env, recorder):
        caught_up = redis_now_ms(store) >= boundary
        wait = max(0.0, (boundary - redis_now_ms(store)) / 1000) + 120
        if not recorder.done.wait(wait):
            raise RuntimeError(f"only {recorder.count:,} of {count:,} occurrences were handed over")
    values = sorted(recorder.lateness_ms)
    env.purge_queue()
    return PeriodicFigures(
        count, add_seconds, used, key_bytes, len(values), boundary, caught_up, percentile(values, 50),
        percentile(values, 99), float(values[-1]), float(values[-1]),
    )


def _key_bytes(env: BenchEnv) -> dict[str, int]:
    client = env.store_client
    keys = env.store.keys
    out: dict[str, int] = {}
    for kind in ("names", "defs", "plan", "state", "tpl", "next"):
        total = 0
        for s in range(keys.shards):
            name = getattr(keys.shard(s), f"periodic_{kind}")
            total += int(client.memory_usage(name, samples=0) or 0)
        out[kind] = total
    return out

"""The figures against the number of pending tasks, on one store filled step by step.

The store on db 0 of one ``redis-server``. The lanes' envs share the store (same prefix):
``fast`` has its broker on db 0 too (the fast path's condition), ``generic`` on db 1 and
``generic_server`` on a redis-server of its own (the generic path's two setups: claim, publish,
ack; on db 1 the one Redis core runs the broker's writes too). At each size the store is topped
up with far-future tasks (timed: the bulk rate of that increment), then: bytes per pending task (``used_memory`` delta
since the empty server / pending entries), ``apply_async(countdown)`` ours and plain Celery's,
plain ``apply_async()`` into the queue, the drain rate of ``drain`` tasks due now among the
pending ones on each lane, and lateness at a steady 1,000 due/s on the fast path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .environment import BenchEnv
from .fastpath import burst, drain, load
from .lateness import steady_lateness
from .scheduling import apply_async, bulk, far_future_calls

Say = Callable[[str], None]


@dataclass(frozen=True)
class Lane:
    """One way the due tasks reach the queue: ``key`` names its figures, ``path`` is the path its
    dispatcher must take (fast or generic), ``broker`` says where its broker is."""

    key: str
    path: str
    broker: str
    env: BenchEnv


@dataclass(frozen=True)
class CurveOptions:
    sizes: list[int]
    calls: int  # apply_async calls timed per rate
    drain: int  # due tasks drained per path at each size
    stream_rate: int
    stream_seconds: float


def pending(env: BenchEnv) -> int:
    client = env.store_client
    keys = env.store.keys
    return sum(int(client.zcard(keys.shard(s).due)) for s in range(keys.shards))


def curve(lanes: list[Lane], opts: CurveOptions, say: Say,
          keep: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """One row per size; ``keep`` is called with each row as soon as it is measured. The first
    lane is the fast path's: it schedules, and its lateness is measured."""
    fast = lanes[0].env
    base = fast.used_memory()
    rows: list[dict[str, Any]] = []
    filled = 0
    for size in opts.sizes:
        add = size - pending(fast)
        say(f"{size:,} pending: schedule_many of {add:,} far-future tasks")
        fill = bulk(fast, add, far_future_calls(add, start=filled))
        filled += add
        fast.purge_queue()
        n = pending(fast)
        row: dict[str, Any] = {
            "pending": n, "bulk_count": add, "bulk_per_s": round(fill.per_second),
            "bytes_per_task": round((fast.used_memory() - base) / n, 1),
        }
        say(f"{n:,} pending: {row['bytes_per_task']} B a task; apply_async x{opts.calls:,} (ours, plain)")
        row["plain_apply_async_per_s"] = round(apply_async(fast.plain, opts.calls, None).per_second)
        fast.purge_queue()
        row["plain_countdown_per_s"] = round(apply_async(fast.plain, opts.calls, 3600).per_second)
        fast.purge_queue()
        row["countdown_per_s"] = round(apply_async(fast.ours, opts.calls, 3600).per_second)
        count = min(opts.drain, n)
        for lane in lanes:
            say(f"{n:,} pending: {lane.path} path (broker {lane.broker}) drains {count:,} due tasks")
            d = drain(lane.env, lane.path, count)
            row[f"{lane.key}_per_s"] = round(d.per_second)
            row[f"{lane.key}_queued"] = d.queued
        say(f"{n:,} pending: lateness at {opts.stream_rate:,} due/s for {opts.stream_seconds:g}s (fast path)")
        late = steady_lateness(fast, opts.stream_rate, opts.stream_seconds)
        row.update(lateness_p50_ms=late.p50_ms, lateness_p99_ms=late.p99_ms, lateness_max_ms=late.max_ms,
                   load=load())
        rates = ", ".join(f"{lane.key} {row[lane.key + '_per_s']:,}/s" for lane in lanes)
        say(f"{n:,} pending: {rates}, "
            f"plain apply_async {row['plain_apply_async_per_s']:,}/s, p99 {late.p99_ms:.0f} ms")
        rows.append(row)
        keep(row)
    return rows


def bursts(lanes: list[Lane], count: int, generic_max: int, say: Say,
           bulk_per_s: float | None = None) -> list[dict[str, Any]]:
    """``count`` tasks due at the same second, with the store as the curve left it. The lead
    before the due time allows half the bulk rate measured last (``bulk_per_s``): a loaded machine
    schedules the burst slower than the default lead assumes."""
    lead = 3.0 + count / min(25_000.0, bulk_per_s / 2) if bulk_per_s else None
    fast = lanes[0].env
    out = []
    for lane in lanes:
        if lane.path == "generic" and count > generic_max:
            say(f"{lane.key} burst skipped: {count:,} > --generic-burst-max {generic_max:,}")
            continue
        say(f"{lane.key}: burst of {count:,} due at one second with {pending(fast):,} pending")
        b = burst(lane.env, lane.path, count, lead=lead)
        out.append({**asdict(b), "broker": lane.broker, "pending": pending(fast), "load": load()})
        say(f"{lane.key}: the last in the queue {b.last_in_queue_ms / 1000:.2f}s after the due time")
    return out


def lateness_at(lanes: list[Lane], rates: list[int], seconds: float, say: Say) -> list[dict[str, Any]]:
    fast = lanes[0].env
    out = []
    for rate in rates:
        for lane in lanes:
            n = pending(fast)
            say(f"{lane.key}: lateness at {rate:,} due/s for {seconds:g}s with {n:,} pending")
            where = {"path": lane.path, "broker": lane.broker, "rate": rate, "pending": n}
            try:
                late = steady_lateness(lane.env, rate, seconds)
            except RuntimeError as e:  # fell so far behind that the stream did not finish
                lane.env.purge_queue()
                out.append({**where, "error": str(e), "load": load()})
                continue
            out.append({**where, **asdict(late), "load": load()})
    return out

"""``run_benchmark``: every figure in one run, next to plain Celery's."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from celery_zset_scheduler.celery.core.state import broker_redis_url, read_settings

from . import dispatching, lateness, memory, periodic, scheduling
from .environment import BenchEnv, describe_machine, local_env, make_env
from .report import Figure, Report

# The targets.
TARGET_BULK = 150_000.0
TARGET_BYTES = 400.0
TARGET_DISPATCH = 20_000.0
TARGET_P99_MS = 10.0


@dataclass(frozen=True)
class Options:
    size: int = 1_000_000  # pending tasks for the bytes and lateness figures (scheduled in bulk)
    calls: int = 5_000  # single apply_async calls timed for each rate
    dispatch: int = 100_000  # due tasks drained to time the dispatcher
    raw: int = 100_000  # raw envelopes stored to price "the envelope as-is"
    stream_rate: int = 1_000  # due tasks per second for the lateness figure
    stream_seconds: float = 20.0
    servers: int = 1  # our own Redis: one server (store db 0, broker db 1) or two
    periodic: int = 100_000  # periodic entries all firing in the same minute (0: skip those figures)
    rabbitmq: str = "auto"  # "auto": a RabbitMQ node of our own; "off"; or an amqp:// URL
    rabbitmq_dispatch: int = 50_000  # due tasks drained into RabbitMQ, per queue type
    only_rabbitmq: bool = False


Target = Any  # None (start our own Redis), a Celery app, or a (store_url, broker_url) pair


def run_benchmark(target: Target = None, options: Options | None = None,
                  progress: Callable[[str], None] | None = None) -> Report:
    """Measure everything; ``target`` None starts its own ``redis-server`` (nothing else is touched)."""
    opts = options or Options()
    say = progress or (lambda text: None)
    with _environment(target, opts) as env:
        report = Report({"size": f"{opts.size:,}", **describe_machine(env)})
        try:
            _run(env, opts, report, say)
        finally:
            say("cleaning up")
            env.cleanup()
    return report


@contextmanager
def _environment(target: Target, opts: Options) -> Iterator[BenchEnv]:
    if target is None:
        with local_env(servers=opts.servers) as env:
            yield env
        return
    if isinstance(target, tuple):
        store_url, broker_url = target
        yield make_env(store_url, broker_url, topology="given URLs")
        return
    settings = read_settings(target)  # a Celery app: its store URL, broker and shard count
    broker = broker_redis_url(target) or str(target.conf.broker_url)
    yield make_env(str(settings.url), broker, shards=settings.shards, topology="the app's Redis")


def _timed(say: Callable[[str], None], what: str) -> Callable[[], None]:
    started = time.perf_counter()
    say(f"{what} ...")
    return lambda: say(f"{what}: {time.perf_counter() - started:.1f}s")


def _run(env: BenchEnv, opts: Options, report: Report, say: Callable[[str], None]) -> None:
    if not opts.only_rabbitmq:
        _redis_figures(env, opts, report, say)
    if opts.rabbitmq != "off":
        from .rabbitmq import rabbitmq_figures

        rabbitmq_figures(env.store_url, report, url=None if opts.rabbitmq == "auto" else opts.rabbitmq,
                         count=min(opts.rabbitmq_dispatch, opts.size), calls=opts.calls, say=say)


def _redis_figures(env: BenchEnv, opts: Options, report: Report, say: Callable[[str], None]) -> None:
    done = _timed(say, f"plain apply_async() x{opts.calls:,}")
    plain = scheduling.apply_async(env.plain, opts.calls, None)
    env.purge_queue()
    done()
    done = _timed(say, f"plain apply_async(countdown=3600) x{opts.calls:,}")
    plain_eta = scheduling.apply_async(env.plain, opts.calls, 3600)
    # The broker list's own size (used_memory deltas on a shared server are too noisy here).
    broker_bytes = env.queue_bytes() / (opts.calls + 1) if env.broker_client else None
    raw = memory.envelope(env)
    env.purge_queue()
    done()
    done = _timed(say, f"our apply_async(countdown=3600) x{opts.calls:,}")
    ours_eta = scheduling.apply_async(env.ours, opts.calls, 3600)
    done()

    done = _timed(say, f"schedule_many of {opts.size:,} far-future tasks")
    before = env.used_memory()
    bulk = scheduling.bulk(env, opts.size, scheduling.far_future_calls(opts.size, start=opts.calls + 1))
    footprint = memory.Footprint(opts.size, env.used_memory() - before)
    done()
    report.add(Figure("bulk schedule_many", "tasks/s", bulk.per_second, plain.per_second,
                      "apply_async()", TARGET_BULK), count=bulk.count, seconds=round(bulk.seconds, 3))
    report.add(Figure("apply_async(countdown)", "tasks/s", ours_eta.per_second, plain_eta.per_second,
                      "apply_async(countdown)"), count=ours_eta.count, seconds=round(ours_eta.seconds, 3),
               plain_apply_async_per_s=round(plain.per_second), plain_countdown_per_s=round(plain_eta.per_second))

    as_is = None
    if raw is not None:
        count = min(opts.raw, opts.size)
        done = _timed(say, f"{count:,} raw Kombu envelopes stored as-is")
        as_is = memory.envelope_as_is(env, raw, count)
        done()
    report.add(
        Figure("Redis bytes per pending task", "B", footprint.per_task, as_is.per_task if as_is else None,
               f"{len(raw)}-B envelope as-is" if raw else "", TARGET_BYTES, higher_is_better=False),
        tasks_added=opts.size, used_memory_delta=footprint.used_bytes, envelope_len=len(raw) if raw else None,
        envelope_as_is_per_task=round(as_is.per_task, 1) if as_is else None,
        plain_broker_list_per_task=round(broker_bytes, 1) if broker_bytes is not None else None,
        **memory.breakdown(env),
    )

    count = min(opts.dispatch, opts.size)
    done = _timed(say, f"one dispatcher draining {count:,} due tasks")
    drained = dispatching.dispatch_rate(env, count)
    done()
    report.add(
        Figure("dispatch, one dispatcher", "tasks/s", drained.per_second, None, "", TARGET_DISPATCH),
        count=drained.count, seconds=round(drained.seconds, 3), claim_seconds=round(drained.claim_seconds, 3),
        publish_seconds=round(drained.publish_seconds, 3), queued=drained.queued,
    )

    done = _timed(say, f"{opts.stream_rate:,} due/s for {opts.stream_seconds:g}s with {opts.size:,} pending")
    late = lateness.steady_lateness(env, opts.stream_rate, opts.stream_seconds)
    done()
    details = {"count": late.count, "max_ms": late.max_ms, "mean_ms": round(late.mean_ms, 2)}
    report.add(Figure("lateness p50", "ms", late.p50_ms, None, "", None, higher_is_better=False), **details)
    report.add(Figure("lateness p99", "ms", late.p99_ms, None, "", TARGET_P99_MS, higher_is_better=False))
    if opts.periodic:
        _periodic(env, opts, report, say)


def _periodic(env: BenchEnv, opts: Options, report: Report, say: Callable[[str], None]) -> None:
    done = _timed(say, f"{opts.periodic:,} periodic entries (* * * * *) written, then fired in the same minute")
    figures = periodic.periodic_at_scale(env, opts.periodic, say)
    done()
    report.add(Figure("Redis bytes per periodic entry", "B", figures.bytes_per_entry, None, "", None,
                      higher_is_better=False),
               entries=figures.entries, used_memory_delta=figures.used_bytes,
               key_bytes_per_entry={k: round(v / figures.entries, 1) for k, v in figures.key_bytes.items()},
               written_per_s=round(figures.adds_per_second))
    details = {"entries": figures.entries, "fired": figures.fired, "boundary": figures.boundary_ms,
               "last_handed_over_ms": figures.last_ms, "boundary_had_passed": figures.caught_up}
    report.add(Figure(f"periodic lateness p50 ({figures.entries:,} due at once)", "ms", figures.p50_ms, None, "",
                      None, higher_is_better=False), **details)
    report.add(Figure(f"periodic lateness p99 ({figures.entries:,} due at once)", "ms", figures.p99_ms, None, "",
                      None, higher_is_better=False))

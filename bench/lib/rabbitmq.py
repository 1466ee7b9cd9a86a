# mypy: disallow-untyped-calls=False
"""The RabbitMQ figures: one dispatcher publishing with confirms, next to plain Celery's
``apply_async()`` into the same RabbitMQ, in the same run, for a quorum and a classic queue.

The broker is a RabbitMQ node of the benchmark's own (started from the installed server's scripts on
free loopback ports, as the test suite does: ``tests/support/rabbitmq.py``), or a given ``amqp://``
URL; each queue type gets a vhost of its own, deleted afterwards (on a given URL: the queue is
deleted instead). The store is the benchmark's Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from kombu.connection import Connection

from . import dispatching, scheduling
from .environment import BenchEnv, make_env
from .report import Figure, Report

TARGET_RABBITMQ = 10_000.0
QUEUE_TYPES = ("quorum", "classic")


@contextmanager
def _broker(url: str | None) -> Iterator[tuple[Any, str]]:
    """``(handle or None, description)``: our own node, or the given URL."""
    if url:
        yield None, "given URL"
        return
    from tests.support.rabbitmq import provide

    broker = provide()
    try:
        yield broker, broker.describe()
    finally:
        broker.close()


def rabbitmq_figures(store_url: str, report: Report, *, url: str | None, count: int, calls: int,
                     say: Callable[[str], None]) -> None:
    """Add the RabbitMQ figures to ``report`` (a RabbitMQ that cannot be had is noted, not fatal)."""
    with ExitStack() as stack:
        try:
            broker, described = stack.enter_context(_broker(url))
        except Exception as exc:  # no server scripts, a node that does not start: say why
            report.environment["rabbitmq"] = f"skipped: {exc}"
            say(f"RabbitMQ figures skipped: {exc}")
            return
        report.environment["rabbitmq"] = described
        for queue_type in QUEUE_TYPES:
            vhost = broker.add_vhost() if broker is not None else None
            broker_url = broker.url_for(vhost) if broker is not None else str(url)
            try:
                _one(store_url, broker_url, queue_type, report, count, calls, say)
            finally:
                if broker is not None and vhost is not None:
                    broker.delete_vhost(vhost)


def _one(store_url: str, broker_url: str, queue_type: str, report: Report, count: int, calls: int,
         say: Callable[[str], None]) -> None:
    env = make_env(store_url, broker_url, topology=f"RabbitMQ {queue_type} queue",
                   both={"task_default_queue_type": queue_type})
    try:
        say(f"RabbitMQ {queue_type}: plain apply_async() x{calls:,} ...")
        plain = scheduling.apply_async(env.plain, calls, None)
        # apply_async() returns once its message is written, not once RabbitMQ queued it: a purge
        # right away can miss the last ones, which would then be counted with the dispatched tasks.
        _wait_for_count(env, calls + 1)  # and the warm-up call
        _purge(env)
        say(f"RabbitMQ {queue_type}: one dispatcher with confirms draining {count:,} due tasks ...")
        drained = dispatching.dispatch_rate(env, count)
        queued = _count(env)
        if queued != count:
            raise RuntimeError(f"RabbitMQ holds {queued} messages after dispatching {count}")
        say(f"RabbitMQ {queue_type}: {drained.per_second:,.0f} tasks/s (plain apply_async {plain.per_second:,.0f}/s)")
        report.add(
            Figure(f"dispatch into RabbitMQ ({queue_type}), confirms", "tasks/s", drained.per_second,
                   plain.per_second, "apply_async() into the same RabbitMQ", TARGET_RABBITMQ),
            count=drained.count, seconds=round(drained.seconds, 3), claim_seconds=round(drained.claim_seconds, 3),
            publish_seconds=round(drained.publish_seconds, 3), queued=queued,
            plain_apply_async_count=plain.count, plain_apply_async_seconds=round(plain.seconds, 3),
        )
    finally:
        _delete_queue(env)
        env.cleanup()


def _count(env: BenchEnv) -> int:
    with Connection(env.broker_url) as conn:
        _, n, _ = conn.default_channel.queue_declare(queue=env.queue, passive=True)
        return int(n)


def _wait_for_count(env: BenchEnv, expected: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while _count(env) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"RabbitMQ holds {_count(env)} of the {expected} messages apply_async() sent")
        time.sleep(0.05)


def _purge(env: BenchEnv) -> None:
    with Connection(env.broker_url) as conn:
        conn.default_channel.queue_purge(env.queue)


def _delete_queue(env: BenchEnv) -> None:
    try:
        with Connection(env.broker_url) as conn:
            conn.default_channel.queue_delete(env.queue)
    except Exception:  # a vhost of our own is deleted anyway
        pass

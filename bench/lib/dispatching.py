"""Dispatch rate: one dispatcher draining due tasks into the real broker queue through Kombu."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from celery_zset_scheduler.celery.dispatcher.build import build_dispatcher
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.dispatch.observer import Observer

from .environment import BenchEnv
from .scheduling import bulk


class Recorder(Observer):
    """Counts what the dispatcher reports: claims, publishes (with lateness) and their timings."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.lateness_ms: list[int] = []
        self.first_claim: float | None = None  # perf_counter when the first non-empty claim started
        self.last_publish: float | None = None
        self.claim_seconds = 0.0
        self._last_claim = -1.0
        self.publish_seconds = 0.0
        self.done = threading.Event()
        self.expected = 0

    def claimed(self, shard: int, count: int, seconds: float) -> None:
        with self.lock:
            # One claim round reports every shard with the same duration: count it once.
            if seconds != self._last_claim:
                self.claim_seconds += seconds
            self._last_claim = seconds
            if count and self.first_claim is None:
                self.first_claim = time.perf_counter() - seconds

    def published(self, per_shard: Mapping[int, int], lateness_ms: Sequence[int], seconds: float) -> None:
        with self.lock:
            self.count += sum(per_shard.values())
            self.lateness_ms.extend(lateness_ms)
            self.publish_seconds += seconds
            self.last_publish = time.perf_counter()
            if self.expected and self.count >= self.expected:
                self.done.set()


@contextmanager
def running(env: BenchEnv, recorder: Recorder) -> Iterator[Dispatcher]:
    """A dispatcher of the benchmark app in a thread, leading every shard before it is yielded."""
    dispatcher = build_dispatcher(env.ours, observer=recorder, pinned=set(range(env.shards)))
    thread = threading.Thread(target=dispatcher.run, name="zbench-dispatcher", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(dispatcher.leadership.owned) < env.shards:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the benchmark dispatcher did not acquire its shards")
            time.sleep(0.01)
        yield dispatcher
    finally:
        dispatcher.stop()
        thread.join(timeout=60)


@dataclass(frozen=True)
class DispatchResult:
    count: int
    seconds: float
    claim_seconds: float
    publish_seconds: float
    queued: int | None  # messages found in the broker queue afterwards

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0


def dispatch_rate(env: BenchEnv, count: int, timeout: float = 600.0) -> DispatchResult:
    """Schedule ``count`` tasks due now, then time one dispatcher publishing all of them."""
    env.purge_queue()
    bulk(env, count, (((i, i), {}, 0.0) for i in range(count)))
    recorder = Recorder()
    recorder.expected = count
    with running(env, recorder):
        if not recorder.done.wait(timeout):
            raise RuntimeError(f"dispatched {recorder.count} of {count} tasks in {timeout:.0f}s")
    assert recorder.first_claim is not None and recorder.last_publish is not None
    client = env.broker_client
    queued = int(client.llen(env.queue)) if client is not None else None
    env.purge_queue()
    return DispatchResult(
        count, recorder.last_publish - recorder.first_claim, recorder.claim_seconds,
        recorder.publish_seconds, queued,
    )

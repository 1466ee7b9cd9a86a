"""A few big messages due with many small ones, run by a real ``celery worker`` (threads pool).

One case: ``small`` tasks and ``big`` tasks carrying a ``big_mb`` MB argument, all due at the same
moment ``lead`` seconds after the scheduling starts. With the plugin they wait in the store and a
dispatcher (a thread of this process, leading every shard, default leases) publishes them when
due; plain Celery sends them to the broker at once with ``eta=`` and its worker holds them until
due. Each task records when it started relative to its due time (``zbench.stamp``); the figures
are the small tasks' start lateness, when the last task started (time to drain), and for the
plugin its own dispatch lateness (publish returned minus due time) of the small ones.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from celery_zset_scheduler.celery.producer.bulk import schedule_many

from .dispatching import Recorder, running
from .environment import STAMP_NAME, BenchEnv
from .lateness import percentile
from .worker_proc import wait_until_ready, worker_process

LEAD_S = 6.0  # time to send everything (plain Celery: 100 MB to the broker, taken in by the worker)


@dataclass(frozen=True)
class MixResult:
    case: str
    small: int
    big: int
    big_mb: int
    start_p50_ms: float  # small tasks: started minus due
    start_p99_ms: float
    start_max_ms: float
    big_start_max_ms: float
    drain_ms: float  # the last task (any) started, after the due time
    dispatch_p50_ms: float  # plugin only: published minus due, the small ones (nan for plain Celery)
    dispatch_p99_ms: float
    dispatch_max_ms: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SmallPublishes(Recorder):
    """The lateness of the publish calls before the first big one (the small ones, published first)."""

    def __init__(self, small: int) -> None:
        super().__init__()
        self.small = small
        self.small_lateness_ms: list[int] = []

    def published(self, per_shard: Any, lateness_ms: Any, seconds: float) -> None:
        with self.lock:
            if len(self.small_lateness_ms) < self.small:
                self.small_lateness_ms.extend(lateness_ms[: self.small - len(self.small_lateness_ms)])
        super().published(per_shard, lateness_ms, seconds)


def run_case(env: BenchEnv, plugin: bool, small: int, big: int, big_mb: int, *, lead: float = LEAD_S,
             timeout: float = 180.0) -> MixResult:
    client = env.broker_client
    assert client is not None, "the mix needs a Redis broker"
    results = f"{env.queue}.starts"
    client.delete(results)
    total = small + big
    recorder = SmallPublishes(small)
    recorder.expected = total
    pad = "x" * (big_mb << 20)
    with worker_process(env, plugin, pool="threads", concurrency=4, extra={"ZBENCH_RESULTS": results}) as worker:
        wait_until_ready(env, worker)
        with running(env, recorder) if plugin else contextlib.nullcontext():
            due = time.time() + lead
            eta = datetime.fromtimestamp(due, tz=timezone.utc)
            app = env.ours if plugin else env.plain
            task = app.tasks[STAMP_NAME]
            if plugin:
                schedule_many(task, [((f"s{i}", due), {}, eta) for i in range(small)])
            else:
                for i in range(small):
                    task.apply_async((f"s{i}", due), eta=eta)
            for i in range(big):
                task.apply_async((f"b{i}", due), {"pad": pad}, eta=eta)
            if time.time() > due:
                raise RuntimeError(f"scheduling took longer than the lead of {lead:.1f}s: give it more")
            worker.wait_for(f"{total:,} tasks to run", lambda: client.llen(results) >= total, timeout)
    starts = [(x.decode() if isinstance(x, bytes) else x).split() for x in client.lrange(results, 0, -1)]
    client.delete(results)
    env.purge_queue()
    ran = [tag for tag, _ in starts]
    if len(ran) != total or len(set(ran)) != total:
        raise RuntimeError(f"{len(ran)} runs of {len(set(ran))} distinct tasks, expected {total} once each")
    small_ms = sorted(round(float(s) * 1000) for tag, s in starts if tag.startswith("s"))
    big_ms = [round(float(s) * 1000) for tag, s in starts if tag.startswith("b")]
    published = sorted(recorder.small_lateness_ms)
    nan = float("nan")
    return MixResult(
        case=("plugin" if plugin else "plain Celery ETA") + (f", {big} x {big_mb} MB" if big else ", small only"),
        small=small, big=big, big_mb=big_mb,
        start_p50_ms=percentile(small_ms, 50), start_p99_ms=percentile(small_ms, 99), start_max_ms=small_ms[-1],
        big_start_max_ms=max(big_ms, default=nan), drain_ms=max(small_ms[-1], max(big_ms, default=0)),
        dispatch_p50_ms=percentile(published, 50) if plugin else nan,
        dispatch_p99_ms=percentile(published, 99) if plugin else nan,
        dispatch_max_ms=float(published[-1]) if plugin else nan,
    )

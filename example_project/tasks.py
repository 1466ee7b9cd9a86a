"""The example Celery app: one line installs the store (`celery_zset_scheduler.install(app)`).

Configured from the environment so the demo can point it at any Redis:
``DEMO_REDIS_URL`` (broker and store), ``DEMO_PREFIX`` (keys and queue name).
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

import celery_zset_scheduler

REDIS_URL = os.environ.get("DEMO_REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("DEMO_PREFIX", "demo")

app = Celery("example_project")
app.conf.update(
    broker_url=REDIS_URL,
    task_default_queue=PREFIX,
    task_ignore_result=True,
    worker_prefetch_multiplier=4,  # small: a task waiting in one worker's prefetch buffer runs late
    broker_connection_retry_on_startup=True,
    zset_scheduler_prefix=PREFIX,
    zset_scheduler_shards=8,
    zset_scheduler_lock_timeout=3.0,
    zset_scheduler_inflight_timeout=5.0,
)
celery_zset_scheduler.install(app)

_recorder: redis.Redis | None = None


def recorder() -> redis.Redis:
    global _recorder
    if _recorder is None:
        _recorder = redis.Redis.from_url(REDIS_URL)
    return _recorder


@app.task(name="example.remind")
def remind(n: int, due: float) -> None:
    """A reminder: records that reminder ``n`` ran, and how late (seconds after its due time)."""
    late = time.time() - due
    pipe = recorder().pipeline(transaction=False)
    pipe.hincrby(f"{PREFIX}:executed", str(n), 1)
    pipe.rpush(f"{PREFIX}:lateness", f"{due:.3f} {late:.4f}")
    pipe.execute()

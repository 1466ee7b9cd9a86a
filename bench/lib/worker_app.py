"""The app a benchmark ``celery worker`` subprocess runs (``celery -A bench.lib.worker_app worker``).

Configured from the environment by the parent (``bench.lib.rss``): ``ZBENCH_BROKER``,
``ZBENCH_QUEUE``, and with ``ZBENCH_STORE``/``ZBENCH_PREFIX`` set the plugin is installed.
``zbench.stamp`` records when it started, relative to its due time, in the broker's Redis list
``ZBENCH_RESULTS`` (``bench.lib.mix``).
"""

from __future__ import annotations

import os
import time
from functools import cache

import redis
from celery import Celery

from celery_zset_scheduler.celery.install import install

from .environment import STAMP_NAME, TASK_NAME

app = Celery("zbench-worker", set_as_current=True)
app.conf.update({
    "broker_url": os.environ["ZBENCH_BROKER"],
    "task_default_queue": os.environ["ZBENCH_QUEUE"],
    "broker_connection_retry_on_startup": True,
    "worker_hijack_root_logger": False,
})


@app.task(name=TASK_NAME)
def add(x: int, y: int) -> int:
    return x + y


@cache
def _results() -> redis.Redis:
    return redis.Redis.from_url(os.environ["ZBENCH_BROKER"])


@app.task(name=STAMP_NAME)
def stamp(tag: str, due: float, pad: str = "") -> None:
    _results().rpush(os.environ["ZBENCH_RESULTS"], f"{tag} {time.time() - due:.4f}")


if os.environ.get("ZBENCH_STORE"):
    app.conf.update({
        "zset_scheduler_url": os.environ["ZBENCH_STORE"],
        "zset_scheduler_prefix": os.environ["ZBENCH_PREFIX"],
        "zset_scheduler_shards": int(os.environ.get("ZBENCH_SHARDS", "8")),
    })
    install(app)

"""A Celery app configured from environment variables, for tests that run real processes
(`celery -A tests.support.proc_app zset run`, `celery -A tests.support.proc_app worker`)."""

from __future__ import annotations

import json
import os
from typing import Any

from celery import Celery
from celery.schedules import crontab

import celery_zset_scheduler

from .helpers import register_task_side, register_tasks

env = os.environ
app = Celery("proc_app", set_as_current=False)
app.conf.update({
    "broker_url": env["ZSET_TEST_BROKER"],
    "result_backend": env.get("ZSET_TEST_BACKEND"),
    "zset_scheduler_url": env["ZSET_TEST_STORE"] or None,  # empty: the broker's
    "zset_scheduler_prefix": env.get("ZSET_TEST_PREFIX", "zt"),
    "zset_scheduler_shards": int(env.get("ZSET_TEST_SHARDS", "4")),
    "broker_connection_retry_on_startup": True,
    **json.loads(env.get("ZSET_TEST_CONF", "{}")),
})


def _beat_schedule(raw: str) -> dict[str, Any]:
    """``ZSET_TEST_BEAT``: beat_schedule as JSON, a schedule {"crontab": {...}} being a crontab."""
    entries = json.loads(raw)
    for item in entries.values():
        if isinstance(item["schedule"], dict):
            item["schedule"] = crontab(**item["schedule"]["crontab"])
    return dict(entries)


if env.get("ZSET_TEST_BEAT"):
    app.conf.beat_schedule = _beat_schedule(env["ZSET_TEST_BEAT"])
register_tasks(app, env["ZSET_TEST_RECORDS"])
register_task_side(app, env["ZSET_TEST_RECORDS"])
if env.get("ZSET_TEST_INSTALL", "1") == "1":  # "0": a worker whose app forgot install(app)
    celery_zset_scheduler.install(app)

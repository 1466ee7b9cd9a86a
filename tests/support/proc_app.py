"""A Celery app configured from environment variables, for tests that run real processes
(`celery -A tests.support.proc_app zset run`, `celery -A tests.support.proc_app worker`)."""

from __future__ import annotations

import json
import os

from celery import Celery

import celery_zset_scheduler

from .helpers import register_task_side, register_tasks

env = os.environ
app = Celery("proc_app", set_as_current=False)
app.conf.update({
    "broker_url": env["ZSET_TEST_BROKER"],
    "result_backend": env.get("ZSET_TEST_BACKEND"),
    "zset_scheduler_url": env["ZSET_TEST_STORE"],
    "zset_scheduler_prefix": env.get("ZSET_TEST_PREFIX", "zt"),
    "zset_scheduler_shards": int(env.get("ZSET_TEST_SHARDS", "4")),
    "broker_connection_retry_on_startup": True,
    **json.loads(env.get("ZSET_TEST_CONF", "{}")),
})
register_tasks(app, env["ZSET_TEST_RECORDS"])
register_task_side(app, env["ZSET_TEST_RECORDS"])
if env.get("ZSET_TEST_INSTALL", "1") == "1":  # "0": a worker whose app forgot install(app)
    celery_zset_scheduler.install(app)

"""A Celery app configured from environment variables, for `celery -A tests.support.cli_app zset ...`
subprocesses in the CLI and metrics tests."""

from __future__ import annotations

import json
import os

from celery import Celery

import celery_zset_scheduler

env = os.environ
app = Celery("cli_app", set_as_current=False)
app.conf.update({
    "broker_url": env["ZSET_CLI_BROKER"],
    "zset_scheduler_url": env["ZSET_CLI_STORE"],
    "zset_scheduler_prefix": env.get("ZSET_CLI_PREFIX", "zt"),
    "zset_scheduler_shards": int(env.get("ZSET_CLI_SHARDS", "4")),
    "broker_connection_retry_on_startup": True,
    **json.loads(env.get("ZSET_CLI_CONF", "{}")),
})


@app.task(name="t.record", shared=False)  # type: ignore[untyped-decorator]
def record(tag: object = None, due: float | None = None) -> object:
    return tag


celery_zset_scheduler.install(app)

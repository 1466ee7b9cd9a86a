"""The worker container's app module (pytest-celery copies it in as ``app.py``): Celery's default
app of pytest-celery's worker, with this package installed on the store named by the environment."""

from __future__ import annotations

import os

from celery import Celery

import celery_zset_scheduler

app = Celery("celery_test_app")
app.config_from_object("celeryconfig", silent=True)
app.conf.update(
    broker_url=os.environ.get("CELERY_BROKER_URL"),
    result_backend=os.environ.get("CELERY_RESULT_BACKEND"),
    zset_scheduler_url=os.environ["ZSET_SCHEDULER_URL"],
)
celery_zset_scheduler.install(app)

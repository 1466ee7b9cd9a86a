"""The shop's Celery app: every ``CELERY_*`` Django setting configures it, and one line installs
the store (``celery_zset_scheduler.install(app)``)."""

import os

from celery import Celery

import celery_zset_scheduler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")

app = Celery("shop")
app.config_from_object("django.conf:settings", namespace="CELERY")
celery_zset_scheduler.install(app)
app.autodiscover_tasks()

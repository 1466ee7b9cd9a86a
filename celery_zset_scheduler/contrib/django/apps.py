"""The Django application: label ``zset_scheduler``."""

from __future__ import annotations

from django.apps import AppConfig


class ZSetSchedulerConfig(AppConfig):
    name = "celery_zset_scheduler.contrib.django"
    label = "zset_scheduler"
    verbose_name = "Celery ZSet scheduler"
    default_auto_field = "django.db.models.AutoField"

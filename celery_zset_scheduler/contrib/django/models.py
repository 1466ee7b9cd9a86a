"""Unmanaged models: no tables, only content types and permissions for the admin pages.

``view`` lets a staff member read a page; ``change`` lets them act (cancel, reschedule, run now,
requeue, delete; for periodic entries also add, edit, enable, disable, pause, resume). The data
itself is read from Redis on every request.
"""

from __future__ import annotations

from django.db import models


class Overview(models.Model):
    class Meta:
        managed = False
        default_permissions = ("view",)
        verbose_name = "overview"
        verbose_name_plural = "overview"


class ScheduledTask(models.Model):
    class Meta:
        managed = False
        default_permissions = ("view", "change")
        verbose_name = "scheduled task"
        verbose_name_plural = "scheduled tasks"


class DeadLetter(models.Model):
    class Meta:
        managed = False
        default_permissions = ("view", "change")
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"


class PeriodicEntry(models.Model):
    class Meta:
        managed = False
        default_permissions = ("view", "change")
        verbose_name = "periodic entry"
        verbose_name_plural = "periodic entries"

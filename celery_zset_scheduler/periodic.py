"""Periodic entries at run time: the highly available ``beat_schedule`` replacement.

    from celery.schedules import crontab
    from celery_zset_scheduler import periodic

    periodic.add(app, "report", "proj.tasks.report", crontab(minute=0, hour=7), kwargs={"kind": "daily"})
    periodic.pause(app, "report", note="migrating the warehouse")
    periodic.resume(app, "report")          # missed runs follow the entry's catch-up policy
    periodic.run_now(app, "report")
    page = periodic.list(app, limit=100)    # page.cursor for the next page

Entries live in the store (on the shard of their name); running dispatchers (``beat -S zset``,
``celery zset run``) pick up every change at once, and run each occurrence exactly once (I11).
"""

from __future__ import annotations

from .celery.periodic.runtime import (
    PeriodicInfo,
    PeriodicPage,
    add,
    add_entry,
    add_many,
    backfill,
    backfill_preview,
    disable,
    enable,
    get,
    list_entries,
    pause,
    remove,
    resume,
    run_now,
    update,
)
from .celery.periodic.schedules import ZonedCrontab, clocked
from .model.periodic import CATCHUP_POLICIES, OVERLAP_POLICIES, PeriodicEntry, PeriodicEntryError, PeriodicState

list = list_entries  # the API's name for it (the builtin is not used in this module)

__all__ = [
    "CATCHUP_POLICIES",
    "OVERLAP_POLICIES",
    "PeriodicEntry",
    "PeriodicEntryError",
    "PeriodicInfo",
    "PeriodicPage",
    "PeriodicState",
    "ZonedCrontab",
    "add",
    "add_entry",
    "add_many",
    "backfill",
    "backfill_preview",
    "clocked",
    "disable",
    "enable",
    "get",
    "list",
    "list_entries",
    "pause",
    "remove",
    "resume",
    "run_now",
    "update",
]

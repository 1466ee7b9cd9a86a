"""Periodic entries with Celery: schedule specs and Celery's schedule classes, fire times (crontab
in its own time zone, DST-correct), the runtime API (add, update, remove, pause, run now,
backfill), ``beat_schedule`` synced at a dispatcher's start, the planner the dispatcher runs, and
readers of RedBeat's and django-celery-beat's entries.

Run by any process for the runtime API (app code, the admin, ``celery zset periodic``), and by
the dispatcher for the planner and the sync. Imports :mod:`..producer` (an entry's message is built as
``schedule_many`` builds one), :mod:`..core` and the layers below; not the worker, publishers,
backlog, dispatcher or CLI.
"""

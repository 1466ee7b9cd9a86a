"""Signals of celery-zset-scheduler."""

from __future__ import annotations

from celery.utils.dispatch import Signal

#: Sent when a task (or a stored entry) goes to the dead-letter store.
#: ``sender`` is the Celery app; ``letter`` is the
#: :class:`~celery_zset_scheduler.deadletter.DeadLetter` just stored (with its ``reason``).
#: Sent by the process that dead-lettered it: a worker, or a dispatcher for poison entries.
task_dead_lettered = Signal(name="task_dead_lettered", providing_args={"letter"})

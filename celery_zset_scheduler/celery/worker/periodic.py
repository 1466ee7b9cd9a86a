"""The worker's side of the overlap policies: report that an occurrence has ended.

An entry with ``overlap`` ``skip`` or ``buffer_one`` waits for its last occurrence: pending or in
flight in the store (the leader sees that itself), then handed to the broker and running, which
only the worker knows. Occurrences of such entries carry the ``zset_overlap`` header; when one ends
(``task_postrun`` with SUCCESS or FAILURE, or ``task_revoked``, expiry included) the worker clears
the entry's mark with one small script on the entry's shard, which wakes the leader when an
occurrence is buffered behind it. A retry, an ``Ignore`` or a ``Reject`` is not an end (the task is
stored or queued again). A report that never comes (a lost message, a worker killed without
``acks_late``) holds the entry for at most ``zset_scheduler_periodic_overlap_timeout``.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import signals

from ...model import headers as names
from ...model.logs import log_event
from ...store.periodic import PeriodicStore
from ..core.state import installation_for

ENDED = ("SUCCESS", "FAILURE")


def _report(app: Any, request: Any, task_id: Any) -> None:
    get = getattr(request, "get", None)
    if get is None or not get(names.PERIODIC_OVERLAP):
        return
    name = get(names.PERIODIC)
    inst = installation_for(app) if app is not None else None
    if inst is None or not isinstance(name, str) or not task_id:
        return
    try:
        PeriodicStore(inst.store).done(name, str(task_id))
    except redis.RedisError as exc:  # the mark then expires by itself
        log_event(logging.WARNING, "periodic.end_not_reported", name=name, task_id=task_id, error=str(exc))


def on_postrun(sender: Any = None, task_id: Any = None, task: Any = None, state: Any = None, **_: Any) -> None:
    if state in ENDED and task is not None:
        _report(task.app, task.request, task_id)


def on_revoked(sender: Any = None, request: Any = None, **_: Any) -> None:
    if request is not None:
        _report(getattr(sender, "app", None), request, getattr(request, "id", None))


def connect() -> None:
    signals.task_postrun.connect(on_postrun, weak=False, dispatch_uid="celery_zset_scheduler.periodic.postrun")
    signals.task_revoked.connect(on_revoked, weak=False, dispatch_uid="celery_zset_scheduler.periodic.revoked")

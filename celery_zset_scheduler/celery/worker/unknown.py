"""Dead-lettering messages for task names the worker does not know (Celery discards them)."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import signals

from ...model.letters import DeadLetter
from ...model.logs import describe, log_event
from ..core.messages import received
from ..core.state import installation_for


def on_task_unknown(sender: Any = None, message: Any = None, exc: Any = None, name: Any = None,
                    id: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    inst = installation_for(app) if app is not None else None
    if inst is None or message is None:
        return
    try:
        if not inst.settings.dead_letters:
            return
        stored = received(message, id)
        now = int(time.time() * 1000)
        inst.dead_letters.add(DeadLetter.for_message(
            stored, "unknown_task", exc_type=type(exc).__name__ if exc else "NotRegistered",
            exc_message=str(exc or name), attempts=1, first_failure_ms=now, last_failure_ms=now,
            worker=str(getattr(sender, "hostname", "") or ""),
        ))
        log_event(logging.WARNING, "task.dead_lettered", task_id=stored.task_id, task=name, reason="unknown_task")
    except Exception as error:  # the worker must keep consuming whatever happens here
        log_event(logging.ERROR, "dead_letter.failed", task_id=id, error=describe(error))


def connect() -> None:
    signals.task_unknown.connect(on_task_unknown, weak=False, dispatch_uid="celery_zset_scheduler.unknown")

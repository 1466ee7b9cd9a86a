"""Dead-lettering on the worker side: a request that fails for good goes to the dead-letter store.

An installed worker gives every request it receives this behaviour (:mod:`.hooks`), whatever
the task's class: the request's class becomes a subclass of its own with :class:`DeadLettering`
in front, so the task class and the Request class a task names stay the user's. It runs in the
worker's main process with the message exactly as it was received, which is what a dead-letter
record keeps (the body byte for byte) so that a requeue publishes the same message.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any

from billiard.einfo import ExceptionWithTraceback
from celery.exceptions import Ignore, Reject, Retry, Terminated, WorkerLostError

from ...model.headers import FIRST_FAILURE
from ...model.letters import DeadLetter
from ...model.logs import describe, log_event
from ..core.messages import received
from ..core.state import ensure_installation

_NOT_FINAL = (Ignore, Retry, Terminated, WorkerLostError, SystemExit, KeyboardInterrupt)


class DeadLettering:
    """In front of a worker Request class: dead-letters a failure that will not run again."""

    __slots__ = ()  # the request's layout stays its class's, so its class can be swapped

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> Any:
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        reason = final_reason(self, exc)
        if reason is not None:
            try:
                dead_letter_request(self, exc, exc_info.traceback, reason)
            except Exception as error:  # never let the dead-letter store break the worker
                log_event(logging.ERROR, "dead_letter.failed", task_id=getattr(self, "id", None), error=describe(error))
        return super().on_failure(exc_info, send_failed_event=send_failed_event,  # type: ignore[misc]
                                  return_ok=return_ok)


_classes: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def with_dead_letters(cls: type) -> type:
    """``cls`` with :class:`DeadLettering` in front (one subclass per class, made once)."""
    if issubclass(cls, DeadLettering):
        return cls
    made = _classes.get(cls)
    if made is None:
        made = _classes[cls] = type(cls.__name__, (DeadLettering, cls), {"__slots__": (), "__module__": __name__})
    return made


def final_reason(request: Any, exc: BaseException) -> str | None:
    """Why this failure is final (``rejected``, ``retries_exhausted``, ``failed``), or None when
    the task will run again (a retry, a requeue) or did not fail (ignored, terminated, lost)."""
    if isinstance(exc, Reject):
        return None if exc.requeue else "rejected"
    if isinstance(exc, _NOT_FINAL):
        return None
    task = request.task
    retries = int(request.request_dict.get("retries") or 0)
    max_retries = task.max_retries
    policy_for = getattr(task, "retry_policy_for", None)  # ZSetTask's per-exception policies
    if policy_for is not None:
        matched, policy = policy_for(exc)
        if matched and policy is not None:
            max_retries = policy.max_retries
    return "retries_exhausted" if retries and max_retries is not None and retries >= max_retries else "failed"


def dead_letter_request(request: Any, exc: BaseException, traceback: str, reason: str) -> None:
    now = int(time.time() * 1000)
    headers = request.request_dict
    letter = DeadLetter.for_message(
        received(request.message, request.id), reason,
        exc_type=type(exc).__name__, exc_message=str(exc), traceback=traceback or "",
        args=list(request.args or ()), kwargs=dict(request.kwargs or {}),
        attempts=int(headers.get("retries") or 0) + 1,
        first_failure_ms=int(headers.get(FIRST_FAILURE) or now), last_failure_ms=now,
        worker=request.hostname or "",
    )
    ensure_installation(request.task.app).dead_letters.add(letter)
    log_event(logging.WARNING, "task.dead_lettered", task_id=request.id, task=request.task_name, reason=reason)

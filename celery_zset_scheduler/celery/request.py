"""The worker-side Request of ``ZSetTask``: dead-letters tasks that will not run again.

It runs in the worker's main process with the message exactly as it was received, which is what a
dead-letter record keeps (the body byte for byte) so that a requeue publishes the same message.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from billiard.einfo import ExceptionWithTraceback
from celery.exceptions import Ignore, Reject, Retry, Terminated, WorkerLostError
from celery.worker.request import Request

from ..model.headers import FIRST_FAILURE
from ..model.letters import DeadLetter
from ..model.logs import describe, log_event
from .messages import received
from .state import ensure_installation

_NOT_FINAL = (Ignore, Retry, Terminated, WorkerLostError, SystemExit, KeyboardInterrupt)


class DeadLetterRequest(Request):
    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> Any:
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        reason = self._dead_letter_reason(exc)
        if reason is not None:
            try:
                dead_letter_request(self, exc, exc_info.traceback, reason)
            except Exception as error:  # never let the dead-letter store break the worker
                log_event(logging.ERROR, "dead_letter.failed", task_id=self.id, error=describe(error))
        return super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)

    def _dead_letter_reason(self, exc: BaseException) -> str | None:
        if not getattr(self.task, "dead_letter", False):
            return None
        if isinstance(exc, Reject):
            return None if exc.requeue else "rejected"
        if isinstance(exc, _NOT_FINAL):
            return None
        retries = int(self._request_dict.get("retries") or 0)
        max_retries = self.task.max_retries
        matched, policy = self.task.retry_policy_for(exc)
        if matched and policy is not None:
            max_retries = policy.max_retries
        return "retries_exhausted" if retries and max_retries is not None and retries >= max_retries else "failed"


def dead_letter_request(request: Request, exc: BaseException, traceback: str, reason: str) -> None:
    now = int(time.time() * 1000)
    headers = request._request_dict
    letter = DeadLetter.for_message(
        received(request._message, request.id), reason,
        exc_type=type(exc).__name__, exc_message=str(exc), traceback=traceback or "",
        args=list(request.args or ()), kwargs=dict(request.kwargs or {}),
        attempts=int(headers.get("retries") or 0) + 1,
        first_failure_ms=int(headers.get(FIRST_FAILURE) or now), last_failure_ms=now,
        worker=request.hostname or "",
    )
    ensure_installation(request.task.app).dead_letters.add(letter)
    log_event(logging.WARNING, "task.dead_lettered", task_id=request.id, task=request.task_name, reason=reason)

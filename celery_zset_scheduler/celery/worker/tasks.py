"""Task base classes: retries that wait in the store, dead letters, idempotency keys.

``ZSetTask``: per-exception retry policies with capped exponential backoff (full jitter) on top
of Celery's own ``autoretry_for``/``retry_backoff``/``max_retries``. Storing retries and
dead-lettering are the installed app's, for every task class (:mod:`..producer.sender`, :mod:`.hooks`).

``IdempotentTask(ZSetTask)``: runs each idempotency key to completion at most once while its
record lives (I6), keeps one pending entry per key at schedule time, and gives the body a fencing
token for its key (``self.request.idempotency_token``).
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from celery import Task
from celery.exceptions import Ignore, Reject, Retry

from ...model import headers as names
from ...model.backoff import compute_backoff
from ...model.logs import log_event
from ...store.idempotency import IdempotencyKeys, LeaseKeeper
from ...store.schedule import ScheduleResult
from ..core.state import ensure_installation


@dataclass(frozen=True)
class RetryPolicy:
    """How to retry one kind of exception: delay ``min(backoff_max, backoff * 2**retries)``,
    drawn uniformly from ``[0, delay]`` when ``jitter``; at most ``max_retries`` retries."""

    max_retries: int | None = 3
    backoff: float = 1.0
    backoff_max: float = 600.0
    jitter: bool = True

    def __post_init__(self) -> None:
        retries = self.max_retries
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise ValueError(f"RetryPolicy: max_retries must be None (no limit) or an integer >= 0, got {retries!r}")
        for name in ("backoff", "backoff_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"RetryPolicy: {name} must be a number of seconds >= 0, got {value!r}")


class ZSetTask(Task):
    """Per-exception retry policies; retries wait in the store and final failures are
    dead-lettered as for every task of an installed app."""

    #: exception class -> RetryPolicy, or None for "never retry" (fails at once, dead-lettered).
    retry_policies: Mapping[type[BaseException], RetryPolicy | None] = {}
    #: whether a task that fails for good goes to the dead-letter store; None: the
    #: ``zset_scheduler_dead_letters`` setting (any task may set it, ``@app.task(dead_letter=False)``)
    dead_letter: bool | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.request.called_directly:  # a plain function call, not a worker execution
            return super().__call__(*args, **kwargs)
        return self.run_guarded(args, kwargs)

    def run_guarded(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return self.run(*args, **kwargs)
        except (Retry, Ignore, Reject):
            raise
        except Exception as exc:
            matched, policy = self.retry_policy_for(exc)
            if not matched or policy is None:
                raise
            countdown = compute_backoff(
                self.request.retries, base=policy.backoff, cap=policy.backoff_max, jitter=policy.jitter
            )
            raise self.retry(exc=exc, countdown=countdown, max_retries=policy.max_retries) from exc

    def retry_policy_for(self, exc: BaseException) -> tuple[bool, RetryPolicy | None]:
        """The policy of the most specific class ``exc`` is an instance of."""
        for cls in type(exc).__mro__:
            if cls in self.retry_policies:
                return True, self.retry_policies[cls]
        return False, None


class IdempotentTask(ZSetTask):
    """At most one completed execution per idempotency key while its record lives.

    ``idempotency_key``: None (the task id), a format string over the task's arguments
    (``"charge:{order_id}"``), or a callable taking the task's arguments.
    ``apply_async(idempotency_key=..., idempotency_replace=True)`` override it per call.
    """

    acks_late = True
    reject_on_worker_lost = True
    idempotency_key: str | Callable[..., str] | None = None
    #: keep a failed key failed (later deliveries do not run) instead of releasing it
    idempotency_keep_failed = False
    #: seconds; None: the zset_scheduler_idempotency_ttl / _lease settings
    idempotency_ttl: float | None = None
    idempotency_lease: float | None = None

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: Any = None, producer: Any = None,
                    link: Any = None, link_error: Any = None, shadow: Any = None, **options: Any) -> Any:
        key = options.pop("idempotency_key", None)
        replace = bool(options.pop("idempotency_replace", False))
        if key is None and self.idempotency_key is not None:
            key = self.key_for(tuple(args or ()), dict(kwargs or {}))
        if key is not None:
            options["headers"] = {**(options.get("headers") or {}), names.IDEMPOTENCY_KEY: str(key)}
            options[names.IDEMPOTENCY_KEY_OPTION] = str(key)
            if replace:
                options[names.REPLACE_OPTION] = True
        outcome: list[ScheduleResult] = []  # filled by the sender when the store took the call
        result = super().apply_async(args, kwargs, task_id, producer, link, link_error, shadow,
                                     **options, **{names.OUTCOME_OPTION: outcome})
        if outcome and outcome[0].status == "duplicate_key":
            existing = self.AsyncResult(outcome[0].task_id)
            existing.duplicate_of_pending = True  # this call scheduled nothing new
            return existing
        if result is not None:
            result.duplicate_of_pending = False
        return result

    def key_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        # Read unbound: a function given to @app.task(idempotency_key=...) becomes a class
        # attribute, which plain attribute access would turn into a method of the task.
        spec = inspect.getattr_static(self, "idempotency_key")
        if isinstance(spec, staticmethod):
            spec = spec.__func__
        if spec is None:
            return None
        if callable(spec):
            return str(spec(*args, **kwargs))
        bound = inspect.signature(self.run).bind_partial(*args, **kwargs)
        bound.apply_defaults()
        return str(spec.format_map(bound.arguments))

    def run_guarded(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        request = self.request
        key = getattr(request, names.IDEMPOTENCY_KEY, None) or self.key_for(args, kwargs) or request.id
        settings = ensure_installation(self.app).settings
        lease = self.idempotency_lease or settings.idempotency_lease
        ttl = self.idempotency_ttl or settings.idempotency_ttl
        keys: IdempotencyKeys = ensure_installation(self.app).idempotency
        # A nonce per execution: two deliveries of one message in one process are two owners.
        owner = f"{request.hostname}:{os.getpid()}:{request.id}:{secrets.token_hex(4)}"
        got = keys.acquire(key, owner, lease)
        if got.state == "done":
            log_event(logging.INFO, "idempotency.duplicate_skipped", key=key, task_id=request.id)
            return (got.outcome or {}).get("result")
        if got.state == "failed":
            log_event(logging.INFO, "idempotency.failed_key_skipped", key=key, task_id=request.id)
            raise Ignore()
        if got.state == "running":
            self._check_again_later(args, kwargs, got.retry_in, key, got.holder)
        # For the body: hand the token to what it writes to, which can refuse a lower one.
        request.idempotency_key = key
        request.idempotency_token = got.token
        with LeaseKeeper(keys, key, owner, lease):
            try:
                result = super().run_guarded(args, kwargs)
            except (Retry, Ignore):
                keys.release(key, owner)  # the retry (or nobody) runs it next
                raise
            except BaseException as exc:
                if self.idempotency_keep_failed:
                    keys.finish(key, owner, {"error": f"{type(exc).__name__}: {exc}"}, ttl, token=got.token,
                                failed=True)
                else:
                    keys.release(key, owner)
                raise
        finished = keys.finish(key, owner, {"result": result}, ttl, token=got.token)
        if finished != "held":
            self._report_lease_lost(keys, key, got.token, finished)
        return result

    def _report_lease_lost(self, keys: IdempotencyKeys, key: str, token: int, finished: str) -> None:
        """The body completed after its lease was lost: another delivery may have run it too (the
        exception to I6 that the fencing token is for). Loud: an error, and a counter in Redis."""
        try:
            total: int | None = keys.count_lease_lost()
        except Exception:  # the report must not turn a completed task into a failed one
            total = None
        log_event(logging.ERROR, "idempotency.completed_after_lease_lost", key=key, task_id=self.request.id,
                  token=token, recorded=finished == "lapsed", total=total)

    def _check_again_later(self, args: tuple[Any, ...], kwargs: dict[str, Any], seconds: float,
                           key: str, holder: str) -> None:
        """Another delivery runs this key now: look again once its lease could have expired,
        through the store (this does not count as a retry)."""
        countdown = max(1.0, min(seconds, 300.0))
        log_event(logging.INFO, "idempotency.running_elsewhere", key=key, holder=holder, again_in=countdown)
        signature = self.signature_from_request(self.request, args, kwargs, countdown=countdown)
        signature.apply_async()
        raise Ignore()


__all__ = ["IdempotentTask", "RetryPolicy", "ZSetTask"]

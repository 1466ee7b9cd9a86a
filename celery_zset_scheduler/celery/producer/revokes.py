"""Revokes of an installed app, whichever way Celery sends them (I10).

``AsyncResult.revoke()``, ``GroupResult.revoke()``, ``app.control.revoke()``, ``terminate`` and the
``celery control revoke|terminate`` CLI all end in ``Control.broadcast("revoke" | "terminate",
...)``, so that is where the installed control class intercepts them (:func:`revoke_for_command`):
before broadcasting, it cancels the ids pending in the store and records the others in Redis
(:mod:`...store.revokes`), so that no dispatcher publishes them and an installed worker drops them
when they arrive, whether or not it was running at the time (:mod:`..worker.revokes`).

An id that will never run now (it was pending or in flight) gets the result state ``REVOKED`` at
once, as a running Celery worker marks a task it was told to revoke, with the same rule: a result
that is ready, or a task another worker has started, is left alone. The state of an id that was
already handed to the broker is left to the worker that drops it (it marks it ``REVOKED`` then).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from celery import states
from celery.backends.base import DisabledBackend

from ...model.logs import log_event
from ...store.revokes import RevokeOutcome, Revokes
from ..core.state import installation_for

#: Broadcast commands that revoke ids (``terminate`` is ``revoke(terminate=True)`` on the worker).
REVOKING_COMMANDS = frozenset({"revoke", "terminate"})
#: States a revoke may overwrite, as Celery's worker has it: nothing ready, nothing started elsewhere.
_OVERWRITABLE = frozenset({states.PENDING, states.RECEIVED, states.RETRY, states.REJECTED})


def revokes_of(app: Any) -> Revokes | None:
    inst = installation_for(app)
    if inst is None:
        return None
    s = inst.settings
    return Revokes(inst.store, s.revoke_ttl, s.revoke_max)


def task_ids(value: Any) -> list[str]:
    """The ids of a revoke's ``task_id`` argument: one id, or a list of them (as Celery takes)."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)):
        value = [value]
    return [v.decode() if isinstance(v, bytes) else str(v) for v in value]


def revoke_for_command(app: Any, command: str, arguments: dict[str, Any] | None) -> RevokeOutcome | None:
    """Cancel and record the ids of a revoking broadcast before it is sent; None for other commands."""
    if command not in REVOKING_COMMANDS:
        return None
    return revoke_stored(app, task_ids((arguments or {}).get("task_id")))


def revoke_stored(app: Any, ids: Iterable[str]) -> RevokeOutcome | None:
    revokes = revokes_of(app)
    wanted = list(ids)
    if revokes is None or not wanted:
        return None
    inst = installation_for(app)
    assert inst is not None
    with inst.grants.writing(f"cannot revoke {len(wanted)} task(s)"):
        outcome = revokes.revoke(wanted)
    log_event(logging.INFO, "revoke.stored", count=len(wanted), ids=",".join(wanted[:10]),
              **_counts(outcome.status.values()))
    mark_revoked(app, outcome.stopped)
    return outcome


def mark_revoked(app: Any, ids: Iterable[str]) -> None:
    """Give ids that will never run the result state ``REVOKED``, with Celery's worker's rule.
    A backend error is logged, as Celery's worker does: the revoke itself has been made."""
    backend = app.backend
    if isinstance(backend, DisabledBackend):
        return
    for task_id in ids:
        try:
            if backend.get_state(task_id) in _OVERWRITABLE:
                backend.mark_as_revoked(task_id, reason="revoked", store_result=True)
        except Exception as exc:
            log_event(logging.WARNING, "revoke.mark_failed", id=task_id, error=repr(exc))


def _counts(statuses: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts

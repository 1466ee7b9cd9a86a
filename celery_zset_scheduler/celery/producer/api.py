"""Python API over an installed app's store: look up, cancel and reschedule stored tasks."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from ...errors import PoisonMessage
from ...model.codec import StoredMessage, decode
from ...model.times import countdown_ms, eta_ms
from ...store.entries import CancelStatus, StoredEntry
from ..core.state import ensure_installation

if TYPE_CHECKING:
    from celery import Celery


def due_ms(*, eta: datetime | str | None = None, countdown: float | None = None) -> int:
    """Epoch milliseconds from an ``eta`` (naive: UTC, as Celery reads it) or a ``countdown``."""
    if (eta is None) == (countdown is None):
        raise ValueError("give exactly one of eta= or countdown=")
    if countdown is not None:
        return countdown_ms(float(countdown))
    assert eta is not None
    return eta_ms(eta)


def lookup(app: Celery, task_id: str) -> tuple[StoredEntry, StoredMessage | None] | None:
    """The stored entry of ``task_id`` and its decoded message (None when it cannot be decoded)."""
    entry = ensure_installation(app).store.get(task_id)
    if entry is None:
        return None
    try:
        message = decode(task_id, entry.payload) if entry.payload else None
    except PoisonMessage:
        message = None
    return entry, message


def cancel(app: Celery, *task_ids: str) -> dict[str, CancelStatus]:
    """Cancel stored tasks without broadcasting; ``{id: cancelled|inflight|unknown}``."""
    inst = ensure_installation(app)
    with inst.grants.writing(f"cannot cancel {len(task_ids)} task(s)"):
        return dict(inst.store.cancel(task_ids))


def reschedule(app: Celery, task_id: str, *, eta: datetime | str | None = None,
               countdown: float | None = None) -> bool:
    """Move a pending task to a new time; False when it is not pending (ran, cancelled, unknown)."""
    inst = ensure_installation(app)
    with inst.grants.writing(f"cannot reschedule task {task_id!r}"):
        return inst.store.reschedule(task_id, due_ms(eta=eta, countdown=countdown))

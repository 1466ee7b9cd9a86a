"""Python API over an installed app's store: look up, cancel and reschedule stored tasks."""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any

from ..codec import StoredMessage, decode
from ..errors import PoisonMessage
from ..store import StoredEntry
from .installation import ensure_installation
from .sender import eta_to_ms


def due_ms(app: Any, *, eta: datetime | str | None = None, countdown: float | None = None) -> int:
    """Epoch milliseconds from an ``eta`` (naive: as Celery reads it) or a ``countdown``."""
    if (eta is None) == (countdown is None):
        raise ValueError("give exactly one of eta= or countdown=")
    if countdown is not None:
        return math.ceil((time.time() + float(countdown)) * 1000)
    assert eta is not None
    return eta_to_ms(app, eta)


def lookup(app: Any, task_id: str) -> tuple[StoredEntry, StoredMessage | None] | None:
    """The stored entry of ``task_id`` and its decoded message (None when it cannot be decoded)."""
    entry = ensure_installation(app).store.get(task_id)
    if entry is None:
        return None
    try:
        message = decode(task_id, entry.payload) if entry.payload else None
    except PoisonMessage:
        message = None
    return entry, message


def cancel(app: Any, *task_ids: str) -> dict[str, str]:
    """Cancel stored tasks without broadcasting; ``{id: cancelled|inflight|unknown}``."""
    return dict(ensure_installation(app).store.cancel(task_ids))


def reschedule(app: Any, task_id: str, *, eta: datetime | str | None = None,
               countdown: float | None = None) -> bool:
    """Move a pending task to a new time; False when it is not pending (ran, cancelled, unknown)."""
    return ensure_installation(app).store.reschedule(task_id, due_ms(app, eta=eta, countdown=countdown))

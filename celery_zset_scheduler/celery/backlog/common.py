"""What every broker's import shares: deciding on a message, and importing it into the store."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...model.codec import StoredMessage, encode
from ...model.times import eta_ms
from ...store.imports import Importing, import_entries
from ...store.pending import Store
from ...store.snapshot import redis_now_ms

#: Headers a broker adds on delivery or dead-lettering: not part of the message as it was sent.
BROKER_HEADERS = ("x-delivery-count", "x-death", "x-first-death-exchange", "x-first-death-queue",
                  "x-first-death-reason", "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason")


@dataclass
class Summary:
    """What one place of the broker (a queue, an ``unacked`` hash) held, and what became of it."""

    source: str
    seen: int = 0
    imported: int = 0  # moved into the store (a dry run: would be)
    already: int = 0  # imported by an earlier run, or already pending: removed from the broker
    kept: int = 0  # no ETA in the future (or not a task message the store can take): left or put back
    unreadable: int = 0  # not a Kombu/Celery message: left as it was

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Importer:
    """Decides on each message by the store's clock (Redis time) and imports the future ones."""

    def __init__(self, app: Any, store: Store, *, dry_run: bool, progress: Callable[[int], None]) -> None:
        self.app = app
        self.store = store
        self.dry_run = dry_run
        self.progress = progress
        self._offset_ms = redis_now_ms(store) - time.time() * 1000  # one clock: the store's (I5)

    def now_ms(self) -> float:
        return time.time() * 1000 + self._offset_ms

    def due_ms(self, message: StoredMessage) -> int | None:
        """The message's due time when it is a protocol 2 task with an ETA in the future."""
        eta = message.headers.get("eta")
        if not isinstance(message.headers.get("task"), str) or not eta:
            return None
        try:
            due = eta_ms(eta)
        except (TypeError, ValueError):
            return None
        return due if due > self.now_ms() else None

    def take(self, message: StoredMessage, due_ms: int, summary: Summary) -> None:
        """Import one message (the caller removes it from the broker afterwards)."""
        if self.dry_run:
            summary.imported += 1
            return
        (status,) = import_entries(self.store, [Importing(message.task_id, due_ms, encode(message))])
        if status == "imported":
            summary.imported += 1
        else:
            summary.already += 1


def clean_headers(headers: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in headers.items() if k not in BROKER_HEADERS}

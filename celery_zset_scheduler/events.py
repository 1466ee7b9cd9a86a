"""Structured log lines and the observer interface the dispatcher reports to (metrics hook in here)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

logger = logging.getLogger("celery_zset_scheduler")


def log_event(level: int, event: str, **fields: Any) -> None:
    """``event key=value ...`` for people, and the same fields in ``extra`` for JSON formatters."""
    text = " ".join(f"{k}={v}" for k, v in fields.items())
    logger.log(level, "zset %s %s", event, text, extra={"zset_event": event, "zset_fields": fields})


class Observer:
    """What a dispatcher reports. The base class does nothing; metrics subclass it."""

    def claimed(self, shard: int, count: int, seconds: float) -> None:
        """A claim call on ``shard`` took ``seconds`` and moved ``count`` entries in flight."""

    def published(self, per_shard: Mapping[int, int], lateness_ms: Sequence[int], seconds: float) -> None:
        """Entries were handed to the broker (``per_shard`` counts), each ``lateness_ms`` late."""

    def leadership(self, shard: int, acquired: bool) -> None:
        """This dispatcher became (or stopped being) the leader of ``shard``."""

    def reaped(self, shard: int, count: int) -> None:
        """Expired in-flight entries went back to ``due``."""

    def dead_lettered(self, reason: str, count: int) -> None:
        """Entries went to the dead-letter store."""

    def state(self, shard: int, pending: int, inflight: int, oldest_due_ms: int | None, now_ms: int) -> None:
        """A periodic snapshot of an owned shard."""

    def outage(self, what: str, error: BaseException) -> None:
        """Redis or the broker could not be reached."""

"""Structured log lines: ``zset <event> key=value ...`` for people, and the same fields in
``extra`` (``zset_event``, ``zset_fields``) for JSON formatters."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("celery_zset_scheduler")


def log_event(level: int, event: str, **fields: Any) -> None:
    text = " ".join(f"{k}={v}" for k, v in fields.items())
    logger.log(level, "zset %s %s", event, text, extra={"zset_event": event, "zset_fields": fields})

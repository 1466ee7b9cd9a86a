"""Structured log lines: ``zset <event> key=value ...`` for people, and the same fields in
``extra`` (``zset_event``, ``zset_fields``) for JSON formatters."""

from __future__ import annotations

import logging
import re
from typing import Any

from .urls import mask_url

logger = logging.getLogger("celery_zset_scheduler")

# Anything that looks like a URL in an error's text: it is shown masked.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


def log_event(level: int, event: str, **fields: Any) -> None:
    text = " ".join(f"{k}={v}" for k, v in fields.items())
    logger.log(level, "zset %s %s", event, text, extra={"zset_event": event, "zset_fields": fields})


def describe(exc: BaseException) -> str:
    """What went wrong, for a log line: ``Type: message`` on one line, any URL in it masked.

    Not ``repr()``: redis-py's is only ``network:ConnectionError``, without the host or the reason.
    """
    text = " ".join(str(exc).split())
    text = _URL_IN_TEXT.sub(lambda m: mask_url(m.group()), text)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name

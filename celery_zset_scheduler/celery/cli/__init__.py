"""``celery -A proj zset ...``: registered under the ``celery.commands`` entry point group."""

from __future__ import annotations

from .group import zset
from .run import run

zset.add_command(run)

__all__ = ["zset"]

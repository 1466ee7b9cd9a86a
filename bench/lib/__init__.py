"""The benchmark: scheduling rates, bytes per pending task, dispatch rate and lateness,
each next to plain Celery's figure. ``python -m bench`` (and ``celery zset bench``) run it."""

from __future__ import annotations

from .report import Figure, Report, format_report
from .runner import Options, run_benchmark

__all__ = ["Figure", "Options", "Report", "format_report", "run_benchmark"]

"""Plain views of periodic entries for the front ends (the CLI's tables and JSON, an admin page)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..model.periodic import PeriodicEntry, PeriodicState
from ..model.times import iso


def status_of(entry: PeriodicEntry, state: PeriodicState) -> str:
    """``paused``, ``disabled``, ``finished`` (no next run: one-off done, past its end) or ``enabled``."""
    if not entry.enabled:
        return "disabled"
    if entry.paused:
        return "paused"
    if state.next_run_ms is None and state.buffered_ms is None:
        return "finished"
    return "enabled"


def _seconds(value: float) -> str:
    if value == int(value):
        value = int(value)
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if value >= size and value % size == 0:
                return f"{value // size}{unit}"
    return f"{value:g}s"


def describe(spec: dict[str, Any]) -> str:
    """One line for people: ``every 30s``, ``cron 0 9 * * 1-5 Europe/Berlin``, ``sunrise at 52.5,13.4``,
    ``once at 2024-05-01T12:00:00+00:00``. Crontab fields in cron's order (m h dom mon dow)."""
    kind = spec.get("type")
    if kind == "interval":
        return f"every {_seconds(float(spec['every']))}" + (" (relative)" if spec.get("relative") else "")
    if kind == "crontab":
        fields = " ".join(str(spec[k]) for k in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week"))
        return f"cron {fields}" + (f" {spec['timezone']}" if spec.get("timezone") else "")
    if kind == "solar":
        return f"{spec['event']} at {spec['latitude']:g},{spec['longitude']:g}"
    if kind == "clocked":
        return f"once at {spec['at']}"
    return str(spec)


def entry_view(entry: PeriodicEntry, state: PeriodicState, shard: int, from_config: bool) -> dict[str, Any]:
    """The JSON of an entry: every field of its definition, its state, and where it lives."""
    view: dict[str, Any] = asdict(entry)
    view["schedule_text"] = describe(entry.schedule)
    view["status"] = status_of(entry, state)
    view["source"] = "beat_schedule" if from_config else "runtime"
    view["shard"] = shard
    for key in ("next_run", "last_run", "buffered"):
        ms = getattr(state, f"{key}_ms")
        view[f"{key}_ms"] = ms
        view[f"{key}_at"] = iso(ms)
    view["total_run_count"] = state.total_run_count
    view["last_task_id"] = state.last_task_id
    return view

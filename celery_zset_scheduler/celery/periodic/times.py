"""Fire times the runtime API needs: an entry's first next run, and the occurrences of a backfill."""

from __future__ import annotations

from ...errors import ConfigurationError
from ...model.periodic import PeriodicEntry, PeriodicState, iso_to_ms, within_bounds
from ...model.periodic_checks import normalize_schedule
from .fire_times import bounded_next, first_run_ms, occurrences

#: Most occurrences one backfill stores (a longer range is backfilled a part at a time).
MAX_BACKFILL = 10_000


def initial_next(entry: PeriodicEntry, state: PeriodicState, now_ms: int, app_timezone: str) -> int | None:
    """The next run of an entry being written for the first time, from its history when it has one.

    With a ``last_run_ms`` (an imported entry) it is the fire time after that run, possibly in the
    past: the leader then catches it up by the entry's policy, as Celery beat runs an overdue entry
    once when it starts. Without, the first fire time after now (:func:`~.fire_times.first_run_ms`).
    """
    if not entry.enabled or (entry.one_off and state.total_run_count >= 1):
        return None
    if state.next_run_ms is not None:
        return state.next_run_ms
    last = state.last_run_ms
    start = iso_to_ms(entry.start_time) if entry.start_time is not None else None
    if last is not None and (start is None or start <= last):
        return bounded_next(entry, last, app_timezone)
    return first_run_ms(entry, now_ms, app_timezone)


def backfill_times(entry: PeriodicEntry, state: PeriodicState, start_ms: int, end_ms: int,
                   app_timezone: str) -> list[int]:
    """The entry's fire times in ``[start_ms, end_ms]`` within its bounds, ascending; an interval
    keeps the phase of its chain (anchored on its next or last run)."""
    spec = normalize_schedule(entry.schedule, entry.name)
    if spec["type"] == "interval" and not spec["relative"]:
        every = max(1, round(spec["every"] * 1000))
        anchor = state.next_run_ms or state.last_run_ms
        if anchor is None:
            anchor = iso_to_ms(entry.start_time) if entry.start_time is not None else start_ms
        first = anchor + -(-(start_ms - anchor) // every) * every
        count = (end_ms - first) // every + 1 if first <= end_ms else 0
        if count > MAX_BACKFILL:
            raise _too_many()
        times = [first + k * every for k in range(count)]
    else:
        times = occurrences(spec, start_ms - 1, end_ms, app_timezone, limit=MAX_BACKFILL + 1)
        if len(times) > MAX_BACKFILL:
            raise _too_many()
    return [t for t in times if within_bounds(entry, t)]


def _too_many() -> ConfigurationError:
    return ConfigurationError(f"backfill: more than {MAX_BACKFILL:,} occurrences in that range; "
                              "backfill it a part at a time")

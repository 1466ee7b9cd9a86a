"""The planner of periodic entries: the Celery side of the dispatcher's periodic seam.

:class:`~..dispatch.periodic.PeriodicStep` reads the due entries and writes what this planner
answers; the planner computes the due fire times with Celery's schedule classes in the app's time
zone (:mod:`.schedules`, DST-correct) and decides with the model's rules (:mod:`...model.firing`).

Hot path: 100,000 entries firing in the same minute. The leader reads each due entry's *plan*
(the fields that decide when it fires, stored apart from the rest of its definition), which is
the same bytes for every entry sharing a schedule and policies: it is parsed once (without
validating it again: it was validated when written) and kept by its bytes. The next fire time of a
schedule after a given fire time is the same for every entry sharing both, so it is computed once.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ...dispatch.periodic import Planned
from ...errors import ZSetSchedulerError
from ...model.firing import decide
from ...model.logs import log_event
from ...model.periodic import PeriodicEntry, PeriodicEntryError, PeriodicState, iso_to_ms
from ...model.periodic_json import ENTRY_FORMAT_VERSION, STATE_FORMAT_VERSION, state_to_json
from ...settings import Settings
from ...store.periodic import DueEntry, Firing, Occurrence
from .fire_times import bounded_next, due_times
from .schedules import zone_name

#: An entry that cannot be read is looked at again this much later (and logged each time).
RETRY_UNREADABLE_MS = 60_000
_CACHE = 20_000


class _LRU(OrderedDict[Any, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> Any:
        self[key] = value
        if len(self) > self.size:
            self.popitem(last=False)
        return value


def parse_plan(plan: bytes) -> PeriodicEntry:
    """A stored plan (``split_entry``'s, so valid) as an entry without name and task, not validated
    again; the planner names it per due entry."""
    try:
        obj = json.loads(plan)
        if obj.pop("v", None) != ENTRY_FORMAT_VERSION:
            raise PeriodicEntryError("unsupported entry format version")
        return PeriodicEntry(name="", task="", **obj)
    except (ValueError, TypeError, AttributeError) as exc:
        raise PeriodicEntryError(f"unreadable stored plan: {exc}") from None


def parse_state(raw: bytes) -> PeriodicState:
    """A stored state (written by ``state_to_json``) without validating it again."""
    try:
        obj = json.loads(raw)
        if obj.pop("v", None) != STATE_FORMAT_VERSION:
            raise PeriodicEntryError("unsupported state format version")
        return PeriodicState(**obj)
    except (ValueError, TypeError, AttributeError) as exc:
        raise PeriodicEntryError(f"unreadable stored state: {exc}") from None


class CeleryPlanner:
    """Plans due entries for one app. ``prepare`` (the ``beat_schedule`` sync) runs before the
    first look; it returns False to be called again (another dispatcher is syncing)."""

    def __init__(self, app: Any, settings: Settings, prepare: Callable[[], bool] | None = None) -> None:
        self.app_timezone = zone_name(app.timezone)
        # On time: late by at most this (a leader change); older occurrences were missed.
        self.grace_ms = int(2 * settings.lock_timeout * 1000)
        self.overlap_timeout_ms = int(settings.periodic_overlap_timeout * 1000)
        deadline = app.conf.beat_cron_starting_deadline
        self.cron_window: float | None = float(deadline) if deadline else None
        self._prepare = prepare
        self._entries: _LRU = _LRU(_CACHE)
        self._next: _LRU = _LRU(_CACHE)

    def prepare(self) -> bool:
        return True if self._prepare is None else self._prepare()

    def plan(self, entries: Sequence[DueEntry], now_ms: int) -> list[Planned]:
        out = []
        for due in entries:
            try:
                out.append(self._plan(due, now_ms))
            except (ZSetSchedulerError, ValueError, TypeError, KeyError) as exc:
                # Never the loop's problem: keep the entry as it is and look again later.
                log_event(logging.ERROR, "periodic.unplannable", name=due.name, error=str(exc))
                out.append(Planned(Firing(due.name, due.state, due.mark, due.state, now_ms + RETRY_UNREADABLE_MS)))
        return out

    def _plan(self, due: DueEntry, now_ms: int) -> Planned:
        entry, key, start, end = self._plan_of(due.plan)
        state = parse_state(due.state)
        times, following = self._due(entry, key, start, end, state, now_ms)
        window = entry.catchup_window
        if window is None and entry.schedule.get("type") == "crontab":
            window = self.cron_window  # Celery beat's beat_cron_starting_deadline
        decision = decide(entry, state, times, following, now_ms, grace_ms=self.grace_ms, window=window,
                          outstanding_until=due.outstanding_until, overlap_timeout_ms=self.overlap_timeout_ms,
                          name=due.name)
        if decision.dropped:
            log_event(logging.INFO if len(times) > 1 else logging.DEBUG, "periodic.not_fired", name=due.name,
                      due=len(times), fired=len(decision.fires), catchup=entry.catchup, overlap=entry.overlap)
        expires: dict[str, int] = {}
        if entry.expire_seconds is not None:
            # From when it is handed over, as Celery beat's apply_async(expires=seconds) counts from
            # sending: a caught-up occurrence must not arrive expired.
            expires = {f.task_id: max(f.due_ms, now_ms) + int(entry.expire_seconds * 1000) for f in decision.fires}
        occurrences = [Occurrence(f.task_id, f.due_ms) for f in decision.fires]
        firing = Firing(due.name, due.state, due.mark, state_to_json(decision.state, defaults=False).encode(),
                        decision.look_ms, occurrences, decision.mark)
        return Planned(firing, expires)

    def _plan_of(self, plan: bytes) -> tuple[PeriodicEntry, Any, int | None, int | None]:
        """The plan as an entry, the key of its schedule and bounds, and its start and end (ms)."""
        found = self._entries.get(plan)
        if found is None:
            entry = parse_plan(plan)
            key = (tuple(sorted(entry.schedule.items())), entry.start_time, entry.end_time, entry.expires)
            start = iso_to_ms(entry.start_time) if entry.start_time is not None else None
            end = min(iso_to_ms(entry.end_time) if entry.end_time is not None else 2**62,
                      iso_to_ms(entry.expires) - 1 if entry.expires is not None else 2**62)
            found = self._entries.put(plan, (entry, key, start, None if end == 2**62 else end))
        return found  # type: ignore[no-any-return]

    def _due(self, entry: PeriodicEntry, key: Any, start: int | None, end: int | None, state: PeriodicState,
             now_ms: int) -> tuple[list[int], int | None]:
        first = state.next_run_ms
        if first is not None and first <= now_ms:
            # The usual case: only `first` is due. Its follower is the same for every entry with
            # this schedule and bounds, so it is computed once.
            following = self._next.get((key, first), -1)
            if following == -1:
                following = self._next.put((key, first), bounded_next(entry, first, self.app_timezone))
            if following is None or following > now_ms:
                inside = (start is None or first >= start) and (end is None or first <= end)
                return ([first] if inside else []), following
        return due_times(entry, state, now_ms, self.app_timezone)

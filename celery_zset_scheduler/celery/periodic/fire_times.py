"""The fire times of a periodic entry: the next one, the occurrences in a range, catching up.

Instants are int ms (UTC). Interval, solar and clocked fire times are computed here; crontab ones
in :mod:`.cron`.

Interval ``{"type": "interval", "every": s, "relative": b}``
    ``next_fire_ms(spec, after)`` is ``after + every``: *after* is the previous **scheduled** fire
    time (not when it was dispatched), so lateness never accumulates and every host derives the same
    chain ``anchor + k * every``. Celery beat anchors on the dispatch time instead and drifts by the
    dispatch latency each run. ``relative`` is Celery's: the deadline is rounded down to the
    interval's resolution (minute, hour, day) in the app's time zone, computed by Celery's own
    :func:`celery.utils.time.remaining`, which handles DST correctly since Celery 5.5.

Solar
    Celery's ``solar`` (PyEphem): instants in UTC, so DST plays no part. Without ``ephem`` installed
    a :class:`~celery_zset_scheduler.errors.ConfigurationError` says to ``pip install ephem``.

Clocked ``{"type": "clocked", "at": iso}``
    One fire time; none once it is past.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta, timezone
from typing import Any

from celery.utils.time import remaining

from ...errors import ConfigurationError
from ...model.firing import decide
from ...model.periodic import MAX_CATCHUP, PeriodicEntry, PeriodicState, disabled_state, iso_to_ms, within_bounds
from ...model.periodic_checks import normalize_schedule
from .cron import HOUR_MS, cron_between, cron_next, cron_of, dt_ms, ms_dt, zone_info
from .schedules import solar_schedule

Spec = dict[str, Any]


# -- next_fire_ms / occurrences ---------------------------------------------------------------------

def _every_ms(spec: Spec) -> int:
    every: float = spec["every"]
    return max(1, round(every * 1000))


def _relative_next(spec: Spec, after_ms: int, app_timezone: str) -> int:
    start = ms_dt(after_ms, zone_info(app_timezone, "app timezone"))
    left = remaining(start, timedelta(seconds=spec["every"]), now=start, relative=True)
    fire = after_ms + left // timedelta(milliseconds=1)
    # Celery promises "never at or before start"; hold it to that rather than loop.
    return fire if fire > after_ms else after_ms + _every_ms(spec)


def _solar_next(spec: Spec, after_ms: int) -> int:
    after = ms_dt(after_ms, timezone.utc)
    event = solar_schedule(spec, nowfun=lambda: after)
    event.tz = timezone.utc  # not the current app's zone: Celery reads it even for aware datetimes
    start = after
    for _ in range(3):
        instant = after + event.remaining_estimate(start)
        fire = dt_ms(instant)
        if instant > ms_dt(fire, timezone.utc):
            fire += 1  # ephem's float days: round up, never at or before what it follows
        if fire > after_ms:
            return fire
        start += timedelta(minutes=1)
    raise ConfigurationError(f"solar schedule {spec!r}: ephem returned no event after {after.isoformat()}")


def next_fire_ms(spec: Spec, after_ms: int, app_timezone: str) -> int | None:
    """The first fire time strictly after ``after_ms``, or ``None`` when there is none.

    For an interval, ``after_ms`` is the previous fire time (the chain's anchor), see the module docs.
    """
    spec = normalize_schedule(spec)
    kind = spec["type"]
    if kind == "interval":
        return _relative_next(spec, after_ms, app_timezone) if spec["relative"] else after_ms + _every_ms(spec)
    if kind == "crontab":
        return cron_next(cron_of(spec, app_timezone), after_ms)
    if kind == "solar":
        return _solar_next(spec, after_ms)
    at = iso_to_ms(spec["at"])
    return at if at > after_ms else None


def occurrences(spec: Spec, after_ms: int, until_ms: int, app_timezone: str, limit: int = MAX_CATCHUP) -> list[int]:
    """The first ``limit`` fire times ``t`` with ``after_ms < t <= until_ms``, ascending.

    An interval's chain is anchored on ``after_ms`` (``after + every``, ``after + 2 * every``...).
    """
    spec = normalize_schedule(spec)
    if limit <= 0 or until_ms <= after_ms:
        return []
    if spec["type"] == "crontab":
        return cron_between(cron_of(spec, app_timezone), after_ms, until_ms, limit)
    if spec["type"] == "interval" and not spec["relative"]:
        every = _every_ms(spec)
        count = min(limit, (until_ms - after_ms) // every)
        return [after_ms + k * every for k in range(1, count + 1)]
    out: list[int] = []
    point: int | None = after_ms
    while len(out) < limit:
        assert point is not None
        point = next_fire_ms(spec, point, app_timezone)
        if point is None or point > until_ms:
            break
        out.append(point)
    return out


def latest_occurrences(spec: Spec, after_ms: int, until_ms: int, app_timezone: str,
                       count: int = MAX_CATCHUP) -> list[int]:
    """The last ``count`` fire times in ``(after_ms, until_ms]``, ascending (catch-up wants the newest).

    Looks back from ``until_ms`` over a span that doubles until it holds ``count`` of them, so a
    frequent schedule after a long gap costs about ``count`` fire times, not the whole gap. An
    interval's chain here starts at ``after_ms`` like in :func:`occurrences`.
    """
    spec = normalize_schedule(spec)
    if count <= 0 or until_ms <= after_ms:
        return []
    if spec["type"] == "interval" and not spec["relative"]:
        every = _every_ms(spec)
        last_k = (until_ms - after_ms) // every
        return [after_ms + k * every for k in range(max(1, last_k - count + 1), last_k + 1)]
    span = HOUR_MS
    while True:
        low = max(after_ms, until_ms - span)
        found = occurrences(spec, low, until_ms, app_timezone, limit=10**9)
        if len(found) >= count or low == after_ms:
            return found[-count:]
        span *= 2


# -- an entry's runs --------------------------------------------------------------------------------

def _upper_bound(entry: PeriodicEntry, until_ms: int) -> int:
    if entry.end_time is not None:
        until_ms = min(until_ms, iso_to_ms(entry.end_time))
    if entry.expires is not None:
        until_ms = min(until_ms, iso_to_ms(entry.expires) - 1)
    return until_ms


def _bounded(entry: PeriodicEntry, fire_ms: int | None) -> int | None:
    return fire_ms if fire_ms is not None and within_bounds(entry, fire_ms) else None


def first_run_ms(entry: PeriodicEntry, now_ms: int, app_timezone: str) -> int | None:
    """The first fire time of an entry created or enabled at ``now_ms`` (``None``: it never fires).

    The first fire time strictly after ``max(now, start_time)``; an interval without ``relative``
    that has a future ``start_time`` fires at ``start_time`` itself and then every ``every`` from it
    (django-celery-beat's rule); otherwise an interval first fires one ``every`` after ``now``.
    """
    if not entry.enabled:
        return None
    spec = normalize_schedule(entry.schedule, entry.name)
    start = iso_to_ms(entry.start_time) if entry.start_time is not None else None
    if start is not None and start > now_ms:
        if spec["type"] == "interval" and not spec["relative"]:
            return _bounded(entry, start)
        return _bounded(entry, next_fire_ms(spec, start - 1, app_timezone))
    return _bounded(entry, next_fire_ms(spec, now_ms, app_timezone))


def following_run_ms(entry: PeriodicEntry, fire_ms: int, app_timezone: str) -> int | None:
    """The fire time after the occurrence at ``fire_ms`` (``None`` for a one-off or past the end)."""
    if entry.one_off:
        return None
    return _bounded(entry, next_fire_ms(entry.schedule, fire_ms, app_timezone))


@dataclass(frozen=True)
class CatchUp:
    """What :func:`catch_up` decided: the fire times to publish now, and the state after them."""

    fire: list[int]
    state: PeriodicState


def catch_up(entry: PeriodicEntry, state: PeriodicState, now_ms: int, app_timezone: str, *,
             grace_ms: int = 0, window: float | None = None) -> CatchUp:
    """What a leader does with an entry whose ``next_run_ms`` is behind ``now_ms``: the fire times to
    store and the state after them (:func:`due_times` and :func:`~..model.firing.decide`, the
    leader's own path; overlap is not considered here: nothing is running).

    Every fire time from ``state.next_run_ms`` to ``now_ms`` is due; those at most ``grace_ms``
    old are on time, the others missed and follow the entry's catch-up policy within ``window``
    (default: the entry's). ``next_run_ms`` becomes the first fire time after ``now_ms`` (an
    interval keeps its phase). Disabled: nothing, ``next_run_ms`` cleared. Paused: nothing, state
    unchanged (frozen). No ``next_run_ms`` yet: :func:`first_run_ms`.
    """
    if not entry.enabled:
        return CatchUp([], disabled_state(state))
    if entry.paused:
        return CatchUp([], state)
    if state.next_run_ms is None:
        return CatchUp([], replace(state, next_run_ms=first_run_ms(entry, now_ms, app_timezone)))
    due, following = due_times(entry, state, now_ms, app_timezone)
    decision = decide(entry, state, due, following, now_ms, grace_ms=grace_ms,
                      window=entry.catchup_window if window is None else window, outstanding_until=None,
                      overlap_timeout_ms=0)
    return CatchUp([f.fire_ms for f in decision.fires], decision.state)


def bounded_next(entry: PeriodicEntry, after_ms: int, app_timezone: str) -> int | None:
    """The entry's first fire time after ``after_ms`` within its bounds (one-offs included)."""
    return _bounded(entry, next_fire_ms(entry.schedule, after_ms, app_timezone))


def due_times(entry: PeriodicEntry, state: PeriodicState, now_ms: int,
              app_timezone: str) -> tuple[list[int], int | None]:
    """The fire times due from ``state.next_run_ms`` up to ``now_ms`` (ascending, the newest
    :data:`MAX_CATCHUP`, within the entry's bounds) and the first fire time after ``now_ms``.

    What a leader hands to :func:`~celery_zset_scheduler.model.firing.decide`: the same arithmetic
    as :func:`catch_up` (an interval keeps its phase, anchored on ``next_run_ms``), without the
    policy. No ``next_run_ms``: nothing due, and the entry's first run after now.
    """
    first = state.next_run_ms
    if first is None:
        return [], first_run_ms(entry, now_ms, app_timezone)
    if first > now_ms:
        return [], first
    spec = normalize_schedule(entry.schedule, entry.name)
    low = first if entry.start_time is None else max(first, iso_to_ms(entry.start_time))
    high = _upper_bound(entry, now_ms)
    if spec["type"] == "interval" and not spec["relative"]:
        every = _every_ms(spec)
        k_low = max(0, -(-(low - first) // every))
        k_high = (high - first) // every if high >= first else -1
        due = [first + k * every for k in range(max(k_low, k_high - MAX_CATCHUP + 1), k_high + 1)]
        following: int | None = first + ((now_ms - first) // every + 1) * every
    else:
        due = latest_occurrences(spec, low - 1, high, app_timezone, MAX_CATCHUP) if high >= low else []
        if spec["type"] == "interval":  # relative: continue from the chain's last point, not from now
            last = latest_occurrences(spec, first, now_ms, app_timezone, 1)
            following = next_fire_ms(spec, (last or [first])[-1], app_timezone)
        else:
            following = next_fire_ms(spec, now_ms, app_timezone)
    return due, _bounded(entry, following)

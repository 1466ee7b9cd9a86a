"""What the leader of a shard does with a due periodic entry: the pure rules of I11.

The schedule arithmetic (which fire times are due, which one follows) is Celery's and is done by
the planner in the Celery layer; this module gets its answer and decides, the same way on every
host, which occurrences to store now, what the entry's state becomes and when the leader looks at
it again. The leader then writes all of it in one fenced script (``periodic_fire``).

On time or missed
    A due fire time at most ``grace_ms`` old is *on time*: it always fires, whatever the catch-up
    policy, so a leader change (late by at most a lock timeout) never costs an occurrence. An older
    one was *missed* (no dispatcher ran, or the entry was paused) and follows the entry's catch-up
    policy within its window: ``skip`` fires none, ``once`` the latest (only when nothing is on
    time: the on-time one already is the latest), ``all`` each of them (the newest
    :data:`~.periodic.MAX_CATCHUP`). Nothing older than the window fires.

Overlap
    ``allow`` fires everything chosen. ``skip`` and ``buffer_one`` wait for the entry's last stored
    occurrence (``outstanding_until`` is not ``None`` while it is pending in the store, or handed
    over and not reported finished by the worker, at most ``overlap_timeout`` after it was stored):
    while it is outstanding ``skip`` drops a due occurrence and ``buffer_one`` keeps one (the older
    promise; a later one is dropped) and fires it as soon as the outstanding one ends. Occurrences
    chosen by a catch-up fire one after the other under the same rule, so at most one of them
    starts while the others would overlap it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from .periodic import (
    MAX_CATCHUP,
    PeriodicEntry,
    PeriodicState,
    after_fire,
    jitter_ms,
    occurrence_id,
    plan_catchup,
    plan_overlap,
)

__all__ = ["Decision", "Fire", "MarkOp", "decide"]

#: What the fire script does with the entry's overlap mark: ``""`` keep it, ``"f"`` point it at the
#: last occurrence fired now, ``"fb"`` the same and remember that one waits (buffered), ``"b"``
#: remember on the existing mark that one waits. The worker's report wakes the leader only when
#: one waits.
MarkOp = Literal["", "f", "fb", "b"]


@dataclass(frozen=True)
class Fire:
    """One occurrence to store now: fire time (its identity), due time (fire time + jitter) and id."""

    fire_ms: int
    due_ms: int
    task_id: str


@dataclass(frozen=True)
class Decision:
    fires: list[Fire]
    state: PeriodicState
    look_ms: int | None  # when the leader looks at the entry again (its score in `next`); None: never
    mark: MarkOp
    dropped: int  # due fire times that did not fire (catch-up policy, window, overlap)


def decide(entry: PeriodicEntry, state: PeriodicState, due: Sequence[int], following: int | None, now_ms: int, *,
           grace_ms: int, window: float | None, outstanding_until: int | None,
           overlap_timeout_ms: int, name: str | None = None) -> Decision:
    """The leader's decision for a due entry (``name``: the entry's, when ``entry`` is only its plan).

    ``due``: the fire times from ``state.next_run_ms`` up to ``now_ms``, ascending, within the
    entry's bounds (the newest :data:`MAX_CATCHUP` of them); ``following``: the first fire time
    after ``now_ms`` within the bounds, or ``None``. ``window``: the catch-up window in seconds
    (``None``: no limit). ``outstanding_until``: see the module docs.
    """
    name = entry.name if name is None else name
    if not entry.enabled or entry.paused:
        return Decision([], state, None, "", 0)
    due = list(due)[-MAX_CATCHUP:]
    if entry.one_off and state.total_run_count >= 1:
        return Decision([], replace(state, next_run_ms=None, buffered_ms=None), None, "", len(due))
    chosen = _catch_up(entry, due, now_ms, grace_ms, window)
    if entry.one_off:
        chosen = chosen[-1:]
        if chosen:
            following = None

    fires: list[Fire] = []
    buffered = state.buffered_ms
    outstanding = outstanding_until is not None
    if entry.overlap == "allow":
        fires = [_fire(entry, name, t) for t in chosen]
        buffered = None
    else:
        if buffered is not None and not outstanding:
            fires.append(Fire(buffered, now_ms, occurrence_id(name, buffered)))  # late on purpose
            buffered, outstanding = None, True
        for t in chosen:
            verdict = plan_overlap(entry.overlap, outstanding, buffered is not None)
            if verdict == "fire":
                fires.append(_fire(entry, name, t))
                outstanding = True
            elif verdict == "buffer":
                buffered = t

    new_state = replace(state, buffered_ms=buffered) if buffered != state.buffered_ms else state
    for fire in fires:
        new_state = after_fire(new_state, name, fire.fire_ms, following, fire.task_id)
    if new_state.next_run_ms != following:
        new_state = replace(new_state, next_run_ms=following)
    look = following
    if buffered is not None:
        # The worker's report of the end makes the entry due; this bounds the wait if none comes.
        until = now_ms + overlap_timeout_ms if fires else (outstanding_until or now_ms + overlap_timeout_ms)
        look = until if look is None else min(look, until)
    mark: MarkOp = ""
    if entry.overlap != "allow":
        if fires:
            mark = "fb" if buffered is not None else "f"
        elif buffered is not None and state.buffered_ms is None:
            mark = "b"
    due_set = set(due)
    fired_due = sum(1 for f in fires if f.fire_ms in due_set)
    return Decision(fires, new_state, look, mark, len(due) - fired_due)


def _catch_up(entry: PeriodicEntry, due: list[int], now_ms: int, grace_ms: int, window: float | None) -> list[int]:
    on_time = [t for t in due if now_ms - t <= grace_ms]
    missed = [t for t in due if now_ms - t > grace_ms]
    if entry.catchup == "once" and on_time:
        return on_time  # the on-time one is the latest: nothing older to catch up
    return plan_catchup(missed, now_ms, entry.catchup, window) + on_time


def _fire(entry: PeriodicEntry, name: str, fire_ms: int) -> Fire:
    return Fire(fire_ms, fire_ms + jitter_ms(name, fire_ms, entry.jitter), occurrence_id(name, fire_ms))

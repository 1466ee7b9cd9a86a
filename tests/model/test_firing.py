"""The leader's decision for a due entry (model.firing): catch-up, overlap, one-offs, jitter."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from celery_zset_scheduler.model.firing import decide
from celery_zset_scheduler.model.periodic import PeriodicEntry, PeriodicState, jitter_ms, occurrence_id

MIN = 60_000
NOW = 1_700_000_000_000 - 1_700_000_000_000 % MIN + 5_000  # 5 s after a minute boundary
GRACE = 20_000  # twice a 10 s lock timeout
TIMEOUT = 3_600_000


def entry(**changes: Any) -> PeriodicEntry:
    return replace(PeriodicEntry(name="e", task="t", schedule={"type": "interval", "every": 60.0}), **changes)


def run(e: PeriodicEntry, due: list[int], *, state: PeriodicState | None = None, following: int | None = None,
        window: float | None = None, outstanding_until: int | None = None) -> Any:
    state = state or PeriodicState(next_run_ms=due[0] if due else None, total_run_count=7)
    return decide(e, state, due, following if following is not None else NOW + MIN - 5_000, NOW,
                  grace_ms=GRACE, window=window, outstanding_until=outstanding_until, overlap_timeout_ms=TIMEOUT)


def fired(decision: Any) -> list[int]:
    return [f.fire_ms for f in decision.fires]


# A 10-minute outage of an every-minute entry: the fire times 10 min ago .. 5 s ago.
OUTAGE = [NOW - 5_000 - k * MIN for k in range(10, -1, -1)]


def test_on_time_occurrences_always_fire_whatever_the_policy() -> None:
    # A leader change makes an occurrence late by about a lock timeout: that is not "missed".
    for policy in ("skip", "once", "all"):
        assert fired(run(entry(catchup=policy), [NOW - 12_000])) == [NOW - 12_000]
    # Several on time (an every-5-seconds entry across a takeover): all of them, none skipped.
    burst = [NOW - 15_000, NOW - 10_000, NOW - 5_000]
    assert fired(run(entry(catchup="once", schedule={"type": "interval", "every": 5.0}), burst)) == burst


def test_catch_up_policies_after_an_outage() -> None:
    assert fired(run(entry(catchup="skip"), OUTAGE[:-1])) == []  # nothing on time, nothing caught up
    assert fired(run(entry(catchup="once"), OUTAGE[:-1])) == [OUTAGE[-2]]  # the latest missed one
    assert fired(run(entry(catchup="all"), OUTAGE[:-1])) == OUTAGE[:-1]
    # With an on-time one too: skip and once fire just that one, all the missed ones as well.
    assert fired(run(entry(catchup="skip"), OUTAGE)) == [OUTAGE[-1]]
    assert fired(run(entry(catchup="once"), OUTAGE)) == [OUTAGE[-1]]
    assert fired(run(entry(catchup="all"), OUTAGE)) == OUTAGE


def test_the_window_limits_what_is_caught_up_not_what_is_on_time() -> None:
    assert fired(run(entry(catchup="all"), OUTAGE, window=3.5 * 60)) == OUTAGE[-4:]
    assert fired(run(entry(catchup="once"), OUTAGE[:-1], window=30)) == []  # the latest missed is too old
    # An on-time occurrence fires even with a window shorter than the grace.
    assert fired(run(entry(catchup="all"), [NOW - 12_000], window=1)) == [NOW - 12_000]


def test_state_after_firing_keeps_history_and_moves_on() -> None:
    decision = run(entry(catchup="all"), OUTAGE, following=NOW + 55_000)
    assert decision.state.total_run_count == 7 + len(OUTAGE)
    assert decision.state.last_run_ms == OUTAGE[-1]
    assert decision.state.last_task_id == occurrence_id("e", OUTAGE[-1])
    assert decision.state.next_run_ms == decision.look_ms == NOW + 55_000
    assert [f.task_id for f in decision.fires] == [occurrence_id("e", t) for t in OUTAGE]
    skipped = run(entry(catchup="skip"), OUTAGE[:-1], following=NOW + 55_000)
    assert skipped.state.total_run_count == 7 and skipped.state.next_run_ms == NOW + 55_000
    assert skipped.dropped == len(OUTAGE) - 1


def test_jitter_moves_the_due_time_never_the_identity() -> None:
    decision = run(entry(jitter=30.0), [NOW - 1_000])
    (fire,) = decision.fires
    assert fire.task_id == occurrence_id("e", NOW - 1_000)
    assert fire.due_ms == NOW - 1_000 + jitter_ms("e", NOW - 1_000, 30.0)
    assert NOW - 1_000 <= fire.due_ms < NOW + 29_000


def test_overlap_allow_fires_while_the_previous_one_runs() -> None:
    decision = run(entry(overlap="allow"), [NOW - 1_000], outstanding_until=NOW + 10_000)
    assert fired(decision) == [NOW - 1_000] and decision.mark == ""


def test_overlap_skip_drops_while_outstanding_and_tracks_what_it_fires() -> None:
    dropped = run(entry(overlap="skip"), [NOW - 1_000], outstanding_until=NOW + 10_000, following=NOW + 59_000)
    assert fired(dropped) == [] and dropped.state.next_run_ms == NOW + 59_000 and dropped.mark == ""
    fired_now = run(entry(overlap="skip"), [NOW - 1_000])
    assert fired(fired_now) == [NOW - 1_000] and fired_now.mark == "f"
    # A catch-up under skip starts one (the others would overlap it).
    assert fired(run(entry(overlap="skip", catchup="all"), OUTAGE)) == [OUTAGE[0]]


def test_overlap_buffer_one_keeps_one_and_fires_it_when_the_previous_ends() -> None:
    e = entry(overlap="buffer_one")
    buffered = run(e, [NOW - 1_000], outstanding_until=NOW + 10_000, following=NOW + 59_000)
    assert fired(buffered) == [] and buffered.state.buffered_ms == NOW - 1_000 and buffered.mark == "b"
    assert buffered.look_ms == NOW + 10_000  # looked at again when the outstanding one times out at the latest
    # A second one while one waits is dropped; the waiting one stays (the older promise).
    again = run(e, [NOW - 500], state=buffered.state, outstanding_until=NOW + 10_000)
    assert fired(again) == [] and again.state.buffered_ms == NOW - 1_000 and again.mark == ""
    # The previous one ended: the buffered one fires now (late on purpose), under its own id.
    ended = decide(e, buffered.state, [], NOW + 59_000, NOW + 2_000, grace_ms=GRACE, window=None,
                   outstanding_until=None, overlap_timeout_ms=TIMEOUT)
    assert [(f.fire_ms, f.due_ms, f.task_id) for f in ended.fires] == [
        (NOW - 1_000, NOW + 2_000, occurrence_id("e", NOW - 1_000))]
    assert ended.state.buffered_ms is None and ended.mark == "f" and ended.look_ms == NOW + 59_000
    # Ended, and the next one is due at the same time: the buffered one runs, the new one waits.
    both = decide(e, buffered.state, [NOW + 1_500], NOW + 61_500, NOW + 2_000, grace_ms=GRACE, window=None,
                  outstanding_until=None, overlap_timeout_ms=TIMEOUT)
    assert fired(both) == [NOW - 1_000] and both.state.buffered_ms == NOW + 1_500 and both.mark == "fb"


def test_one_off_fires_once_then_never() -> None:
    e = entry(one_off=True, catchup="all")
    first = run(e, OUTAGE, state=PeriodicState(next_run_ms=OUTAGE[0]))
    assert fired(first) == [OUTAGE[-1]] and first.state.next_run_ms is None and first.look_ms is None
    assert fired(run(e, OUTAGE, state=first.state)) == []


@pytest.mark.parametrize("changes", [{"enabled": False}, {"paused": True}])
def test_disabled_or_paused_entries_fire_nothing(changes: dict[str, Any]) -> None:
    decision = run(entry(**changes), [NOW - 1_000])
    assert decision.fires == [] and decision.look_ms is None

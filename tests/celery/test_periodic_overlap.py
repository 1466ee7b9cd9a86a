"""Overlap policies with a real worker that can run several tasks at once (threads pool)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from celery_zset_scheduler import periodic

from ..support.helpers import AppFactory, wait_for

pytestmark = pytest.mark.slow


def spans(apps: AppFactory, tag: str) -> list[tuple[float, float]]:
    """(start, end) of each finished run, by start time."""
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for e in apps.executions():
        if e.get("tag") == tag:
            (starts if e["phase"] == "start" else ends)[e["id"]] = e["at"]
    return sorted((starts[i], ends[i]) for i in starts if i in ends)


def run_entry(apps: AppFactory, overlap: str, every: float, task_seconds: float,
              seconds: float = 7.0) -> tuple[list[tuple[float, float]], Any]:
    app = apps(shards=2)
    apps.worker(apps(shards=2), pool="threads", concurrency=4)
    apps.dispatcher(app)
    periodic.add(app, overlap, "t.span", every, kwargs={"tag": overlap, "seconds": task_seconds},
                 overlap=overlap)  # type: ignore[arg-type]
    time.sleep(seconds)
    periodic.disable(app, overlap)

    def settled() -> bool:  # every occurrence that fired has finished (a loaded machine is slow)
        info = periodic.get(app, overlap)
        return info is not None and len(spans(apps, overlap)) >= info.state.total_run_count

    wait_for(settled, timeout=20, what="the fired occurrences to finish")
    return spans(apps, overlap), periodic.get(app, overlap)


def overlaps(runs: list[tuple[float, float]]) -> int:
    return sum(1 for (_, end), (start, _) in itertools.pairwise(runs) if start < end)


def gaps(runs: list[tuple[float, float]]) -> list[float]:
    return [start - end for (_, end), (start, _) in itertools.pairwise(runs)]


# Every second, each run taking 1.5 s: with skip the next run is the first fire time after the end
# (half a second later), with buffer_one the occurrence that fell due meanwhile starts at once.

def test_allow_runs_occurrences_over_each_other_as_celery_beat_does(apps: AppFactory) -> None:
    runs, _ = run_entry(apps, "allow", 0.4, 1.0)
    assert len(runs) >= 10 and overlaps(runs) >= 5


def test_skip_drops_occurrences_while_the_previous_one_runs(apps: AppFactory) -> None:
    runs, info = run_entry(apps, "skip", 1.0, 1.5)
    assert overlaps(runs) == 0 and 3 <= len(runs) <= 4, runs
    assert min(gaps(runs)) > 0.35, gaps(runs)  # waited for the next fire time
    # Skipped occurrences were never stored: every stored one ran.
    assert info is not None and info.state.total_run_count == len(runs)


def test_buffer_one_runs_the_waiting_occurrence_as_soon_as_the_previous_ends(apps: AppFactory) -> None:
    runs, info = run_entry(apps, "buffer_one", 1.0, 1.5)
    assert overlaps(runs) == 0 and 4 <= len(runs) <= 5, runs
    # The worker reports the end, which wakes the leader: the buffered one starts at once.
    assert max(gaps(runs)) < 0.35, gaps(runs)
    assert info is not None and info.state.total_run_count == len(runs)


def test_a_lost_report_holds_the_entry_at_most_the_overlap_timeout(apps: AppFactory) -> None:
    app = apps(shards=2, zset_scheduler_periodic_overlap_timeout=2.0)
    apps.dispatcher(app)
    periodic.add(app, "lost", "t.record", 0.5, kwargs={"tag": "lost"}, overlap="skip")
    # No worker: the first occurrence is handed to the broker and never reported finished.
    wait_for(lambda: (periodic.get(app, "lost") or object()).state.total_run_count >= 1,  # type: ignore[attr-defined]
             timeout=10, what="the first occurrence")
    time.sleep(1.0)
    held = periodic.get(app, "lost")
    assert held is not None and held.state.total_run_count == 1  # held by the unreported one
    wait_for(lambda: (periodic.get(app, "lost") or held).state.total_run_count >= 2, timeout=5,
             what="the entry to go on after the timeout")

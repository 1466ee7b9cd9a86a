"""What the CLI and the admin call for pending tasks, without click: paging, show, bulk actions."""

from __future__ import annotations

import time

import pytest

from celery_zset_scheduler.model.cursors import InvalidCursor
from celery_zset_scheduler.ops import pending as ops
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry
from celery_zset_scheduler.store.snapshot import redis_now_ms

from ..support.tools import pending
from .conftest import message

NOW = int(time.time() * 1000) + 3_600_000


def fill(store: Store, n: int, task: str = "t.add", start: int = 0, due: int | None = None) -> list[str]:
    ids = [f"{task}-{i}" for i in range(start, start + n)]
    store.schedule_many([NewEntry(i, NOW + (k if due is None else due), message(i, task)) for k, i in enumerate(ids)])
    return ids


def test_pages_merge_every_shard_in_due_order_and_resume_by_cursor(store: Store) -> None:
    ids = fill(store, 230)
    seen: list[str] = []
    cursor = None
    while True:
        page = ops.list_pending(store, limit=50, cursor=cursor)
        seen += [e.task_id for e in page.entries]
        assert [e.due_ms for e in page.entries] == sorted(e.due_ms for e in page.entries)
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == ids  # due order across shards, each once


def test_a_task_name_filter_reads_a_bounded_number_per_call(store: Store) -> None:
    fill(store, 300, "t.other")
    wanted = fill(store, 5, "t.add", due=400)
    page = ops.list_pending(store, task_name="t.add", limit=10, scan_limit=100)
    assert page.entries == [] and page.scanned == 100 and page.cursor is not None
    found: list[str] = []
    cursor: str | None = page.cursor
    while cursor is not None:
        page = ops.list_pending(store, task_name="t.add", limit=10, scan_limit=100, cursor=cursor)
        found += [e.task_id for e in page.entries]
        cursor = page.cursor
    assert sorted(found) == sorted(wanted)


def test_a_cursor_made_with_other_filters_is_refused(store: Store) -> None:
    fill(store, 20)
    page = ops.list_pending(store, limit=5)
    assert page.cursor is not None
    with pytest.raises(InvalidCursor, match="other filters"):
        ops.list_pending(store, limit=5, cursor=page.cursor, task_name="t.add")


def test_show_decodes_the_arguments(store: Store) -> None:
    (task_id,) = fill(store, 1)
    view = ops.show(store, task_id)
    assert view is not None and view["task"] == "t.add" and view["args"] == [1, 2] and view["state"] == "pending"
    assert ops.show(store, "nope") is None


def test_cancel_a_selection_takes_exactly_the_selection(store: Store) -> None:
    fill(store, 40, "t.add")
    keep = fill(store, 40, "t.keep")
    selection = ops.Selection(task_name="t.add")
    assert ops.count_selected(store, selection) == 80  # a task name is not counted (no index)
    done: list[int] = []
    counts = ops.cancel_selected(store, selection, done.append)
    assert counts == {"cancelled": 40} and sum(done) == 80
    assert pending(store) == 40 and all(store.get(i) for i in keep)
    with pytest.raises(ValueError, match="the store has shards 0..3"):
        ops.count_selected(store, ops.Selection(shards=[7]))


def test_run_now_moves_tasks_to_redis_time(store: Store) -> None:
    ids = fill(store, 3)
    before = redis_now_ms(store)
    when, outcome = ops.run_now(store, [*ids, "gone"])
    assert before <= when <= redis_now_ms(store)
    assert outcome == {**dict.fromkeys(ids, "rescheduled"), "gone": "not_pending"}
    assert all(getattr(store.get(i), "score_ms", None) == when for i in ids)


def test_reschedule_a_selection_moves_exactly_the_selection_once(store: Store) -> None:
    moved = fill(store, 600, "t.add")  # more than one page per shard
    keep = fill(store, 50, "t.keep", start=600)
    target = NOW + 10_000  # inside the selection's range, ahead of the walk: moved entries are met again
    done: list[int] = []
    counts = ops.reschedule_selected(store, ops.Selection(task_name="t.add"), target, done.append)
    assert counts == {"rescheduled": 600}
    assert all(getattr(store.get(i), "score_ms", None) == target for i in moved)
    assert all(getattr(store.get(i), "score_ms", None) != target for i in keep)
    assert sum(done) >= 650


def test_run_now_on_a_selection_uses_redis_time_and_the_due_range(store: Store) -> None:
    early = fill(store, 5, due=0)
    late = fill(store, 5, start=5, due=50_000)
    before = redis_now_ms(store)
    when, counts = ops.run_now_selected(store, ops.Selection(max_due=NOW + 1_000))
    assert before <= when <= redis_now_ms(store) and counts == {"rescheduled": 5}
    assert all(getattr(store.get(i), "score_ms", None) == when for i in early)
    assert all(getattr(store.get(i), "score_ms", None) != when for i in late)


def test_a_row_summary_reads_the_headers_and_names_a_broken_entry(store: Store) -> None:
    from celery_zset_scheduler.ops.views import summary_view

    (task_id,) = fill(store, 1)
    entry = store.get(task_id)
    assert entry is not None
    row = summary_view(task_id, entry.payload)
    assert (row["task"], row["args"], row["kwargs"], row["retries"], row["error"]) == ("t.add", "[1, 2]", "{}", 0, None)
    broken = summary_view("x", b"not a stored message")
    assert broken["task"] is None and broken["error"]

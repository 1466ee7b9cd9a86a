"""What the CLI and the admin call for dead letters: paging with bound cursors, requeue, purge."""

from __future__ import annotations

import pytest

from celery_zset_scheduler.model.codec import decode
from celery_zset_scheduler.model.cursors import InvalidCursor
from celery_zset_scheduler.model.letters import DeadLetter
from celery_zset_scheduler.ops import deadletters as ops
from celery_zset_scheduler.store.deadletters import DeadLetters
from celery_zset_scheduler.store.pending import Store

from .conftest import message


def add(letters: DeadLetters, n: int, task: str = "t.add") -> list[str]:
    ids = [f"{task}-{i}" for i in range(n)]
    for task_id in ids:
        letters.add(DeadLetter.for_message(decode(task_id, message(task_id, task)), "failed",
                                           exc_type="ValueError", attempts=3))
    return ids


def test_pages_are_newest_first_and_resume_by_cursor(letters: DeadLetters) -> None:
    ids = add(letters, 25)
    seen: list[str] = []
    cursor = None
    while True:
        page = ops.list_letters(letters, ops.LetterFilter(), limit=10, cursor=cursor)
        seen += [x.task_id for x in page.letters]
        cursor = page.cursor
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 25
    times = [x.dead_lettered_ms for x in ops.list_letters(letters, ops.LetterFilter(), limit=25).letters]
    assert times == sorted(times, reverse=True)
    first = ops.list_letters(letters, ops.LetterFilter(), limit=10)
    with pytest.raises(InvalidCursor):
        ops.list_letters(letters, ops.LetterFilter(task_name="t.add"), cursor=first.cursor)


def test_requeue_stores_the_message_again_then_removes_the_letter(store: Store, letters: DeadLetters) -> None:
    ids = add(letters, 3)
    outcome = ops.requeue(store, letters, [*ids, "unknown"], due_ms=123)
    assert outcome == {**dict.fromkeys(ids, "requeued"), "unknown": "unknown"}
    assert letters.count() == 0
    entry = store.get(ids[0])
    assert entry is not None and entry.score_ms == 123 and entry.payload is not None
    assert decode(ids[0], entry.payload).headers["retries"] == 0


def test_purge_a_selection_by_task_name(letters: DeadLetters) -> None:
    add(letters, 4, "t.add")
    keep = add(letters, 2, "t.keep")
    assert ops.count_matching(letters, ops.LetterFilter(task_name="t.add")) is None  # no index by name
    assert ops.purge_matching(letters, ops.LetterFilter(task_name="t.add")) == 4
    assert sorted(x.task_id for x in ops.list_letters(letters, ops.LetterFilter()).letters) == sorted(keep)
    assert ops.purge(letters, [keep[0], "nope"]) == {keep[0]: "purged", "nope": "unknown"}
    view = ops.show(letters, keep[1])
    assert view is not None and view["reason"] == "failed" and view["message"]["args"] == [1, 2]


def test_a_reason_filter_selects_by_reason_and_is_bound_to_its_cursor(store: Store, letters: DeadLetters) -> None:
    failed = add(letters, 3)
    rejected = "t.add-rejected"
    letters.add(DeadLetter.for_message(decode(rejected, message(rejected)), "rejected"))
    by_reason = ops.LetterFilter(reason="rejected")
    assert [x.task_id for x in ops.list_letters(letters, by_reason).letters] == [rejected]
    assert ops.count_matching(letters, by_reason) is None
    first = ops.list_letters(letters, ops.LetterFilter(reason="failed"), limit=1)
    assert first.cursor is not None and first.letters[0].task_id in failed
    with pytest.raises(InvalidCursor):
        ops.list_letters(letters, ops.LetterFilter(), limit=1, cursor=first.cursor)
    assert ops.requeue_matching(store, letters, by_reason) == {"requeued": 1}
    assert store.get(rejected) is not None and letters.count() == 3

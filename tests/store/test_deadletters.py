"""The dead-letter store on its own: paging newest first, removal while paging, records."""

from __future__ import annotations

import redis

from celery_zset_scheduler.model.letters import DeadLetter
from celery_zset_scheduler.store.deadletters import DeadLetters
from celery_zset_scheduler.store.pending import Store


def test_paging_newest_first_survives_removals(store: Store, r: redis.Redis) -> None:
    letters = DeadLetters(store.client, store.keys)
    for i in range(30):
        letters.add(DeadLetter(task_id=f"id-{i:02d}", task_name="t", reason="failed"))
    # Several share a millisecond: force ties so the order within one time matters.
    r.zadd(store.keys.dlq_index, {f"id-{i:02d}": 1000 + i // 5 for i in range(30)})
    order = sorted(range(30), key=lambda i: (1000 + i // 5, f"id-{i:02d}"), reverse=True)
    expected = [f"id-{i:02d}" for i in order]
    seen: list[str] = []
    after = None
    while True:
        page = letters.page(after=after, limit=4)
        seen += [letter.task_id for letter in page.letters]
        if page.cursor is None:
            break
        letters.remove([page.cursor[1]])  # requeued or purged between two pages
        after = page.cursor
    assert seen == expected


def test_a_record_round_trips(store: Store) -> None:
    letters = DeadLetters(store.client, store.keys)
    letter = DeadLetter(task_id="x", task_name="t.x", reason="rejected", exc_type="Reject", args=[1, "a"],
                        kwargs={"k": None}, attempts=2, first_failure_ms=5, last_failure_ms=9, worker="w@h")
    at = letters.add(letter)
    stored = letters.get("x")
    assert stored is not None and stored.dead_lettered_ms == at
    assert stored == DeadLetter(**{**letter.__dict__, "dead_lettered_ms": at})

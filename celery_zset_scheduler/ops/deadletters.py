"""Dead letters for people: list with filters, show, requeue into the store, purge.

What ``celery zset dlq`` and the Django admin call. A requeue
schedules the original message again (same id, same bytes, the attempt counter reset) and only
then removes the dead letter: a crash in between leaves the task both pending and dead-lettered,
never neither (I1), and requeueing it again is a no-op because its id is already pending.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import PoisonMessage
from ..model.codec import encode
from ..model.cursors import InvalidCursor, decode_cursor, encode_cursor
from ..model.letters import DeadLetter, reset_for_requeue
from ..model.logs import log_event
from ..store.deadletters import DeadLetters
from ..store.pending import Store
from ..store.schedule import NewEntry
from ..store.snapshot import redis_now_ms
from .paging import Progress, chunks, sweep
from .views import Decompress, letter_view

PAGE = 500

RequeueStatus = Literal["requeued", "pending", "undecodable", "unknown"]
PurgeStatus = Literal["purged", "unknown"]


@dataclass(frozen=True)
class LetterFilter:
    """Which dead letters: by task name, by reason and by dead-lettered time (ms, both bounds
    inclusive). Only the time has an index; the name and the reason are read from the records."""

    task_name: str | None = None
    newest_ms: int | None = None
    oldest_ms: int | None = None
    reason: str | None = None

    @property
    def reads_records(self) -> bool:
        """Whether matching needs the records (a bounded scan), not only the time index."""
        return self.task_name is not None or self.reason is not None

    def matches(self, letter: DeadLetter) -> bool:
        return ((self.task_name is None or letter.task_name == self.task_name)
                and (self.reason is None or letter.reason == self.reason))


@dataclass(frozen=True)
class LetterPage:
    letters: list[DeadLetter]
    cursor: str | None  # opaque: pass it back with the same filters; None at the end
    scanned: int


def list_letters(
    dead_letters: DeadLetters, flt: LetterFilter, *, limit: int = 50, cursor: str | None = None,
    scan_limit: int = 10_000, bounds: Any = None,
) -> LetterPage:
    """Newest first; a task-name or reason filter reads at most ``scan_limit`` letters per call.

    The cursor is bound to the filters; ``bounds`` replaces the time bounds in that binding (a
    CLI passes the times as typed, so ``--before now`` still resumes a minute later).
    """
    query: dict[str, Any] = {"task": flt.task_name,
                             "times": [flt.newest_ms, flt.oldest_ms] if bounds is None else bounds}
    if flt.reason is not None:  # only when given: cursors made without it stay valid
        query["reason"] = flt.reason
    after = None
    if cursor:
        state = decode_cursor("dlq", query, cursor)
        try:
            after = (int(state[0]), str(state[1]))
        except (TypeError, ValueError, IndexError):
            raise InvalidCursor("invalid cursor: pass the cursor printed by the previous page unchanged") from None
    found, position, scanned = _scan(dead_letters, flt, limit, after, scan_limit)
    return LetterPage(found, None if position is None else encode_cursor("dlq", query, list(position)), scanned)


def _scan(dead_letters: DeadLetters, flt: LetterFilter, limit: int, after: tuple[int, str] | None,
          scan_limit: int) -> tuple[list[DeadLetter], tuple[int, str] | None, int]:
    found: list[DeadLetter] = []
    scanned = 0
    cursor = after
    page_size = min(PAGE, max(limit, scan_limit)) if flt.reads_records else limit
    while True:
        page = dead_letters.page(after=cursor, newest_ms=flt.newest_ms, oldest_ms=flt.oldest_ms,
                                 limit=page_size)
        for letter in page.letters:
            scanned += 1
            cursor = (letter.dead_lettered_ms, letter.task_id)
            if flt.matches(letter):
                found.append(letter)
            if len(found) >= limit or (flt.reads_records and scanned >= scan_limit):
                more = page.cursor is not None or letter is not page.letters[-1]
                return found, cursor if more else None, scanned
        if page.cursor is None:
            return found, None, scanned
        cursor = page.cursor


def count_matching(dead_letters: DeadLetters, flt: LetterFilter) -> int | None:
    """How many letters match, when that is O(log n) to know (no name or reason filter), else None."""
    if flt.reads_records:
        return None
    return dead_letters.count_between(flt.oldest_ms, flt.newest_ms)


def show(dead_letters: DeadLetters, task_id: str, decompress: Decompress | None = None) -> dict[str, Any] | None:
    """The full view of one dead letter (``letter_view``), or None."""
    letter = dead_letters.get(task_id)
    return None if letter is None else letter_view(letter, decompress=decompress)


def requeue(
    store: Store, dead_letters: DeadLetters, task_ids: Iterable[str], *, due_ms: int | None = None,
    progress: Progress | None = None,
) -> dict[str, RequeueStatus]:
    """Requeue dead letters by id, due at ``due_ms`` (default: now by Redis time)."""
    ids = list(dict.fromkeys(task_ids))
    status: dict[str, RequeueStatus] = {}
    for chunk in chunks(ids, PAGE):
        letters = dead_letters.get_many(chunk)
        status.update(dict.fromkeys((i for i in chunk if i not in letters), "unknown"))
        status.update(_requeue_letters(store, dead_letters, list(letters.values()), due_ms))
        if progress is not None:
            progress(len(chunk))
    return {i: status[i] for i in ids}


def requeue_matching(
    store: Store, dead_letters: DeadLetters, flt: LetterFilter, *, due_ms: int | None = None,
    progress: Progress | None = None,
) -> dict[RequeueStatus, int]:
    """Requeue every matching dead letter; counts of each outcome."""
    counts: dict[RequeueStatus, int] = {}

    def act(letters: list[DeadLetter]) -> list[tuple[int, str]]:
        outcome = _requeue_letters(store, dead_letters, letters, due_ms)
        for value in outcome.values():
            counts[value] = counts.get(value, 0) + 1
        return [(x.dead_lettered_ms, x.task_id) for x in letters if outcome[x.task_id] == "requeued"]

    for read, _ in sweep(_fetcher(dead_letters, flt), _key, flt.matches, act):
        if progress is not None:
            progress(read)
    return counts


def purge(dead_letters: DeadLetters, task_ids: Iterable[str]) -> dict[str, PurgeStatus]:
    ids = list(dict.fromkeys(task_ids))
    status: dict[str, PurgeStatus] = {}
    for chunk in chunks(ids, PAGE):
        present = dead_letters.present(chunk)
        dead_letters.remove(present)
        status.update({i: ("purged" if i in present else "unknown") for i in chunk})
    purged = sum(1 for s in status.values() if s == "purged")
    if purged:
        log_event(logging.INFO, "dlq.purged", count=purged)
    return {i: status[i] for i in ids}


def purge_matching(dead_letters: DeadLetters, flt: LetterFilter, *, progress: Progress | None = None) -> int:
    """Remove every matching dead letter; how many were removed."""
    total = 0

    def act(letters: list[DeadLetter]) -> list[tuple[int, str]]:
        dead_letters.remove([x.task_id for x in letters])
        return [_key(x) for x in letters]

    for read, removed in sweep(_fetcher(dead_letters, flt), _key, flt.matches, act):
        total += removed
        if progress is not None:
            progress(read)
    if total:
        log_event(logging.INFO, "dlq.purged", count=total, task=flt.task_name or "*")
    return total


def _key(letter: DeadLetter) -> tuple[int, str]:
    return (letter.dead_lettered_ms, letter.task_id)


def _fetcher(
    dead_letters: DeadLetters, flt: LetterFilter
) -> Callable[[tuple[int, str] | None], tuple[list[DeadLetter], bool]]:
    def fetch(after: tuple[int, str] | None) -> tuple[list[DeadLetter], bool]:
        page = dead_letters.page(after=after, newest_ms=flt.newest_ms, oldest_ms=flt.oldest_ms, limit=PAGE)
        return page.letters, page.cursor is not None

    return fetch


def _requeue_letters(
    store: Store, dead_letters: DeadLetters, letters: Sequence[DeadLetter], due_ms: int | None
) -> dict[str, RequeueStatus]:
    status: dict[str, RequeueStatus] = {}
    entries: list[NewEntry] = []
    when = redis_now_ms(store) if due_ms is None else int(due_ms)
    for letter in letters:
        try:
            message = reset_for_requeue(letter.original())
        except (PoisonMessage, ValueError):  # never decoded, or the record's base64 is broken
            status[letter.task_id] = "undecodable"
            continue
        entries.append(NewEntry(letter.task_id, when, encode(message)))
    if entries:
        results = store.schedule_many(entries)
        done = [e.task_id for e, r in zip(entries, results, strict=True) if r.created]
        dead_letters.remove(done)
        for entry, result in zip(entries, results, strict=True):
            status[entry.task_id] = "requeued" if result.created else "pending"
        if done:
            log_event(logging.INFO, "dlq.requeued", count=len(done), due_ms=when,
                      ids=",".join(done[:10]))
    return status


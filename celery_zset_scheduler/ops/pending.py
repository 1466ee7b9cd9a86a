"""Pending tasks for people: list them in due order a bounded page at a time, show one, cancel,
reschedule and run them now, by id or by a selection. What the CLI and the Django admin call.

``list_pending`` merges the shards' own due-ordered pages (``Store.page``: O(log n + limit) each)
and returns an opaque cursor holding one position per shard, so the next call resumes exactly
where this one stopped. A filter on the message (the task name) cannot be answered by an index,
so a call reads at most ``scan_limit`` entries and returns what matched with a cursor: never a
scan of the whole store in one call (I4).

Bulk operations on a selection walk it with :func:`.paging.sweep`, a page at a time.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import PoisonMessage
from ..model.codec import decode
from ..model.cursors import InvalidCursor, decode_cursor, encode_cursor
from ..store.entries import CancelStatus, PageEntry, reschedule_call
from ..store.pending import CHUNK, Store
from ..store.snapshot import count_due, redis_now_ms
from .paging import Progress, chunks, sweep
from .views import Decompress, entry_view

SCAN_PAGE = 500  # entries read per shard and round trip when a filter has to look at messages


@dataclass(frozen=True)
class Listed:
    shard: int
    task_id: str
    due_ms: int
    payload: bytes | None

    @property
    def task_name(self) -> str | None:
        """The stored message's task name; None when it cannot be decoded."""
        return task_name_of(self.task_id, self.payload)


@dataclass(frozen=True)
class Listing:
    entries: list[Listed]
    cursor: str | None  # None: nothing more
    scanned: int  # entries read (more than returned when a filter skipped some)


@dataclass
class _Positions:
    after: dict[int, tuple[int, str]] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)

    def to_state(self) -> dict[str, Any]:
        return {"a": {str(s): list(p) for s, p in self.after.items()}, "d": sorted(self.done)}

    @classmethod
    def from_state(cls, state: Any, shards: Collection[int]) -> _Positions:
        try:
            after = {int(s): (int(p[0]), str(p[1])) for s, p in state["a"].items()}
            done = {int(s) for s in state["d"]}
        except (KeyError, TypeError, ValueError, IndexError):
            raise InvalidCursor("invalid cursor: pass the cursor printed by the previous page unchanged") from None
        if not (set(after) | done) <= set(shards):
            raise InvalidCursor("this cursor was made for other shards")
        return cls(after, done)


def task_name_of(task_id: str, payload: bytes | None) -> str | None:
    if payload is None:
        return None
    try:
        return decode(task_id, payload).task_name
    except PoisonMessage:
        return None


def list_pending(
    store: Store, *, shards: Sequence[int] | None = None, min_due: int | None = None,
    max_due: int | None = None, task_name: str | None = None, limit: int = 50,
    cursor: str | None = None, scan_limit: int = 10_000, bounds: Any = None,
) -> Listing:
    """One page of pending entries over ``shards`` (default: all) in due-time order.

    The cursor is bound to the filters; ``bounds`` replaces the due bounds in that binding (a
    CLI passes the times as typed, so ``--due-before now`` still resumes a minute later).
    """
    wanted = sorted(set(range(store.shards) if shards is None else shards))
    limits = [min_due, max_due] if bounds is None else bounds
    query = {"shards": wanted, "due": limits, "task": task_name, "n": store.shards}
    positions = _Positions()
    if cursor:
        positions = _Positions.from_state(decode_cursor("pending", query, cursor), wanted)
    page_size = limit if task_name is None else min(SCAN_PAGE, max(limit, scan_limit))
    walk = _merged(store, wanted, positions, page_size, min_due, max_due)
    found: list[Listed] = []
    scanned = 0
    for item in walk:
        scanned += 1
        if task_name is None or item.task_name == task_name:
            found.append(item)
        if len(found) >= limit or (task_name is not None and scanned >= scan_limit):
            break
    walk.close()
    finished = positions.done >= set(wanted)
    next_cursor = None if finished else encode_cursor("pending", query, positions.to_state())
    return Listing(found, next_cursor, scanned)


def _merged(
    store: Store, shards: Sequence[int], positions: _Positions, page_size: int,
    min_due: int | None, max_due: int | None,
) -> Generator[Listed, None, None]:
    """Entries of every shard in (due, id) order: ZSET order within a shard, merged by a heap.

    ``positions`` is updated before each entry is yielded, so it always points just past the
    last entry the caller received. A shard is refilled only when its next entry is needed.
    """
    buffers: dict[int, deque[PageEntry]] = {}
    more: dict[int, bool] = {}
    heap: list[tuple[int, str, int]] = []

    def fill(shard: int) -> None:
        page = store.page(
            shard, after=positions.after.get(shard), min_due=min_due, max_due=max_due,
            limit=page_size, with_payloads=True,
        )
        if not page.entries:
            positions.done.add(shard)
            return
        buffers[shard] = deque(page.entries)
        more[shard] = page.cursor is not None
        heapq.heappush(heap, (page.entries[0].due_ms, page.entries[0].task_id, shard))

    for shard in shards:
        if shard not in positions.done:
            fill(shard)
    while heap:
        _, _, shard = heapq.heappop(heap)
        entry = buffers[shard].popleft()
        positions.after[shard] = (entry.due_ms, entry.task_id)
        refill = False
        if buffers[shard]:
            head = buffers[shard][0]
            heapq.heappush(heap, (head.due_ms, head.task_id, shard))
        elif more[shard]:
            refill = True
        else:
            positions.done.add(shard)
        yield Listed(shard, entry.task_id, entry.due_ms, entry.payload)
        if refill:
            fill(shard)


def sweep_pending(
    store: Store, act: Callable[[list[Listed]], Iterable[str]], *, shards: Sequence[int] | None = None,
    min_due: int | None = None, max_due: int | None = None, task_name: str | None = None,
) -> Iterator[tuple[int, int]]:
    """Act on every pending entry matching the filters, shard by shard, a page at a time.

    ``act`` returns the ids it removed from ``due`` (cancelled, or gone since the page was read).
    """
    def select(item: Listed) -> bool:
        return task_name is None or item.task_name == task_name

    for shard in sorted(set(range(store.shards) if shards is None else shards)):
        yield from _sweep_shard(store, shard, act, min_due, max_due, task_name, select)


def _sweep_shard(
    store: Store, shard: int, act: Callable[[list[Listed]], Iterable[str]], min_due: int | None,
    max_due: int | None, task_name: str | None, select: Callable[[Listed], bool],
) -> Iterator[tuple[int, int]]:
    def fetch(after: tuple[int, str] | None) -> tuple[list[Listed], bool]:
        page = store.page(shard, after=after, min_due=min_due, max_due=max_due,
                          limit=SCAN_PAGE, with_payloads=task_name is not None)
        entries = [Listed(shard, e.task_id, e.due_ms, e.payload) for e in page.entries]
        return entries, page.cursor is not None

    def act_ids(items: list[Listed]) -> list[tuple[int, str]]:
        removed = set(act(items))
        return [(i.due_ms, i.task_id) for i in items if i.task_id in removed]

    yield from sweep(fetch, lambda i: (i.due_ms, i.task_id), select, act_ids)


# -- acting on pending tasks --------------------------------------------------------------------

MoveStatus = Literal["rescheduled", "not_pending"]


@dataclass(frozen=True)
class Selection:
    """Pending tasks chosen by filters rather than by id (None: no bound)."""

    shards: Sequence[int] | None = None
    min_due: int | None = None
    max_due: int | None = None
    task_name: str | None = None

    def shard_list(self, store: Store) -> list[int]:
        wanted = sorted(set(range(store.shards) if not self.shards else self.shards))
        bad = [s for s in wanted if not 0 <= s < store.shards]
        if bad:
            raise ValueError(f"{bad}: the store has shards 0..{store.shards - 1}")
        return wanted


def show(store: Store, task_id: str, decompress: Decompress | None = None) -> dict[str, Any] | None:
    """The view of one pending or in-flight task (``entry_view``), or None."""
    entry = store.get(task_id)
    return None if entry is None else entry_view(entry, decompress)


def cancel(store: Store, task_ids: Sequence[str], progress: Progress | None = None) -> dict[str, CancelStatus]:
    """Cancel pending tasks by id, a chunk at a time."""
    outcome: dict[str, CancelStatus] = {}
    for chunk in chunks(list(dict.fromkeys(task_ids)), CHUNK):
        outcome.update(store.cancel(chunk))
        if progress is not None:
            progress(len(chunk))
    return outcome


def count_selected(store: Store, selection: Selection) -> int:
    """Pending tasks in the selection's shards and due range (the task name is not counted)."""
    return count_due(store, selection.shard_list(store), selection.min_due, selection.max_due)


def cancel_selected(store: Store, selection: Selection, progress: Progress | None = None) -> dict[str, int]:
    """Cancel every pending task the selection matches; counts of each outcome."""
    counts: dict[str, int] = {}

    def act(items: list[Listed]) -> list[str]:
        for status in store.cancel([i.task_id for i in items]).values():
            counts[status] = counts.get(status, 0) + 1
        return [i.task_id for i in items]  # cancelled, or claimed meanwhile: gone from due either way

    for read, _ in sweep_pending(store, act, shards=selection.shard_list(store), min_due=selection.min_due,
                                 max_due=selection.max_due, task_name=selection.task_name):
        if progress is not None:
            progress(read)
    return counts


def reschedule(store: Store, task_ids: Sequence[str], due_ms: int,
               progress: Progress | None = None) -> dict[str, MoveStatus]:
    """Move pending tasks to ``due_ms``."""
    outcome: dict[str, MoveStatus] = {}
    for task_id in dict.fromkeys(task_ids):
        outcome[task_id] = "rescheduled" if store.reschedule(task_id, due_ms) else "not_pending"
        if progress is not None:
            progress(1)
    return outcome


def run_now(store: Store, task_ids: Sequence[str],
            progress: Progress | None = None) -> tuple[int, dict[str, MoveStatus]]:
    """Make pending tasks due now by Redis time (I5); returns that time and the outcome."""
    when = redis_now_ms(store)
    return when, reschedule(store, task_ids, when, progress)


def reschedule_selected(store: Store, selection: Selection, due_ms: int,
                        progress: Progress | None = None) -> dict[str, int]:
    """Move every pending task the selection matches to ``due_ms``; counts of each outcome.

    Entries already due at ``due_ms`` are left alone, which is also how the walk recognises the
    ones it has just moved there when ``due_ms`` lies ahead of it in the selection.
    """
    counts: dict[str, int] = {}

    def act(items: list[Listed]) -> list[str]:
        calls = [reschedule_call(store.keys, i.shard, i.task_id, due_ms) for i in items]
        moved = [i.task_id for i, done in zip(items, store.scripts.run_many(calls), strict=True) if done]
        if moved:
            counts["rescheduled"] = counts.get("rescheduled", 0) + len(moved)
        if len(moved) < len(items):  # claimed or cancelled since the page was read
            counts["not_pending"] = counts.get("not_pending", 0) + len(items) - len(moved)
        return [i.task_id for i in items]  # moved, or gone: no longer at the key the walk read

    def chosen(name: str | None) -> Callable[[Listed], bool]:
        return lambda i: i.due_ms != due_ms and (name is None or i.task_name == name)

    for shard in selection.shard_list(store):
        for read, _ in _sweep_shard(store, shard, act, selection.min_due, selection.max_due,
                                    selection.task_name, chosen(selection.task_name)):
            if progress is not None:
                progress(read)
    return counts


def run_now_selected(store: Store, selection: Selection,
                     progress: Progress | None = None) -> tuple[int, dict[str, int]]:
    """Make every pending task the selection matches due now by Redis time (I5)."""
    when = redis_now_ms(store)
    return when, reschedule_selected(store, selection, when, progress)

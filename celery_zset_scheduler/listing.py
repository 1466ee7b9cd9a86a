"""Listing pending entries of many shards in due order, a bounded page at a time; bulk sweeps.

``list_pending`` merges the shards' own due-ordered pages (``Store.page``: O(log n + limit) each)
and returns an opaque cursor holding one position per shard, so the next call resumes exactly
where this one stopped. A filter on the message (the task name) cannot be answered by an index,
so a call reads at most ``scan_limit`` entries and returns what matched with a cursor: never a
scan of the whole store in one call (I4).

``sweep`` walks pages and acts on a selection of each (bulk cancel, dead-letter requeue and
purge). It resumes after the last entry it left in place, never after one it removed: a removed
cursor entry would make the next page fall back to "strictly after its score" and skip entries
that share that score.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Collection, Generator, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .codec import decode
from .cursors import InvalidCursor, decode_cursor, encode_cursor
from .errors import PoisonMessage
from .store import PageEntry, Store

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

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


def sweep(
    fetch: Callable[[K | None], tuple[Sequence[T], bool]],
    key: Callable[[T], K],
    select: Callable[[T], bool],
    act: Callable[[list[T]], Iterable[K]],
) -> Iterator[tuple[int, int]]:
    """Act on the selected items of every page; yields ``(read, removed)`` per page.

    ``fetch(after)`` returns a page of items after the cursor ``after`` and whether more may
    follow; ``act`` returns the keys of the items it removed from what ``fetch`` reads.
    """
    cursor: K | None = None
    previous: list[K] | None = None
    while True:
        items, more = fetch(cursor)
        keys = [key(i) for i in items]
        chosen = [i for i in items if select(i)]
        removed = set(act(chosen)) if chosen else set()
        survivors = [k for k in keys if k not in removed]
        if survivors:
            cursor = survivors[-1]
        elif keys and keys == previous:
            raise RuntimeError("bulk operation made no progress: the same page came back after removing it")
        previous = keys
        yield len(items), len(removed)
        if not more or not items:
            return


def sweep_pending(
    store: Store, act: Callable[[list[Listed]], Iterable[str]], *, shards: Sequence[int] | None = None,
    min_due: int | None = None, max_due: int | None = None, task_name: str | None = None,
) -> Iterator[tuple[int, int]]:
    """Act on every pending entry matching the filters, shard by shard, a page at a time.

    ``act`` returns the ids it removed from ``due`` (cancelled, or gone since the page was read).
    """
    for shard in sorted(set(range(store.shards) if shards is None else shards)):

        def fetch(after: tuple[int, str] | None, shard: int = shard) -> tuple[list[Listed], bool]:
            page = store.page(shard, after=after, min_due=min_due, max_due=max_due,
                              limit=SCAN_PAGE, with_payloads=task_name is not None)
            entries = [Listed(shard, e.task_id, e.due_ms, e.payload) for e in page.entries]
            return entries, page.cursor is not None

        def act_ids(items: list[Listed]) -> list[tuple[int, str]]:
            removed = set(act(items))
            return [(i.due_ms, i.task_id) for i in items if i.task_id in removed]

        yield from sweep(
            fetch, lambda i: (i.due_ms, i.task_id),
            lambda i: task_name is None or i.task_name == task_name, act_ids,
        )

"""Acting on every entry of a selection, a bounded page at a time (bulk cancel, requeue, purge).

``sweep`` resumes after the last entry it left in place, never after one it removed: a removed
cursor entry would make the next page fall back to "strictly after its score" and skip entries
that share that score.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

#: Called with how many entries a step went through (a progress bar's ``update``).
Progress = Callable[[int], None]


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


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]

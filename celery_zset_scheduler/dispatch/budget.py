"""The byte budget of one publish call: a pass's entries in calls of at most ``budget`` bytes.

The claim scripts take at most the budget per shard and claim an entry bigger than it alone
(``store/lua/includes/budget.lua``), but one pass hands over every shard's batch at once: a few
big entries on several shards would make one broker call of hundreds of megabytes, and every small
entry of the pass would wait for it. So a pass is published in calls of at most the budget (their
stored sizes), in due order, each entry bigger than the budget in a call of its own after all the
smaller ones of the pass (they are all due already; the big ones wait one call each at most).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def in_budget(items: Sequence[T], budget: int, size: Callable[[T], int]) -> list[list[T]]:
    """``items`` in publish calls: one call when they fit (the common case), else calls of at most
    ``budget`` bytes in order, then each item bigger than ``budget`` alone."""
    sizes = [size(i) for i in items]
    if sum(sizes) <= budget:
        return [list(items)] if items else []
    calls: list[list[T]] = []
    big: list[list[T]] = []
    current: list[T] = []
    used = 0
    for item, n in zip(items, sizes, strict=True):
        if n > budget:
            big.append([item])
            continue
        if current and used + n > budget:
            calls.append(current)
            current, used = [], 0
        current.append(item)
        used += n
    if current:
        calls.append(current)
    return calls + big

"""The publish calls of a pass: at most a batch of entries and ``budget`` bytes each.

A pass hands over every shard's batch, and the hand-off acknowledges each call in the store before
it writes the next (:mod:`.generic`): a call of at most one batch is what a dispatcher paused past
its lease can have published and not acknowledged, whatever the number of shards it leads.

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


def in_budget(items: Sequence[T], budget: int, size: Callable[[T], int], most: int) -> list[list[T]]:
    """``items`` in publish calls: one call when they fit (the common case: one shard's batch),
    else calls of at most ``most`` items and ``budget`` bytes in order, then each item bigger than
    ``budget`` alone."""
    sizes = [size(i) for i in items]
    if len(items) <= most and sum(sizes) <= budget:
        return [list(items)] if items else []
    calls: list[list[T]] = []
    big: list[list[T]] = []
    current: list[T] = []
    used = 0
    for item, n in zip(items, sizes, strict=True):
        if n > budget:
            big.append([item])
            continue
        if current and (used + n > budget or len(current) >= most):
            calls.append(current)
            current, used = [], 0
        current.append(item)
        used += n
    if current:
        calls.append(current)
    return calls + big

"""Retry delays: exponential backoff with full jitter, capped. Pure, so it is tested on its own."""

from __future__ import annotations

import random
from collections.abc import Callable


def backoff_bounds(retries: int, base: float, cap: float) -> tuple[float, float]:
    """The interval the delay before retry number ``retries + 1`` is drawn from."""
    if retries < 0 or base < 0 or cap < 0:
        raise ValueError("retries, base and cap must not be negative")
    # Capped before exponentiating very far, so a huge retry count cannot overflow.
    ceiling = cap if retries >= 64 else min(cap, base * (2.0 ** retries))
    return 0.0, ceiling


def compute_backoff(
    retries: int, *, base: float = 1.0, cap: float = 600.0, jitter: bool = True,
    rand: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds to wait before the next attempt, after ``retries`` earlier retries.

    ``base * 2**retries`` capped at ``cap``; with full jitter the delay is uniform in
    ``[0, that]`` (AWS's "full jitter"), which spreads a thundering herd of retries best.
    """
    low, high = backoff_bounds(retries, base, cap)
    return rand(low, high) if jitter else high

"""Delays: exponential backoff with full jitter, capped. Pure, so it is tested on its own.

One function serves both users: task retries (``RetryPolicy``) and the dispatcher's waits while
Redis or the broker is down (:class:`OutageBackoff`, which only adds a floor so it never spins).
"""

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
    retries: int, *, base: float = 1.0, cap: float = 600.0, jitter: bool = True, floor: float = 0.0,
    rand: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds to wait before the next attempt, after ``retries`` earlier retries.

    ``base * 2**retries`` capped at ``cap``; with full jitter the delay is uniform in
    ``[floor, that]`` (AWS's "full jitter", which spreads a thundering herd best; ``floor`` is 0
    unless a caller must never retry at once).
    """
    low, high = backoff_bounds(retries, base, cap)
    return rand(min(max(low, floor), high), high) if jitter else high


class OutageBackoff:
    """Waits between attempts while an outage lasts: ``compute_backoff`` over the attempts so
    far, never shorter than ``base``."""

    def __init__(self, base: float = 0.1, cap: float = 5.0,
                 rand: Callable[[float, float], float] = random.uniform) -> None:
        self.base, self.cap, self.attempt, self._rand = base, cap, 0, rand

    def next(self) -> float:
        self.attempt += 1
        return compute_backoff(self.attempt, base=self.base, cap=self.cap, floor=self.base, rand=self._rand)

    def reset(self) -> None:
        self.attempt = 0

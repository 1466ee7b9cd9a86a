"""Redis server time: read from ``TIME`` replies, extrapolated between readings with the local
monotonic clock.

Due decisions are made inside Lua with ``TIME`` (I5); the dispatcher only needs Redis time to
turn "due in N ms" into a local sleep and to tell schedulers when it will wake. A host clock that is
hours off changes neither: only differences of the monotonic clock are used.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any


def time_ms(reply: Sequence[Any]) -> int:
    """Milliseconds from a Redis ``TIME`` reply (seconds, microseconds)."""
    return int(reply[0]) * 1000 + int(reply[1]) // 1000


class RedisClock:
    def __init__(self) -> None:
        self._redis_ms = 0
        self._at = 0.0

    def observe(self, redis_ms: int, at: float | None = None) -> None:
        """Record that Redis said ``redis_ms`` at monotonic time ``at`` (default: now)."""
        self._redis_ms = int(redis_ms)
        self._at = time.monotonic() if at is None else at

    def at(self, monotonic: float) -> int:
        """Redis time (ms) at a local monotonic instant."""
        return self._redis_ms + int((monotonic - self._at) * 1000)

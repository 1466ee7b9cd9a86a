"""The dispatch rate a leader announces: tasks it handed to the broker over the last minute,
sampled at every renewal, so nothing extra is written per batch."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

RATE_WINDOW_S = 60.0


class DispatchMeter:
    """Per-shard dispatch counts of one dispatcher, and their rate over a sliding window."""

    def __init__(self, window: float = RATE_WINDOW_S) -> None:
        self.window = window
        self._totals: dict[int, int] = {}
        self._samples: dict[int, deque[tuple[float, int]]] = {}

    def add(self, per_shard: Mapping[int, int]) -> None:
        for shard, count in per_shard.items():
            self._totals[shard] = self._totals.get(shard, 0) + count

    def forget(self, shard: int) -> None:
        self._totals.pop(shard, None)
        self._samples.pop(shard, None)

    def sample(self, shard: int, now: float) -> tuple[int, float]:
        """``(total, tasks per second)`` of ``shard`` at monotonic time ``now``."""
        total = self._totals.get(shard, 0)
        samples = self._samples.setdefault(shard, deque())
        samples.append((now, total))
        while len(samples) > 2 and now - samples[1][0] >= self.window:
            samples.popleft()
        first_at, first_total = samples[0]
        elapsed = now - first_at
        rate = (total - first_total) / elapsed if elapsed > 0 else 0.0
        return total, round(rate, 3)

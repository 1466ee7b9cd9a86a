"""Who leads each shard and how fast it dispatches, for people (``celery zset status``).

A shard's lease (``lock``) holds only a random token. Its leader also keeps a small JSON record
under ``{prefix:s}:leader:<token>`` with the lease's expiry, rewritten with every renewal in the
same pipeline (no extra round trip). Keying the record by token means a leader that has just lost
its lease can never overwrite its successor's record, and a reader trusts a record only while the
lock still holds that token.

The dispatch rate is measured by the leader itself: tasks it handed to the broker over the last
minute, sampled at every renewal. Nothing extra is written per batch.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass

RATE_WINDOW_S = 60.0


@dataclass(frozen=True)
class LeaderRecord:
    member: str  # the dispatcher id (host:pid:random)
    epoch: int  # the fencing epoch of this leadership
    dispatched: int  # tasks this leader handed to the broker since it took the lease
    rate: float  # tasks per second over the last minute (or since it took the lease)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str) -> LeaderRecord | None:
        """The record, or None when it is not one (written by another version)."""
        try:
            data = json.loads(raw)
            return cls(str(data["member"]), int(data["epoch"]), int(data["dispatched"]), float(data["rate"]))
        except (ValueError, TypeError, KeyError):
            return None


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

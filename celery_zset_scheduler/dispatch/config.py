"""The dispatcher's tuning, as read from the ``zset_scheduler_*`` settings."""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import BATCH_BYTES


@dataclass(frozen=True)
class DispatcherConfig:
    batch_size: int = 500
    batch_bytes: int = BATCH_BYTES  # most stored bytes a claim takes and a publish call sends
    lock_timeout: float = 10.0
    max_interval: float = 5.0
    inflight_timeout: float = 30.0
    heartbeat_interval: float = 1.0
    claim_interval: float = 0.002
    backoff_max: float = 5.0
    collect_interval: float = 3600.0  # least time between two collections of a shard's prefixes (0: none)
    collect_values: int = 500  # values one step of a collection scans

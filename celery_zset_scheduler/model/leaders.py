"""Who leads a shard, as its leader announces it for people (``celery zset status``).

A shard's lease (``lock``) holds only a random token. Its leader also keeps this small JSON record
under ``{prefix:s}:leader:<token>`` with the lease's expiry, rewritten with every renewal. Keying the
record by token means a leader that has just lost its lease can never overwrite its successor's
record, and a reader trusts a record only while the lock still holds that token.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


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

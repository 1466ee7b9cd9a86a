"""A store as the version before packed ids (format 4) wrote it: every task id a text member.

The schedule and revoke scripts here are that version's, frozen (``format4/*.lua``, includes
pasted), run as they ran, with the meta hash recording format 4: what a store written by that
version holds when this one first opens it, without a migration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.shared import Shared

_HERE = Path(__file__).parent / "format4"


def _script(name: str) -> str:
    return (_HERE / name).read_text(encoding="utf-8")


@dataclass
class Format4Store:
    """Writes entries and revoke records exactly as format 4 did (one call each, inline values
    or shared prefixes as that version chose)."""

    client: Any
    keys: KeySpace

    def __post_init__(self) -> None:
        self.client.hset(self.keys.meta, mapping={"shards": self.keys.shards, "version": 4})
        self.shared = Shared(self.client, self.keys)

    def schedule(self, task_id: str, due_ms: int, payload: bytes, idempotency_key: str | None = None) -> Any:
        shard = self.keys.shard_of(idempotency_key or task_id)
        sk = self.keys.shard(shard)
        value, write = self.shared.compact(shard, payload)
        if write is not None:
            self.client.hsetnx(*write)
        keys = [sk.due, sk.msg, sk.wake, sk.pending_keys, sk.id_keys, sk.layout]
        args = [self.keys.wake_channel, shard, "0", self.keys.shards,
                task_id, due_ms, value, idempotency_key or ""]
        return self.client.eval(_script("schedule-6.lua"), len(keys), *keys, *args)[0]

    def revoke(self, task_id: str, ttl_ms: int = 60_000, most: int = 1000) -> Any:
        """Revoke in the id's own shard, recording it when not held there (a text record)."""
        sk = self.keys.shard(self.keys.shard_of(task_id))
        keys = [sk.due, sk.msg, sk.inflight, sk.pending_keys, sk.id_keys, sk.revoked, sk.revoked_gen]
        args = [self.keys.revoke_channel, ttl_ms, most, "1", task_id]
        return self.client.eval(_script("revoke-7.lua"), len(keys), *keys, *args)[0]

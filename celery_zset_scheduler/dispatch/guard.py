"""The lease guard of a publish call: each shard's fence checked against the dispatcher's clock
at the moment of hand-off, and the revoke records of the call read (I3, I10)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from operator import attrgetter

from ..store.claims import Fence
from ..store.revokes import changed_since, revoked_among
from .handoff import Built, Env, Outgoing

_SHARD = attrgetter("shard")


class LeaseGuard:
    """The batch's fences, checked against the dispatcher's own clock (and by the publisher, where
    the broker is the store's Redis, inside the transaction that writes the messages)."""

    def __init__(self, env: Env, fences: dict[int, Fence], revoke_gens: dict[int, int] | None = None,
                 counts_read: Mapping[int, int] | None = None) -> None:
        self._env = env
        self._fences = fences
        self._gens = revoke_gens or {}  # shard -> its revoke count at the earliest claim in the batch
        # shard -> its revoke count read after every claim in the batch, while Redis was idle
        # (before a claim was sent ahead, which the check would otherwise wait behind): a revoke
        # since then is held by the worker's record, as one landing between check and write
        self._read = counts_read or {}

    def still_ours(self, shard: int) -> bool:
        return self._env.lease_valid(shard, time.monotonic())

    def fence(self, shard: int) -> Fence:
        return self._fences[shard]

    def lease_keys(self, shard: int) -> tuple[str, str]:
        sk = self._env.claims.keys.shard(shard)
        return sk.lock, sk.epoch

    @property
    def store_client(self) -> object:
        return self._env.claims.store.client

    def revoked(self, batch: Sequence[Outgoing | Built], *, now: bool = False) -> frozenset[int]:
        client, keys = self._env.claims.store.client, self._env.claims.keys
        counts, self._read = ({} if now else self._read), {}  # a read made before serves one check
        shards = set(map(_SHARD, batch))
        read = {s for s in shards if s in counts}
        changed = {s for s in read if counts[s] != self._gens.get(s, -1)}
        if len(read) < len(shards):
            changed |= changed_since(client, keys, {s: self._gens.get(s, -1) for s in shards - read})
        if not changed:  # the ids are gathered only for shards revoked in since the claim
            return frozenset()
        by_shard: dict[int, list[str]] = {s: [] for s in changed}
        for o in batch:
            if o.shard in changed:
                by_shard[o.shard].append(o.task_id)
        found = revoked_among(client, keys, by_shard)
        return frozenset(i for i, o in enumerate(batch) if (o.shard, o.task_id) in found)

    def revoke_key(self, shard: int) -> str:
        return self._env.claims.keys.shard(shard).revoked_gen

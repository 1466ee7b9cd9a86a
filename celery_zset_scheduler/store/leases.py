"""The store's side of leadership: shard leases (token + fencing epoch), the dispatchers'
membership, and the leader records people read. The policy (who should lead what) is in
:mod:`..dispatch.leadership`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model.leaders import LeaderRecord
from .claims import Fence
from .pending import Store
from .scripts import Call, ScriptDef, as_bool, as_int

ACQUIRE = ScriptDef("acquire", ("lock", "epoch", "wake"))
RENEW = ScriptDef("renew", ("lock", "epoch"))
UNLOCK = ScriptDef("unlock", ("lock",))
HEARTBEAT = ScriptDef("heartbeat", ("members",))


@dataclass(frozen=True)
class Membership:
    now_ms: int  # Redis time when the heartbeat ran
    members: list[str]  # live dispatcher ids


def acquire_call(store: Store, shard: int, token: str, ttl_ms: int) -> Call[int]:
    """The new epoch, or 0 when another dispatcher holds the lease."""
    return ACQUIRE.call(store.keys.shard(shard), [token, ttl_ms], as_int)


def renew_call(store: Store, fence: Fence, ttl_ms: int) -> Call[bool]:
    return RENEW.call(store.keys.shard(fence.shard), [fence.token, fence.epoch, ttl_ms], as_bool)


def unlock_call(store: Store, fence: Fence) -> Call[bool]:
    return UNLOCK.call(store.keys.shard(fence.shard), [fence.token], as_bool)


def heartbeat_call(store: Store, member: str, ttl_ms: int, most: int) -> Call[Membership]:
    def parse(reply: Any) -> Membership:
        now_ms, members = reply
        return Membership(int(now_ms), sorted(m.decode() for m in members))

    return HEARTBEAT.call(store.keys, [member, ttl_ms, most], parse)


class Leases:
    """Lease operations of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def heartbeat(self, member: str, ttl_ms: int, most: int) -> Membership:
        return self.store.scripts.run(heartbeat_call(self.store, member, ttl_ms, most))

    def acquire(self, shard: int, token: str, ttl_ms: int) -> int:
        return self.store.scripts.run(acquire_call(self.store, shard, token, ttl_ms))

    def renew(self, fences: Sequence[Fence], ttl_ms: int) -> list[bool]:
        return self.store.scripts.run_many([renew_call(self.store, f, ttl_ms) for f in fences])

    def renew_each(self, fences: Sequence[Fence], ttl_ms: int) -> list[bool | Exception]:
        """Like :meth:`renew`, each lease's outcome on its own: True, False (taken over), or the
        error of its call (its master down, on a cluster)."""
        return self.store.scripts.settle([renew_call(self.store, f, ttl_ms) for f in fences])

    def unlock(self, fence: Fence) -> None:
        self.store.scripts.run(unlock_call(self.store, fence))
        # Ours alone: keyed by our token.
        self.store.client.delete(self.store.keys.shard(fence.shard).leader_info(fence.token))

    def leave(self, member: str) -> None:
        self.store.client.zrem(self.store.keys.members, member)

    def announce(self, records: Mapping[Fence, LeaderRecord], ttl_ms: int) -> None:
        """Write who leads each shard next to its lease, with the same expiry (one round trip)."""
        pipe = self.store.client.pipeline(transaction=False)
        for fence, record in records.items():
            pipe.set(self.store.keys.shard(fence.shard).leader_info(fence.token), record.to_json(), px=ttl_ms)
        pipe.execute()

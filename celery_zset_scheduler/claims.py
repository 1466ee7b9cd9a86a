"""The leader's side of the store: claim due entries, ack published ones, release, reap.

Claim and reap are fenced: they run only while the caller's lease token and epoch are current (I3).
Ack and release are not: a published message must be forgotten whoever leads now (I2). They act
only on an entry still in flight under the claim that returned it (its lease deadline), so both are
safe to run twice, as a lost reply or a replayed pipeline may do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .scripts import execute
from .store import Store


@dataclass(frozen=True)
class Fence:
    """The proof of leadership a claim carries: the lease token and epoch of one shard."""

    shard: int
    token: str
    epoch: int


@dataclass(frozen=True)
class Claimed:
    task_id: str
    due_ms: int
    payload: bytes
    shard: int
    lease_ms: int = 0  # the in-flight score this claim gave it: identifies the claim


@dataclass(frozen=True)
class ClaimResult:
    fenced: bool  # True: the lease was lost, nothing was claimed
    now_ms: int  # the Redis clock when claiming
    next_due_ms: int | None  # earliest entry still pending after this claim
    entries: list[Claimed]


class Claims:
    """Claim/ack/release/reap on top of a :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.scripts = store.scripts

    def claim(self, fence: Fence, limit: int, lease_ms: int, max_wait_ms: int = 5000,
              wake_ttl_ms: int = 15000) -> ClaimResult:
        return self.claim_many([fence], limit, lease_ms, max_wait_ms, wake_ttl_ms)[fence.shard]

    def claim_many(self, fences: Sequence[Fence], limit: int, lease_ms: int, max_wait_ms: int = 5000,
                   wake_ttl_ms: int = 15000, ack: Sequence[Claimed] = (),
                   ) -> dict[int, ClaimResult]:
        """Claim from several shards in one pipelined round trip (one script call per shard).

        ``max_wait_ms``: the caller claims each shard again at its earliest due entry or after
        this long, whichever is first; the script records that in the shard's wake key.
        ``ack``: published ids to ack first, in the same round trip.
        """
        pipe = self.store.client.pipeline(transaction=False)
        acks = self._queue_acks(pipe, ack)
        for fence in fences:
            sk = self.store.keys.shard(fence.shard)
            keys = [sk.due, sk.msg, sk.inflight, sk.lock, sk.epoch, sk.pending_keys, sk.id_keys, sk.wake]
            args = [fence.token, fence.epoch, limit, lease_ms, max_wait_ms, wake_ttl_ms]
            self.scripts.claim(keys, args, client=pipe)
        replies = execute(pipe)[acks:]
        return {fence.shard: _claim_result(fence.shard, reply) for fence, reply in zip(fences, replies, strict=True)}

    def ack(self, entries: Sequence[Claimed]) -> int:
        """Forget published entries (each only while still in flight under its claim)."""
        pipe = self.store.client.pipeline(transaction=False)
        self._queue_acks(pipe, entries)
        return sum(int(n) for n in execute(pipe))

    def _queue_acks(self, pipe: Any, entries: Sequence[Claimed]) -> int:
        queued = 0
        for shard, group in _by_shard(entries).items():
            sk = self.store.keys.shard(shard)
            args: list[Any] = []
            for e in group:
                args += (e.task_id, e.lease_ms)
            self.scripts.ack([sk.inflight, sk.msg, sk.due, sk.pending_keys, sk.id_keys], args, client=pipe)
            queued += 1
        return queued

    def release(self, entries: Sequence[Claimed]) -> int:
        """Put claimed, unpublished entries back in ``due`` at their own due time."""
        pipe = self.store.client.pipeline(transaction=False)
        for shard, group in _by_shard(entries).items():
            sk = self.store.keys.shard(shard)
            args: list[Any] = []
            for e in group:
                args += (e.task_id, e.lease_ms, e.due_ms)
            self.scripts.release([sk.inflight, sk.due], args, client=pipe)
        return sum(int(n) for n in execute(pipe))

    def reap(self, fence: Fence, limit: int) -> list[str] | None:
        """Return expired in-flight entries to ``due``; None when fenced."""
        sk = self.store.keys.shard(fence.shard)
        keys = [sk.inflight, sk.due, sk.msg, sk.lock, sk.epoch]
        reply = self.scripts.reap(keys, [fence.token, fence.epoch, limit])
        if int(reply[0]) == 0:
            return None
        return [i.decode() for i in reply[1]]



def _by_shard(entries: Sequence[Claimed]) -> dict[int, list[Claimed]]:
    grouped: dict[int, list[Claimed]] = {}
    for e in entries:
        grouped.setdefault(e.shard, []).append(e)
    return grouped


def _claim_result(shard: int, reply: Any) -> ClaimResult:
    if int(reply[0]) == 0:
        return ClaimResult(True, 0, None, [])
    _, now, nxt, ids, scores, payloads, deadline = reply
    entries = [
        Claimed(i.decode(), int(float(s)), p, shard, int(deadline))
        for i, s, p in zip(ids, scores, payloads, strict=True)
    ]
    next_due = int(float(nxt))
    return ClaimResult(False, int(now), None if next_due < 0 else next_due, entries)

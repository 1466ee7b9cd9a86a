"""The claim that also builds envelopes: for a Redis broker on another server or database.

``claim_built`` claims a shard's due entries exactly as ``claim`` does (in flight with a lease,
forgotten by the ack after they are published) and returns, for each entry the fast path's Lua
builder can rebuild exactly, Kombu's envelope in place of the stored message, with the number of
the broker list it goes to in the caller's :class:`BuiltTable`. The caller only forwards those
bytes (LPUSH on the broker) and acks; the rest come back as stored, for the Python path.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..model.keys import KeySpace
from ..settings import BATCH_BYTES
from .claims import CLAIM, Claimed, ClaimPass, ClaimResult, Fence, expand_claimed, parse_claim, replica_arg
from .scripts import Call, ScriptDef
from .shared import Shared

#: Reads the replies of a claim sent ahead; returns the function that parses them.
ReceiveClaim = Callable[[], Callable[[], ClaimPass]]

CLAIM_BUILT = ScriptDef("claim_built", (*CLAIM.keys, "shared", "shared_old", "shared_grave"))


@dataclass(frozen=True)
class BuiltTable:
    """The route table of the script (JSON, as fast_push's, with list numbers instead of KEYS
    indexes and no exchanges) and the broker lists it numbers (list ``n`` is ``lists[n - 1]``,
    without the client's ``global_keyprefix``)."""

    table: str
    lists: tuple[str, ...]


def claim_built_call(keys: KeySpace, fence: Fence, table: BuiltTable, *, limit: int, lease_ms: int,
                     max_wait_ms: int, wake_ttl_ms: int, shared: Shared | None = None,
                     budget: int = BATCH_BYTES, replicas: int = 0) -> Call[ClaimResult]:
    def parse(reply: Any) -> ClaimResult:
        return parse_claim(reply, fence.shard, shared)

    args = [fence.token, fence.epoch, limit, lease_ms, max_wait_ms, wake_ttl_ms, table.table, str(uuid.uuid4())[:24],
            budget, *replica_arg(replicas)]
    return CLAIM_BUILT.call(keys.shard(fence.shard), args, parse)


def claim_built_many(claims: Any, fences: Sequence[Fence], table: BuiltTable, *, limit: int, lease_ms: int,
                     max_wait_ms: int, wake_ttl_ms: int, ack: Sequence[Claimed] = ()) -> ClaimPass:
    """As :meth:`.claims.Claims.claim_many`, with envelopes built where the script can."""
    calls = _calls(claims, fences, table, limit=limit, lease_ms=lease_ms, max_wait_ms=max_wait_ms,
                   wake_ttl_ms=wake_ttl_ms)
    return _claim_pass(claims, fences, *claims.settle_after_acks(ack, calls))


def claim_built_ahead(claims: Any, fences: Sequence[Fence], table: BuiltTable, *, limit: int, lease_ms: int,
                      max_wait_ms: int, wake_ttl_ms: int,
                      ack: Sequence[Claimed] = ()) -> ReceiveClaim | None:
    """As :func:`claim_built_many`, sent now (the caller works while the scripts run). The function
    returned reads the replies and returns one that parses them into the :class:`ClaimPass`
    (the caller may send its next claim between the two). None where it cannot be sent ahead
    (a cluster): nothing was sent."""
    calls = _calls(claims, fences, table, limit=limit, lease_ms=lease_ms, max_wait_ms=max_wait_ms,
                   wake_ttl_ms=wake_ttl_ms)
    receive = claims.begin_after_acks(ack, calls)
    if receive is None:
        return None

    def received() -> Callable[[], ClaimPass]:
        parse = receive()
        return lambda: _claim_pass(claims, fences, *parse())

    return received


def _calls(claims: Any, fences: Sequence[Fence], table: BuiltTable, *, limit: int, lease_ms: int,
           max_wait_ms: int, wake_ttl_ms: int) -> list[Call[ClaimResult]]:
    shared = claims.store.shared
    return [claim_built_call(claims.keys, f, table, limit=limit, lease_ms=lease_ms, max_wait_ms=max_wait_ms,
                             wake_ttl_ms=wake_ttl_ms, shared=shared, budget=claims.budget,
                             replicas=claims.replicas) for f in fences]


def _claim_pass(claims: Any, fences: Sequence[Fence], replies: list[Any], unacked: list[Claimed]) -> ClaimPass:
    results = {fence.shard: reply for fence, reply in zip(fences, replies, strict=True)}
    expand_claimed(claims.store.shared, results)
    return ClaimPass(results, unacked)

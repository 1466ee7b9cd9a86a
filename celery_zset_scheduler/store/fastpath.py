"""The same-Redis fast path's script: due entries straight into the broker's queue lists.

``fast_push`` takes a shard's due entries as the claim does (fenced, by Redis time) and, for each
entry it can rebuild exactly, LPUSHes Kombu's envelope to the queue lists of the route table and
forgets the entry, in the same script: an entry is in the store or in the queue, never in both
and never in neither. The entries it leaves to the generic path come back claimed (in flight with a
lease), exactly as the claim script returns them, with what the hand-off needs to plan.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..model.ids import task_id_of
from ..model.keys import KeySpace
from ..settings import BATCH_BYTES
from .claims import Claimed, ClaimResult, Fence, expand_claimed, replica_arg
from .scripts import Call, ScriptDef
from .shared import Shared
from .values import split

FAST_PUSH = ScriptDef(
    "fast_push",
    ("due", "msg", "inflight", "lock", "epoch", "pending_keys", "id_keys", "wake", "revoked", "revoked_gen",
     "shared", "shared_old", "shared_grave", "big"),
    variadic=True,
)


@dataclass(frozen=True)
class Routes:
    """What the script may write to: the broker's keys (queue lists, binding sets) and the table
    (JSON, see the script's header) that names them by position after the shard's own keys."""

    keys: tuple[str, ...]
    table: str


@dataclass(frozen=True)
class FastResult:
    """A claim result (``entries``: the ones left to the generic path, in flight) plus what the
    script pushed: the due times of the pushed entries, and the due range of all it took."""

    claim: ClaimResult
    pushed_due_ms: list[int]
    first_due_ms: int | None
    last_due_ms: int | None

    @property
    def taken(self) -> int:
        return len(self.pushed_due_ms) + len(self.claim.entries)


def fast_push_call(keys: KeySpace, fence: Fence, routes: Routes, *, limit: int, lease_ms: int,
                   max_wait_ms: int, wake_ttl_ms: int, shared: Shared | None = None,
                   budget: int = BATCH_BYTES, replicas: int = 0) -> Call[FastResult]:
    def parse(reply: Any) -> FastResult:
        if int(reply[0]) == 0:
            return FastResult(ClaimResult(True, 0, None, []), [], None, None)
        _, now, nxt, ids, scores, payloads, deadline, orphans, revoked, gen, pushed, first, last = reply
        entries = []
        for i, s, value in zip(ids, scores, payloads, strict=True):
            arrival, payload = split(value)
            if shared is not None and payload[:1] == b"\x02":  # refers to a shared prefix: put it back
                payload = shared.expand(payload) or payload
            entries.append(Claimed(task_id_of(i), int(float(s)), payload, fence.shard, int(deadline), arrival,
                                   int(gen), i))
        next_due = int(float(nxt))
        claim = ClaimResult(False, int(now), None if next_due < 0 else next_due, entries,
                            [task_id_of(o) for o in orphans], [task_id_of(r) for r in revoked], int(gen))
        first_ms, last_ms = int(first), int(last)
        return FastResult(claim, [int(p) for p in pushed], None if first_ms < 0 else first_ms,
                          None if last_ms < 0 else last_ms)

    args = [fence.token, fence.epoch, limit, lease_ms, max_wait_ms, wake_ttl_ms, routes.table, str(uuid.uuid4())[:24],
            budget, *replica_arg(replicas)]
    return FAST_PUSH.call_extended(keys.shard(fence.shard), routes.keys, args, parse)


def fast_push_many(claims: Any, fences: Sequence[Fence], routes: Routes, *, limit: int, lease_ms: int,
                   max_wait_ms: int, wake_ttl_ms: int, ack: Sequence[Claimed] = ()
                   ) -> tuple[dict[int, FastResult | Exception], list[Claimed]]:
    """Every shard's fast push in one round trip, after the acks of earlier generic publishes;
    per shard its result or its error, and the acks that failed (to be sent again)."""
    shared = claims.store.shared
    calls = [fast_push_call(claims.keys, f, routes, limit=limit, lease_ms=lease_ms, max_wait_ms=max_wait_ms,
                            wake_ttl_ms=wake_ttl_ms, shared=shared, budget=claims.budget,
                            replicas=claims.replicas) for f in fences]
    replies, unacked = claims.settle_after_acks(ack, calls)
    results = {fence.shard: reply for fence, reply in zip(fences, replies, strict=True)}
    claimed = {s: r.claim for s, r in results.items() if isinstance(r, FastResult)}
    expand_claimed(shared, claimed)
    for shard, claim in claimed.items():
        result = results[shard]
        if isinstance(result, FastResult) and claim is not result.claim:
            results[shard] = replace(result, claim=claim)
    return results, unacked

"""The leader's side of the store: claim due entries, ack published ones, release, reap.

Claim and reap are fenced: they run only while the caller's lease token and epoch are current (I3).
Ack and release are not: a published message must be forgotten whoever leads now (I2). They act
only on an entry still in flight under the claim that returned it (its lease deadline), so both are
safe to run twice, as a lost reply or a replayed pipeline may do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import groupby, repeat
from operator import attrgetter
from typing import Any, NamedTuple

from ..model.ids import member, task_id_of, task_ids_of
from ..model.keys import KeySpace
from ..settings import BATCH_BYTES
from .pending import Store
from .scripts import Call, ScriptDef, as_int
from .shared import Shared
from .values import UNSTAMPED, Arrival, arrivals_of, messages_of, split_all

CLAIM = ScriptDef(
    "claim",
    ("due", "msg", "inflight", "lock", "epoch", "pending_keys", "id_keys", "wake", "revoked", "revoked_gen", "big"),
)
ACK = ScriptDef("ack", ("inflight", "msg", "due", "pending_keys", "id_keys", "big"))
RELEASE = ScriptDef("release", ("inflight", "due"))
REAP = ScriptDef("reap", ("inflight", "due", "msg", "lock", "epoch"))


@dataclass(frozen=True)
class Fence:
    """The proof of leadership a claim carries: the lease token and epoch of one shard."""

    shard: int
    token: str
    epoch: int


class Claimed(NamedTuple):
    """A claimed entry (a named tuple: one is made per entry claimed, a frozen dataclass costs
    several times as much to make)."""

    task_id: str
    due_ms: int
    payload: bytes  # the encoded message (its arrival stamp taken off)
    shard: int
    lease_ms: int = 0  # the in-flight score this claim gave it: identifies the claim
    arrival: Arrival = UNSTAMPED  # when it reached the store: orders entries due at the same instant
    revoke_gen: int = 0  # the shard's revoke count when claimed: revokes since then change it
    #: the member as read (model/ids.py): ack and release act on it, not on the id packed again,
    #: so an entry an older version wrote (its UUID as text) is acked as it is stored
    stored_as: bytes | str = ""
    #: not 0: ``payload`` is the envelope the claim script built, for the broker list of this
    #: number in the caller's table (store/built.py); 0: ``payload`` is the stored message
    built_for: int = 0

    @property
    def member(self) -> bytes | str:
        return self.stored_as or member(self.task_id)

    @property
    def order(self) -> tuple[int, Arrival]:
        """Hand-off order: due time, then arrival."""
        return self.due_ms, self.arrival


@dataclass(frozen=True)
class ClaimResult:
    fenced: bool  # True: the lease was lost, nothing was claimed
    now_ms: int  # the Redis clock when claiming
    next_due_ms: int | None  # earliest entry still pending after this claim
    entries: list[Claimed]
    orphans: list[str] = field(default_factory=list)  # due ids without a message, dropped from due
    revoked: list[str] = field(default_factory=list)  # due ids with a revoke record, dropped from due
    revoke_gen: int = 0  # the shard's revoke count at the claim


@dataclass(frozen=True)
class ClaimPass:
    """What one round trip of claims did: per shard a result or the error its call met, and the
    acks sent with it that failed (to be sent again)."""

    results: dict[int, ClaimResult | Exception]
    unacked: list[Claimed]


_SHARD, _LEASE = attrgetter("shard"), attrgetter("lease_ms")


def replica_arg(replicas: int) -> list[int]:
    """The hand-off scripts' last argument: left out when no replica is required."""
    return [replicas] if replicas > 0 else []
#: A Claimed from the tuple of its fields, without a Python call (its generated ``__new__`` is one).
_new_claimed = partial(tuple.__new__, Claimed)


def claim_call(keys: KeySpace, fence: Fence, *, limit: int, lease_ms: int, max_wait_ms: int,
               wake_ttl_ms: int, shared: Shared | None = None, budget: int = BATCH_BYTES,
               replicas: int = 0) -> Call[ClaimResult]:
    """``max_wait_ms``: the leader claims again at the earliest due entry or after this long,
    whichever is first; the script records that instant in the shard's wake key. ``budget``: the
    most stored bytes one claim takes (an entry bigger than it is claimed alone). ``replicas``:
    the replicas in sync the master must have, else the call fails and claims nothing."""

    def parse(reply: Any) -> ClaimResult:
        return parse_claim(reply, fence.shard, shared)

    args = [fence.token, fence.epoch, limit, lease_ms, max_wait_ms, wake_ttl_ms, budget, *replica_arg(replicas)]
    return CLAIM.call(keys.shard(fence.shard), args, parse)


def parse_claim(reply: Any, shard: int, shared: Shared | None) -> ClaimResult:
    """A claim script's reply; an 11th element (claim_built's) numbers the entries built, a 12th
    holds the stamps of all (its scores and numbers may come as one comma-separated string each:
    store/lua/claim_built-14.lua). Made column by column, each entry's named tuple in C (a claim
    returns up to a batch of entries)."""
    if int(reply[0]) == 0:
        return ClaimResult(True, 0, None, [])
    _, now, nxt, ids, scores, values, deadline, orphans, revoked, gen = reply[:10]
    if type(scores) is bytes:  # claim_built's: one string
        scores = scores.split(b",") if scores else []
    if not len(ids) == len(scores) == len(values):
        raise ValueError(f"a claim reply of {len(ids)} ids, {len(scores)} scores and {len(values)} values")
    targets = reply[10] if len(reply) > 10 else [0] * len(ids)
    if type(targets) is bytes:
        targets = list(map(int, targets.split(b","))) if targets else []
    if len(targets) != len(ids):
        raise ValueError(f"a claim reply of {len(ids)} ids and {len(targets)} list numbers")
    if len(reply) > 11:  # claim_built's stamps, one string: its envelopes carry none
        arrivals, payloads = arrivals_of(reply[11], len(ids)), messages_of(values)
    else:
        arrivals, payloads = split_all(values)
    if shared is not None and any(p[:1] == b"\x02" for p in payloads):  # a shared prefix: put it back
        expand = shared.expand
        payloads = [(expand(p) or p) if t == 0 and p[:1] == b"\x02" else p
                    for p, t in zip(payloads, targets, strict=True)]
    try:
        dues = list(map(int, scores))
    except ValueError:  # a score Redis wrote as a float
        dues = [int(s) if s.isdigit() else int(float(s)) for s in scores]
    lease, generation = int(deadline), int(gen)
    entries = list(map(_new_claimed, zip(task_ids_of(ids), dues, payloads, repeat(shard), repeat(lease),
                                         arrivals, repeat(generation), ids, targets)))
    next_due = int(float(nxt))
    return ClaimResult(False, int(now), None if next_due < 0 else next_due, entries,
                       [task_id_of(o) for o in orphans], [task_id_of(r) for r in revoked], generation)


def ack_call(keys: KeySpace, shard: int, entries: Sequence[Claimed]) -> Call[int]:
    # Each lease's text made once (a few claims in a batch), each member read without a call.
    leases = {n: b"%d" % n for n in set(map(_LEASE, entries))}
    args: list[Any] = [a for e in entries for a in (e.stored_as or member(e.task_id), leases[e.lease_ms])]
    return ACK.call(keys.shard(shard), args, as_int)


def release_call(keys: KeySpace, shard: int, entries: Sequence[Claimed]) -> Call[int]:
    args: list[Any] = []
    for e in entries:
        args += (e.member, e.lease_ms, e.due_ms)
    return RELEASE.call(keys.shard(shard), args, as_int)


def reap_call(keys: KeySpace, fence: Fence, limit: int) -> Call[list[str] | None]:
    def parse(reply: Any) -> list[str] | None:
        return None if int(reply[0]) == 0 else [task_id_of(i) for i in reply[1]]

    return REAP.call(keys.shard(fence.shard), [fence.token, fence.epoch, limit], parse)


#: Reads the replies of calls sent ahead; returns the function that parses them.
Receive = Callable[[], Callable[[], tuple[list[Any], list["Claimed"]]]]


class Claims:
    """Claim/ack/release/reap on top of a :class:`Store`."""

    def __init__(self, store: Store, budget: int = BATCH_BYTES) -> None:
        self.store = store
        self.scripts = store.scripts
        self.budget = budget  # the most stored bytes one claim takes
        # zset_scheduler_wait_replicas: what a schedule waits for, a hand-off requires in sync
        wait: tuple[int, int] | None = getattr(store.scripts, "wait", None)
        self.replicas = wait[0] if wait else 0

    @property
    def keys(self) -> KeySpace:
        """The store's keys now (they change when the store follows a reshard)."""
        return self.store.keys

    def claim_many(self, fences: Sequence[Fence], limit: int, lease_ms: int, max_wait_ms: int = 5000,
                   wake_ttl_ms: int = 15000, ack: Sequence[Claimed] = ()) -> ClaimPass:
        """Claim from several shards in one pipelined round trip (one script call per shard);
        ``ack``: published entries to ack first, in the same round trip.

        Each shard's outcome stands on its own: an error of one call (a full store refusing a
        write, a busy script) is that shard's result, and never discards what the others claimed.
        """
        claims = [claim_call(self.keys, f, limit=limit, lease_ms=lease_ms, max_wait_ms=max_wait_ms,
                             wake_ttl_ms=wake_ttl_ms, shared=self.store.shared, budget=self.budget,
                             replicas=self.replicas) for f in fences]
        replies, unacked = self.settle_after_acks(ack, claims)
        results = {fence.shard: reply for fence, reply in zip(fences, replies, strict=True)}
        expand_claimed(self.store.shared, results)
        return ClaimPass(results, unacked)

    def settle_after_acks(self, ack: Sequence[Claimed], calls: Sequence[Call[Any]]) -> tuple[list[Any], list[Claimed]]:
        """``calls`` in one round trip after the acks of ``ack``: their replies (an error as the
        reply of its own call), and the entries whose ack failed (to be sent again)."""
        groups, acks = self._acks(ack)
        return _after_acks(groups, len(acks), self.scripts.settle([*acks, *calls]))

    def begin_after_acks(self, ack: Sequence[Claimed], calls: Sequence[Call[Any]]) -> Receive | None:
        """As :meth:`settle_after_acks`, sent now. The function returned reads the replies and
        returns one that parses them into what that returns. None where the calls cannot be sent
        ahead (see :meth:`.scripts.Scripts.begin`): nothing was sent."""
        groups, acks = self._acks(ack)
        pending = self.scripts.begin([*acks, *calls])
        if pending is None:
            return None

        def receive() -> Callable[[], tuple[list[Any], list[Claimed]]]:
            parse = pending.received()
            return lambda: _after_acks(groups, len(acks), parse())

        return receive

    def _acks(self, ack: Sequence[Claimed]) -> tuple[list[tuple[int, list[Claimed]]], list[Call[Any]]]:
        groups = list(_by_shard(ack).items())
        return groups, [ack_call(self.keys, s, group) for s, group in groups]

    def ack(self, entries: Sequence[Claimed]) -> int:
        """Forget published entries (each only while still in flight under its claim)."""
        calls = [ack_call(self.keys, s, group) for s, group in _by_shard(entries).items()]
        return sum(self.scripts.run_many(calls))

    def ack_each(self, entries: Sequence[Claimed]) -> list[Claimed]:
        """Ack shard by shard; returns the entries whose shard's ack failed (to ack later)."""
        return self._each(entries, ack_call)

    def release_each(self, entries: Sequence[Claimed]) -> list[Claimed]:
        """Release shard by shard; returns the entries whose shard's release failed."""
        return self._each(entries, release_call)

    def _each(self, entries: Sequence[Claimed], make: Any) -> list[Claimed]:
        groups = list(_by_shard(entries).items())
        replies = self.scripts.settle([make(self.keys, s, group) for s, group in groups])
        return [e for (_, group), r in zip(groups, replies, strict=True) if isinstance(r, Exception) for e in group]

    def release(self, entries: Sequence[Claimed]) -> int:
        """Put claimed, unpublished entries back in ``due`` at their own due time."""
        calls = [release_call(self.keys, s, group) for s, group in _by_shard(entries).items()]
        return sum(self.scripts.run_many(calls))

    def reap(self, fence: Fence, limit: int) -> list[str] | None:
        """Return expired in-flight entries to ``due``; None when fenced."""
        return self.scripts.run(reap_call(self.keys, fence, limit))


def _after_acks(groups: list[tuple[int, list[Claimed]]], acks: int,
                replies: list[Any]) -> tuple[list[Any], list[Claimed]]:
    """The replies after the first ``acks`` (those of the ack calls, one a group), and the entries
    whose ack failed."""
    unacked = [e for (_, group), r in zip(groups, replies, strict=False) if isinstance(r, Exception) for e in group]
    return replies[acks:], unacked


def expand_claimed(shared: Shared, results: dict[int, Any]) -> None:
    """Put the shared prefix back into the claimed values the cache could not expand while
    parsing (one more round trip, only for prefixes this process has not read yet): each
    :class:`ClaimResult` of ``results`` holding such a value is replaced by an expanded one."""
    wanted = [(e.shard, e.payload) for r in results.values() if isinstance(r, ClaimResult)
              for e in r.entries if e.payload[:1] == b"\x02" and not e.built_for]
    if not wanted:
        return
    shared.load(wanted)
    for shard, result in list(results.items()):
        if isinstance(result, ClaimResult) and any(e.payload[:1] == b"\x02" and not e.built_for
                                                   for e in result.entries):
            entries = [e if e.payload[:1] != b"\x02" or e.built_for
                       else e._replace(payload=shared.expand(e.payload) or e.payload) for e in result.entries]
            results[shard] = replace(result, entries=entries)


def _by_shard(entries: Sequence[Claimed]) -> dict[int, list[Claimed]]:
    """The entries of each shard, in their order (a stable sort and grouping: in C)."""
    if len(set(map(_SHARD, entries))) <= 1:
        return {entries[0].shard: list(entries)} if entries else {}
    return {shard: list(group) for shard, group in groupby(sorted(entries, key=_SHARD), key=_SHARD)}

"""Durable revokes (I10): cancel what is pending, record what is not, read the records back.

A revoke of an id the store holds as pending cancels the entry and leaves nothing behind. Any other
id (in flight, already handed to the broker, running, or unknown) gets a record in a shard's
``revoked`` ZSET (id -> expiry in Redis ms), kept ``ttl`` and capped per shard, and announced on
the revoke channel. The claim script drops a due entry with a record, the hand-off checks the
records of what it holds at the moment it publishes (:func:`revoked_since`), and the worker side
loads every shard's records (:func:`load`) and follows the channel (:func:`parse_announcement`).

Where a record goes: to the shard where the id is in flight, else the id's own shard. An entry
scheduled under an idempotency key lives in the key's shard; its id is looked for there too, as
:meth:`Store.cancel` does.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..model.ids import forms, member, task_id_of
from ..model.keys import KeySpace, storable
from .client import is_cluster
from .pending import CHUNK, Store
from .scripts import Call, ScriptDef

REVOKE = ScriptDef(
    "revoke", ("due", "msg", "inflight", "pending_keys", "id_keys", "revoked", "revoked_gen", "big"),
)

#: ``cancelled``: was pending, removed; ``inflight``: was being published, removed and recorded;
#: ``recorded``: not in the store (handed to the broker, running, or unknown), recorded.
RevokeStatus = Literal["cancelled", "inflight", "recorded"]

_CODES: dict[int, str] = {1: "cancelled", 2: "cancelled", -1: "inflight", 3: "recorded", 0: "unknown"}


@dataclass(frozen=True)
class RevokeOutcome:
    status: dict[str, RevokeStatus]
    #: the ids that were pending or in flight: they will never run (their result state can say so)
    stopped: list[str]


@dataclass(frozen=True)
class Records:
    """Every live revoke record of the store, read at one Redis time."""

    now_ms: int
    expiries: dict[str, int]  # id -> expiry (Redis ms)


def revoke_call(keys: KeySpace, shard: int, ids: Sequence[str], *, ttl_ms: int, most: int,
                record_unknown: bool) -> Call[dict[str, tuple[str, bool]]]:
    """``{id: (what the shard held, whether it was recorded)}``."""
    def parse(replies: Any) -> dict[str, tuple[str, bool]]:
        return {i: (_CODES[int(r)], int(r) in (2, -1, 3)) for i, r in zip(ids, replies, strict=True)}

    args = [keys.revoke_channel, ttl_ms, most, "1" if record_unknown else "0", *(member(i) for i in ids)]
    return REVOKE.call(keys.shard(shard), args, parse)


class Revokes:
    """Revoking through one store, with records kept ``ttl`` seconds, at most ``most`` in all."""

    def __init__(self, store: Store, ttl: float, most: int) -> None:
        self.store = store
        self.ttl_ms = max(1, int(ttl * 1000))
        self.per_shard = max(1, math.ceil(most / store.shards))

    @property
    def keys(self) -> KeySpace:
        """The store's keys now (they change when the store follows a reshard)."""
        return self.store.keys

    def revoke(self, task_ids: Iterable[str]) -> RevokeOutcome:
        """Cancel pending ids, record the others: the id's own shard first, then (for ids it does
        not hold) every other shard, where entries scheduled under an idempotency key live; an id
        found nowhere is recorded in its own shard. At most three round trips."""
        # An id with no UTF-8 form can be neither stored nor recorded: only the broadcast reaches it.
        ids = [i for i in dict.fromkeys(str(t) for t in task_ids) if storable(i)]
        found: dict[str, tuple[str, bool]] = {}
        single = self.store.shards == 1
        own: dict[int, list[str]] = defaultdict(list)
        for task_id in ids:
            own[self.keys.shard_of(task_id)].append(task_id)
        found.update(self._run(own, record_unknown=single))
        missing = [i for i in ids if found[i][0] == "unknown"]
        if missing and not single:
            elsewhere = {s: [i for i in missing if self.keys.shard_of(i) != s] for s in range(self.store.shards)}
            for task_id, outcome in self._run(elsewhere, record_unknown=False).items():
                if outcome[0] != "unknown":
                    found[task_id] = outcome
            nowhere: dict[int, list[str]] = defaultdict(list)
            for task_id in missing:
                if found[task_id][0] == "unknown":
                    nowhere[self.keys.shard_of(task_id)].append(task_id)
            found.update(self._run(nowhere, record_unknown=True))
        status: dict[str, RevokeStatus] = {}
        for task_id in ids:
            held = found[task_id][0]
            status[task_id] = "recorded" if held == "unknown" else held  # type: ignore[assignment]
        return RevokeOutcome(status, [i for i in ids if status[i] in ("cancelled", "inflight")])

    def _run(self, by_shard: dict[int, list[str]], *, record_unknown: bool) -> dict[str, tuple[str, bool]]:
        calls = [
            revoke_call(self.keys, shard, ids[start:start + CHUNK], ttl_ms=self.ttl_ms, most=self.per_shard,
                        record_unknown=record_unknown)
            for shard, ids in by_shard.items() if ids for start in range(0, len(ids), CHUNK)
        ]
        out: dict[str, tuple[str, bool]] = {}
        for reply in self.store.scripts.run_many(calls):
            out.update(reply)
        return out


def load(client: Any, keys: KeySpace) -> Records:
    """Every live record of every shard, in one round trip (a bounded read: records are capped)."""
    pipe = client.pipeline(transaction=False)
    clock = client.time() if is_cluster(client) else None  # a cluster pipeline takes keyed commands only
    if clock is None:
        pipe.time()
    for shard in range(keys.span):
        pipe.zrange(keys.shard(shard).revoked, "(0", "+inf", byscore=True, withscores=True)
    replies = pipe.execute()
    now, *per_shard = replies if clock is None else [clock, *replies]
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    expiries: dict[str, int] = {}
    for records in per_shard:
        for stored, score in records:
            expiry = int(score)
            if expiry > now_ms:
                task_id = task_id_of(stored)
                expiries[task_id] = max(expiry, expiries.get(task_id, 0))
    return Records(now_ms, expiries)


def revoked_since(client: Any, keys: KeySpace, claimed: dict[int, tuple[int, list[str]]]) -> set[tuple[int, str]]:
    """``(shard, id)`` of ids revoked since their claim, read now. ``claimed``: shard -> (its revoke
    count at the claim, the ids). One small round trip reads every shard's count; the records of
    a shard are read (a second one) only when its count changed since the claim."""
    changed = changed_since(client, keys, {s: gen for s, (gen, ids) in claimed.items() if ids})
    return revoked_among(client, keys, {s: claimed[s][1] for s in changed})


def changed_since(client: Any, keys: KeySpace, counts: dict[int, int]) -> set[int]:
    """The shards of ``counts`` (shard -> its revoke count at a claim) revoked in since: their
    count is another now (one round trip)."""
    now = revoke_counts(client, keys, list(counts))
    return {s for s, count in now.items() if count != counts[s]}


def revoke_counts(client: Any, keys: KeySpace, shards: Sequence[int]) -> dict[int, int]:
    """Each shard's revoke count now (one round trip; none for no shard)."""
    if not shards:
        return {}
    pipe = client.pipeline(transaction=False)  # GETs, not an MGET: one slot a shard on a cluster
    for shard in shards:
        pipe.get(keys.shard(shard).revoked_gen)
    return {s: int(count or 0) for s, count in zip(shards, pipe.execute(), strict=True)}


def revoked_among(client: Any, keys: KeySpace, ids_by_shard: dict[int, list[str]]) -> set[tuple[int, str]]:
    """``(shard, id)`` of the given ids that have a revoke record in their shard, read now (one
    round trip)."""
    shards = [(s, ids) for s, ids in ids_by_shard.items() if ids]
    if not shards:
        return set()
    pipe = client.pipeline(transaction=False)
    asked: list[tuple[int, list[str]]] = []
    for shard, ids in shards:
        # a record may be under either form of a UUID: the packed one, or the text an older version wrote
        named = [i for task_id in ids for i in [task_id] * len(forms(task_id))]
        pipe.zmscore(keys.shard(shard).revoked, [f for task_id in ids for f in forms(task_id)])
        asked.append((shard, named))
    found: set[tuple[int, str]] = set()
    for (shard, named), scores in zip(asked, pipe.execute(), strict=True):
        found.update((shard, i) for i, score in zip(named, scores, strict=True) if score is not None)
    return found


def parse_announcement(data: bytes | str) -> tuple[float, list[str]]:
    """``(ttl in seconds, ids)`` of a message on the revoke channel; ValueError when malformed."""
    decoded = json.loads(data)
    if not (isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[1], list)):
        raise ValueError(f"not a revoke announcement: {data!r}")
    return float(decoded[0]) / 1000.0, [str(i) for i in decoded[1]]

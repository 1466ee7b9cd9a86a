"""Every Redis key and channel name the project uses, in one place.

Each shard's keys share the hash tag ``{prefix:shard}``, so one shard lives in one Redis Cluster
slot and every per-shard Lua script touches a single slot. Keys that are not per shard carry their
own hash tag so that the scripts working on them are single-slot too.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cached_property

from ..errors import InvalidId

# Bumped when the layout or the stored payload format changes incompatibly; kept in the meta hash.
# 2: the codec's positional meta line followed by the raw body (1 was one JSON object).
# 3: each stored value starts with an arrival stamp (store/values.py); format-2 values still read.
# 4: the codec's layout 4 (shared values first) and values that refer to a shard's shared values
#    (store/shared.py); format-2 and -3 values still read.
# 5: canonical UUID task ids stored as 17-byte members (model/ids.py); the text members of
#    formats 2-4 still read, cancel, revoke and move as they are.
# 6: the codec's layout 5 (a simple call keeps only its arguments' text); the layout-4 and -2
#    values of formats 2-5 still read. A client of format 5 refuses the store from then on.
# 7: a shared prefix may wait in `shared_old` or `shared_grave` while a collection runs
#    (store/shared_gc.py); nothing stored changes. A client of format 6 reads only `shared`, so
#    it refuses the store from then on.
FORMAT_VERSION = 7
#: The previous formats, whose stores this version reads and upgrades on first use.
UPGRADES_FROM = (6, 5, 4, 3, 2)
#: The first format that stored canonical UUIDs packed: a store recorded with an older one (or
#: upgraded from one) may hold them as text.
PACKED_IDS_SINCE = 5


def check_storable(text: str, what: str = "task id") -> None:
    """Refuse an id or key Redis cannot hold (it must encode as UTF-8), naming it and why."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidId(
            f"{what} {text!r} cannot be stored: {text[exc.start]!r} at position {exc.start} is a lone "
            "surrogate, which has no UTF-8 form (was it decoded from bytes with errors='surrogateescape'?)"
        ) from None


def storable(text: str) -> bool:
    """Whether ``text`` can be a Redis key or member: an id that is not can never be stored."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class ShardKeys:
    """The keys of one shard, in the order the Lua scripts receive them."""

    shard: int
    due: str  # ZSET id -> due time (ms)
    msg: str  # HASH id -> encoded message
    big: str  # HASH id -> 1 for a `msg` value over 64 KB: the claim sizes it before it reads it (budget.lua)
    shared: str  # HASH id -> the prefix of encoded messages many entries share (store/shared.py)
    shared_old: str  # HASH the prefixes `shared` held when a collection began (store/shared_gc.py)
    shared_grave: str  # HASH the prefixes no value referred to in the last collection, read until the next ends
    shared_gc: str  # HASH the collection's state: when it began, its HSCAN cursor, the layout it saw
    inflight: str  # ZSET id -> lease deadline (ms) of a claimed, not yet acked entry
    lock: str  # STRING leader token (PX lease)
    epoch: str  # STRING fencing counter, INCR on every change of leader
    wake: str  # STRING the leader's planned wake-up (ms); an earlier schedule publishes a wake-up
    pending_keys: str  # HASH idempotency key -> id of the pending entry scheduled under it
    id_keys: str  # HASH id -> idempotency key (only for entries scheduled under a key)
    leader: str  # prefix of the STRING `leader:<token>`: the leader's JSON record, for people (PX lease)
    revoked: str  # ZSET id -> expiry (ms) of a revoke of an id no longer pending (bounded)
    revoked_gen: str  # STRING counter, INCR on every revoke record written in the shard
    # Periodic entries of this shard (the entries whose name hashes here):
    periodic_names: str  # ZSET name -> 0: every entry, for paging by name (ZRANGEBYLEX)
    periodic_defs: str  # HASH name -> the entry's definition but its plan (JSON, model.periodic)
    periodic_plan: str  # HASH name -> the fields that decide when it fires (the same bytes for entries sharing them)
    periodic_state: str  # HASH name -> its state (JSON: next run, last run, run count...)
    periodic_tpl: str  # HASH name -> the encoded task message every occurrence is stored with
    periodic_next: str  # ZSET name -> when the leader must look at it next (ms): its next fire time
    periodic_run: str  # HASH name -> "<occurrence id>|<stored ms>[|b]": the occurrence overlap waits for
    periodic_wake: str  # STRING the leader's planned periodic look (ms); an earlier change publishes "p<shard>"
    # Resharding (model.reshard): the layout this shard accepts writes under, and the move's bookkeeping:
    layout: str  # STRING the shard count writes must be routed with (absent: never resharded)
    moving: str  # ZSET id -> due ms: entries taken out of `due` to move to another shard
    moving_msg: str  # HASH id -> the stored value of a moving entry
    moving_periodic: str  # HASH name -> a moving periodic entry (packed by the take script)
    moved_in: str  # HASH id (or "p:" name) -> digest of what a move put here (a re-run puts nothing twice)

    def leader_info(self, token: str) -> str:
        """The record of the leader holding ``token``; keyed by token so a deposed leader
        can never overwrite its successor's record."""
        return f"{self.leader}:{token}"


@dataclass(frozen=True)
class KeySpace:
    """Key names for one ``prefix`` and shard count."""

    prefix: str
    shards: int
    #: How many shards may hold entries when more than ``shards`` (a shrinking move under way).
    extent: int = 0

    @property
    def span(self) -> int:
        """How many shards may hold entries (``shards`` routes writes; a move can leave more)."""
        return max(self.shards, self.extent)

    @property
    def meta(self) -> str:
        return f"{self.prefix}:meta"

    @property
    def stats(self) -> str:
        """HASH counter name -> count: events a worker reports for people and metrics (a worker
        has no metrics server of its own), e.g. idempotent completions whose lease was lost."""
        return f"{self.prefix}:stats"

    @property
    def members(self) -> str:
        """ZSET dispatcher id -> heartbeat deadline (ms): the live dispatchers."""
        return f"{{{self.prefix}:members}}:dispatchers"

    @property
    def wake_channel(self) -> str:
        return f"{self.prefix}:wake"

    @property
    def revoke_channel(self) -> str:
        """Where each revoke record is announced, for workers keeping their revoked set current."""
        return f"{self.prefix}:revokes"

    @property
    def dlq_index(self) -> str:
        """ZSET id -> dead-lettered time (ms), for newest-first paging and age trimming."""
        return f"{{{self.prefix}:dlq}}:index"

    @property
    def dlq_data(self) -> str:
        """HASH id -> JSON dead-letter record."""
        return f"{{{self.prefix}:dlq}}:data"

    @property
    def reshard_lock(self) -> str:
        """STRING the token of the process running a reshard (PX lease): one at a time."""
        return f"{{{self.prefix}:reshard}}:lock"

    @property
    def periodic_config(self) -> str:
        """HASH name -> fingerprint of the entries that came from ``beat_schedule`` (the last sync)."""
        return f"{{{self.prefix}:periodic}}:config"

    @property
    def periodic_sync(self) -> str:
        """STRING the token of the dispatcher syncing ``beat_schedule`` (PX lease): one sync at a time."""
        return f"{{{self.prefix}:periodic}}:sync"

    def idempotency(self, key: str) -> str:
        """STRING state of one idempotency key; no hash tag, so keys spread over a cluster."""
        return f"{self.prefix}:idem:{key}"

    @cached_property
    def _shards(self) -> tuple[ShardKeys, ...]:
        return tuple(self._make(s) for s in range(self.span))

    def _make(self, shard: int) -> ShardKeys:
        tag = f"{{{self.prefix}:{shard}}}"
        return ShardKeys(
            shard=shard,
            due=f"{tag}:due",
            msg=f"{tag}:msg",
            big=f"{tag}:big",
            shared=f"{tag}:shared",
            shared_old=f"{tag}:shared:old",
            shared_grave=f"{tag}:shared:grave",
            shared_gc=f"{tag}:shared:gc",
            inflight=f"{tag}:inflight",
            lock=f"{tag}:lock",
            epoch=f"{tag}:epoch",
            wake=f"{tag}:wake",
            pending_keys=f"{tag}:pkeys",
            id_keys=f"{tag}:idkeys",
            leader=f"{tag}:leader",
            revoked=f"{tag}:revoked",
            revoked_gen=f"{tag}:revgen",
            periodic_names=f"{tag}:p:names",
            periodic_defs=f"{tag}:p:defs",
            periodic_plan=f"{tag}:p:plan",
            periodic_state=f"{tag}:p:state",
            periodic_tpl=f"{tag}:p:tpl",
            periodic_next=f"{tag}:p:next",
            periodic_run=f"{tag}:p:run",
            periodic_wake=f"{tag}:p:wake",
            layout=f"{tag}:layout",
            moving=f"{tag}:mv",
            moving_msg=f"{tag}:mv:msg",
            moving_periodic=f"{tag}:mv:p",
            moved_in=f"{tag}:mv:in",
        )

    def shard(self, shard: int) -> ShardKeys:
        if 0 <= shard < len(self._shards):
            return self._shards[shard]
        # A shard beyond the count: a process that followed a reshard to fewer shards still
        # releases the leases it held there.
        return self._make(shard)

    def imported(self, shard: int) -> str:
        """HASH id -> due ms of every id ``celery zset import-eta`` moved into the shard (expires)."""
        return f"{{{self.prefix}:{shard}}}:imported"

    def shard_of(self, routing: str) -> int:
        """Stable shard of a task id (or idempotency key): the same on every host and Python."""
        return zlib.crc32(routing.encode("utf-8")) % self.shards

"""Periodic entries in the sharded store: one wrapper per script, and the reads people and the
sync need.

An entry lives on the shard of its name (``KeySpace.shard_of(name)``), all its keys under that
shard's hash tag, next to the shard's ``due``/``msg``: the leader's fire script stores an
occurrence and writes the entry's next state in one single-slot step (I11). Knows nothing of
schedules: definitions, states and templates are opaque bytes here (their JSON is
``model.periodic``'s, their meaning the planner's).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..model.ids import member
from ..model.keys import KeySpace
from .claims import Fence
from .leases import UNLOCK
from .pending import Store
from .scripts import Call, ScriptDef, as_bool

PERIODIC_DUE = ScriptDef("periodic_due", (
    "periodic_next", "periodic_plan", "periodic_state", "periodic_run", "due", "inflight", "lock", "epoch",
    "periodic_wake",
))
PERIODIC_FIRE = ScriptDef("periodic_fire", (
    "periodic_next", "periodic_state", "periodic_tpl", "periodic_run", "due", "msg", "wake", "lock", "epoch",
))
PERIODIC_WRITE = ScriptDef("periodic_write", (
    "periodic_names", "periodic_defs", "periodic_state", "periodic_tpl", "periodic_next", "periodic_run",
    "periodic_wake", "due", "msg", "wake", "periodic_plan",
))
PERIODIC_READ = ScriptDef("periodic_read", (
    "periodic_defs", "periodic_state", "periodic_tpl", "periodic_run", "periodic_next", "periodic_plan",
))
PERIODIC_DONE = ScriptDef("periodic_done", ("periodic_run", "periodic_next", "periodic_wake"))

#: Groups (entries) per fire script call, and occurrences: one call stays around a millisecond
#: of Redis time even when entries catch up many occurrences each.
FIRE_CHUNK = 200
FIRE_CHUNK_OCCURRENCES = 2_000
#: Most names one HMGET of :meth:`PeriodicStore.records` reads.
RECORDS_CHUNK = 1_000


@dataclass(frozen=True)
class DueEntry:
    """A due entry as the leader read it: what it plans from, byte for byte."""

    name: str
    look_ms: int  # its score in ``next``
    plan: bytes  # the fields that decide when it fires (model.periodic_json.split_entry)
    state: bytes
    mark: bytes  # the overlap mark (b"" for none)
    outstanding_until: int | None  # while its last tracked occurrence counts as pending or running


@dataclass(frozen=True)
class DueRead:
    fenced: bool
    now_ms: int
    next_look_ms: int | None  # earliest entry still ahead
    entries: list[DueEntry]


@dataclass(frozen=True)
class Occurrence:
    task_id: str
    due_ms: int
    payload: bytes | None = None  # None: the entry's stored template


@dataclass(frozen=True)
class Firing:
    """What the leader writes for one due entry (a compare-and-set on ``expected_*``)."""

    name: str
    expected_state: bytes
    expected_mark: bytes
    state: bytes
    look_ms: int | None
    occurrences: list[Occurrence] = field(default_factory=list)
    mark: str = ""  # model.firing.MarkOp


@dataclass(frozen=True)
class EntryRecord:
    """One entry as stored, with the Redis time it was read at."""

    now_ms: int
    definition: bytes | None  # the fields but the plan
    state: bytes | None
    template: bytes | None
    mark: bytes | None
    look_ms: int | None  # its score in ``next``
    plan: bytes | None


WriteMode = Literal["new", "cas", "any"]


def _opt(value: Any) -> bytes | None:
    return value if isinstance(value, bytes) else None


# -- the script wrappers ------------------------------------------------------------------------

def due_call(keys: KeySpace, fence: Fence, *, limit: int, max_wait_ms: int, wake_ttl_ms: int,
             overlap_timeout_ms: int) -> Call[DueRead]:
    def parse(reply: Any) -> DueRead:
        if int(reply[0]) == 0:
            return DueRead(True, 0, None, [])
        _, now, first, names, scores, defs, states, untils, marks = reply
        entries = [
            DueEntry(n.decode(), int(float(s)), d, st, m, None if int(u) < 0 else int(u))
            for n, s, d, st, u, m in zip(names, scores, defs, states, untils, marks, strict=True)
        ]
        look = int(float(first))
        return DueRead(False, int(now), None if look < 0 else look, entries)

    args = [fence.token, fence.epoch, limit, max_wait_ms, wake_ttl_ms, overlap_timeout_ms]
    return PERIODIC_DUE.call(keys.shard(fence.shard), args, parse)


def _occurrence_args(occurrences: Sequence[Occurrence]) -> list[Any]:
    args: list[Any] = []
    for o in occurrences:
        args += (member(o.task_id), int(o.due_ms), b"" if o.payload is None else o.payload)
    return args


def fire_call(keys: KeySpace, fence: Fence, firings: Sequence[Firing]) -> Call[list[int] | None]:
    """``None`` when fenced, else per firing: -1 refused (stale), or how many occurrences were new."""
    args: list[Any] = [fence.token, fence.epoch, keys.wake_channel, fence.shard]
    for f in firings:
        args += (f.name, f.expected_state, f.expected_mark, f.state, "" if f.look_ms is None else int(f.look_ms),
                 f.mark, len(f.occurrences), *_occurrence_args(f.occurrences))

    def parse(reply: Any) -> list[int] | None:
        return None if int(reply[0]) == 0 else [int(x) for x in reply[1]]

    return PERIODIC_FIRE.call(keys.shard(fence.shard), args, parse)


def write_call(keys: KeySpace, name: str, *, mode: WriteMode, expected: bytes | None, definition: bytes | None,
               template: bytes | None, state: bytes, look_ms: int | None, mark: str = "",
               occurrences: Sequence[Occurrence] = (), plan: bytes | None = None) -> Call[tuple[bool, bytes | None]]:
    """``definition=None`` removes the entry; ``plan`` goes with the definition. Returns (written,
    the current state when refused)."""
    shard = keys.shard_of(name)
    args: list[Any] = [keys.wake_channel, shard, name, mode, expected or b"", definition or b"", template or b"",
                       state, "" if look_ms is None else int(look_ms), mark, plan or b"",
                       *_occurrence_args(occurrences)]

    def parse(reply: Any) -> tuple[bool, bytes | None]:
        return (True, None) if int(reply[0]) == 1 else (False, _opt(reply[1]) if len(reply) > 1 else None)

    return PERIODIC_WRITE.call(keys.shard(shard), args, parse)


def read_call(keys: KeySpace, name: str) -> Call[EntryRecord]:
    def parse(reply: Any) -> EntryRecord:
        now, definition, state, template, mark, look, plan = reply
        return EntryRecord(int(now), _opt(definition), _opt(state), _opt(template), _opt(mark),
                           None if look is None else int(float(look)), _opt(plan))

    return PERIODIC_READ.call(keys.shard(keys.shard_of(name)), [name], parse)


def done_call(keys: KeySpace, name: str, task_id: str) -> Call[bool]:
    shard = keys.shard_of(name)
    return PERIODIC_DONE.call(keys.shard(shard), [keys.wake_channel, shard, name, task_id],
                              lambda reply: bool(int(reply)))


# -- the store ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShardCounts:
    shard: int
    entries: int  # every entry of the shard
    scheduled: int  # entries with a next look (enabled, not paused, not finished)
    next_look_ms: int | None  # the earliest of them


class PeriodicStore:
    """The periodic entries of one :class:`~.pending.Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.scripts = store.scripts

    # -- the leader -----------------------------------------------------------------------------

    @property
    def keys(self) -> KeySpace:
        """The store's keys now (they change when the store follows a reshard)."""
        return self.store.keys

    def due_many(self, fences: Sequence[Fence], *, limit: int, max_wait_ms: int, wake_ttl_ms: int,
                 overlap_timeout_ms: int) -> dict[int, DueRead | Exception]:
        """The due entries of several shards, one pipelined round trip. On a Redis Cluster a shard
        whose call failed (its master down) gets its error as its read; elsewhere it is raised."""
        calls = [due_call(self.keys, f, limit=limit, max_wait_ms=max_wait_ms, wake_ttl_ms=wake_ttl_ms,
                          overlap_timeout_ms=overlap_timeout_ms) for f in fences]
        replies = self.scripts.settle(calls) if self.store.clustered else self.scripts.run_many(calls)
        return {f.shard: r for f, r in zip(fences, replies, strict=True)}

    def fire_many(self, plans: Mapping[Fence, Sequence[Firing]]) -> dict[int, list[int] | None]:
        """Write every shard's firings (bounded chunks), one pipelined round trip.
        Per shard: ``None`` when fenced, else one result per firing (see :func:`fire_call`)."""
        calls: list[Call[list[int] | None]] = []
        owners: list[int] = []
        for fence, firings in plans.items():
            chunk: list[Firing] = []
            size = 0
            for firing in firings:
                chunk.append(firing)
                size += 1 + len(firing.occurrences)
                if len(chunk) >= FIRE_CHUNK or size >= FIRE_CHUNK_OCCURRENCES:
                    calls.append(fire_call(self.keys, fence, chunk))
                    owners.append(fence.shard)
                    chunk, size = [], 0
            if chunk:
                calls.append(fire_call(self.keys, fence, chunk))
                owners.append(fence.shard)
        out: dict[int, list[int] | None] = {}
        replies = self.scripts.settle(calls) if self.store.clustered else self.scripts.run_many(calls)
        for shard, reply in zip(owners, replies, strict=True):
            if isinstance(reply, Exception):  # its master is down (a cluster): the shard looks again
                out[shard] = [*(out.get(shard) or []), -1]
                continue
            if reply is None or out.get(shard, []) is None:
                out[shard] = None
            else:
                out[shard] = [*(out.get(shard) or []), *reply]
        return out

    def templates(self, shard: int, names: Sequence[str]) -> dict[str, bytes]:
        if not names:
            return {}
        found = self.store.client.hmget(self.keys.shard(shard).periodic_tpl, list(names))
        return {n: t for n, t in zip(names, found, strict=True) if t is not None}

    # -- anyone ---------------------------------------------------------------------------------

    def read(self, name: str) -> EntryRecord:
        return self.scripts.run(read_call(self.keys, name))

    def write(self, name: str, **kwargs: Any) -> tuple[bool, bytes | None]:
        self.store.check_meta()
        return self.scripts.run(write_call(self.keys, name, **kwargs))

    def write_many(self, calls: Sequence[Call[tuple[bool, bytes | None]]]) -> list[tuple[bool, bytes | None]]:
        if calls:
            self.store.check_meta()
        return self.scripts.run_many(calls)

    def done(self, name: str, task_id: str) -> bool:
        return self.scripts.run(done_call(self.keys, name, task_id))

    def names_after(self, after: str | None, limit: int) -> list[str]:
        """The first ``limit`` names after ``after`` over every shard, in byte order (a k-way merge of
        one bounded ZRANGEBYLEX per shard: O(shards · (log n + limit)))."""
        pipe = self.store.client.pipeline(transaction=False)
        start = "-" if after is None else "(" + after
        for shard in range(self.keys.span):
            pipe.zrangebylex(self.keys.shard(shard).periodic_names, start, "+", start=0, num=limit)
        merged = sorted({n for page in pipe.execute() for n in page})
        return [n.decode() for n in merged[:limit]]

    def records(self, names: Sequence[str]) -> dict[str, tuple[bytes | None, bytes | None, bytes | None]]:
        """``name -> (definition, plan, state)`` for these names, one pipelined round trip of three
        HMGETs per shard (a page of 100 names is a dozen commands, not 300), of at most
        :data:`RECORDS_CHUNK` names each (a sync reads every configured entry: no command blocks
        Redis for long)."""
        chunks: list[tuple[int, list[str]]] = []
        by_shard: dict[int, list[str]] = {}
        for name in dict.fromkeys(names):
            by_shard.setdefault(self.keys.shard_of(name), []).append(name)
        for shard, members in by_shard.items():
            chunks += [(shard, members[i:i + RECORDS_CHUNK]) for i in range(0, len(members), RECORDS_CHUNK)]
        pipe = self.store.client.pipeline(transaction=False)
        for shard, members in chunks:
            sk = self.keys.shard(shard)
            for key in (sk.periodic_defs, sk.periodic_plan, sk.periodic_state):
                pipe.hmget(key, members)
        replies = iter(pipe.execute())
        out: dict[str, tuple[bytes | None, bytes | None, bytes | None]] = {}
        for _, members in chunks:
            definitions, plans, states = next(replies), next(replies), next(replies)
            out.update(zip(members, zip(definitions, plans, states, strict=True), strict=True))
        return {n: out[n] for n in names}

    def counts(self) -> list[ShardCounts]:
        pipe = self.store.client.pipeline(transaction=False)
        for shard in range(self.keys.span):
            sk = self.keys.shard(shard)
            pipe.zcard(sk.periodic_names)
            pipe.zcard(sk.periodic_next)
            pipe.zrange(sk.periodic_next, 0, 0, withscores=True)
        replies = pipe.execute()
        out = []
        for shard in range(self.keys.span):
            entries, scheduled, first = replies[3 * shard: 3 * shard + 3]
            out.append(ShardCounts(shard, int(entries), int(scheduled), int(first[0][1]) if first else None))
        return out

    # -- the beat_schedule sync -----------------------------------------------------------------

    def config_index(self, page: int = 500) -> Iterator[tuple[str, str]]:
        """``(name, fingerprint)`` of every entry the last sync wrote from ``beat_schedule``, by
        HSCAN pages (the index is as big as the configuration, not the store)."""
        cursor = 0
        while True:
            cursor, items = self.store.client.hscan(self.keys.periodic_config, cursor, count=page)
            for name, fingerprint in items.items():
                yield name.decode(), fingerprint.decode()
            if int(cursor) == 0:
                return

    def set_config(self, name: str, fingerprint: str | None) -> None:
        if fingerprint is None:
            self.store.client.hdel(self.keys.periodic_config, name)
        else:
            self.store.client.hset(self.keys.periodic_config, name, fingerprint)

    def config_names(self, names: Sequence[str]) -> set[str]:
        """Which of ``names`` came from ``beat_schedule``."""
        if not names:
            return set()
        found = self.store.client.hmget(self.keys.periodic_config, list(names))
        return {n for n, f in zip(names, found, strict=True) if f is not None}

    def lock_sync(self, token: str, ttl_ms: int) -> bool:
        return bool(self.store.client.set(self.keys.periodic_sync, token, nx=True, px=ttl_ms))

    def unlock_sync(self, token: str) -> None:
        # Only our own lock (the lease script's unlock): a sync that overran its lease must not
        # free the next one's.
        self.scripts.run(UNLOCK.call_with([self.keys.periodic_sync], [token], as_bool))

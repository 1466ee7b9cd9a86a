"""The sharded ZSET store: scheduling, cancelling, looking up and paging pending entries.

Knows nothing of Celery: an entry is an id, a due time in integer milliseconds and the encoded
message bytes. Every operation is one Lua script per shard (atomic, single slot) and costs
O(log n) in the number of pending entries (I4); bulk calls pipeline one script call per chunk.
The dispatcher's side (claim, ack, release, reap) is in :mod:`.claims`.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis

from .errors import ShardCountMismatch
from .keys import FORMAT_VERSION, KeySpace, ShardKeys
from .scripts import Scripts, execute
from .streaming import ScheduleStream

# Entries per schedule script call: big enough to amortize the round trip, small enough that
# one call never blocks Redis for long (about a millisecond).
CHUNK = 500


@dataclass(frozen=True)
class NewEntry:
    task_id: str
    due_ms: int
    payload: bytes
    idempotency_key: str | None = None


ScheduleStatus = Literal["scheduled", "exists", "replaced", "duplicate_key"]


@dataclass(frozen=True)
class ScheduleResult:
    status: ScheduleStatus
    task_id: str  # the id that now holds the slot: the caller's, or the earlier one with the same key

    @property
    def created(self) -> bool:
        return self.status in ("scheduled", "replaced")


CancelStatus = Literal["cancelled", "inflight", "unknown"]


@dataclass(frozen=True)
class StoredEntry:
    task_id: str
    shard: int
    state: Literal["pending", "inflight"]
    score_ms: int  # due time when pending, lease deadline when in flight
    payload: bytes | None


@dataclass(frozen=True)
class PageEntry:
    task_id: str
    due_ms: int
    payload: bytes | None


@dataclass(frozen=True)
class Page:
    entries: list[PageEntry]
    cursor: tuple[int, str] | None  # pass back as ``after`` for the next page; None at the end


@dataclass(frozen=True)
class ShardCount:
    shard: int
    pending: int
    inflight: int


class Store:
    """One client's view of the store at ``prefix`` with ``shards`` shards."""

    def __init__(self, client: Any, keys: KeySpace) -> None:
        self.client = client
        self.keys = keys
        self.scripts = Scripts(client)
        self._meta_checked = False
        self._meta_lock = threading.Lock()

    @property
    def shards(self) -> int:
        return self.keys.shards

    # -- format and shard count -----------------------------------------------------------------

    def check_meta(self) -> None:
        """Record the shard count on first use; refuse a store created with another one."""
        if self._meta_checked:
            return
        with self._meta_lock:
            if self._meta_checked:
                return
            shards, version = self.scripts.meta([self.keys.meta], [self.shards, FORMAT_VERSION])
            if int(shards) != self.shards:
                raise ShardCountMismatch(
                    f"the store at prefix {self.keys.prefix!r} has {int(shards)} shards but this "
                    f"client is configured with zset_scheduler_shards={self.shards}; set it to "
                    f"{int(shards)} (changing the count of an existing store is not supported: "
                    "use a new zset_scheduler_prefix and let the old one drain)"
                )
            if int(version) != FORMAT_VERSION:
                raise ShardCountMismatch(
                    f"the store at prefix {self.keys.prefix!r} uses format version {int(version)}, "
                    f"this version of celery-zset-scheduler reads version {FORMAT_VERSION}"
                )
            self._meta_checked = True

    # -- scheduling -----------------------------------------------------------------------------

    def schedule(
        self, task_id: str, due_ms: int, payload: bytes, *,
        idempotency_key: str | None = None, replace: bool = False,
    ) -> ScheduleResult:
        """Schedule one entry; an id (or idempotency key) already pending is left as it is.

        A direct script call, not a one-command pipeline: redis-py checks a pipeline's scripts
        with SCRIPT EXISTS before every execute, a second round trip on each ``apply_async``.
        """
        self.check_meta()
        entry = NewEntry(task_id, due_ms, payload, idempotency_key)
        keys, args = self._schedule_call(self.keys.shard_of(idempotency_key or task_id), [entry], replace)
        return _schedule_result(task_id, self.scripts.schedule(keys, args)[0])

    def schedule_many(self, entries: Sequence[NewEntry], *, replace: bool = False) -> list[ScheduleResult]:
        """Schedule many entries in one pipelined round trip; results are in the input order."""
        self.check_meta()
        by_shard: dict[int, list[int]] = defaultdict(list)
        for index, entry in enumerate(entries):
            by_shard[self.keys.shard_of(entry.idempotency_key or entry.task_id)].append(index)
        calls: list[list[int]] = []
        pipe = self.client.pipeline(transaction=False)
        for shard, indexes in by_shard.items():
            for start in range(0, len(indexes), CHUNK):
                chunk = indexes[start:start + CHUNK]
                keys, args = self._schedule_call(shard, [entries[i] for i in chunk], replace)
                self.scripts.schedule(keys, args, client=pipe)
                calls.append(chunk)
        results: list[ScheduleResult | None] = [None] * len(entries)
        for chunk, replies in zip(calls, execute(pipe), strict=True):
            for i, reply in zip(chunk, replies, strict=True):
                results[i] = _schedule_result(entries[i].task_id, reply)
        return [r for r in results if r is not None]

    def _schedule_call(self, shard: int, entries: Sequence[NewEntry], replace: bool) -> tuple[list[str], list[Any]]:
        """Keys and arguments of one ``schedule-5.lua`` call for entries of one shard."""
        sk = self.keys.shard(shard)
        args: list[Any] = [self.keys.wake_channel, shard, "1" if replace else "0"]
        for e in entries:
            args += (e.task_id, int(e.due_ms), e.payload, e.idempotency_key or "")
        return [sk.due, sk.msg, sk.wake, sk.pending_keys, sk.id_keys], args

    def add_many(self, entries: Iterable[tuple[str, int, bytes]]) -> int:
        """Schedule new ``(task_id, due_ms, payload)`` entries without idempotency keys, streamed
        as they come (the bulk path: see :mod:`.streaming`); returns how many were new."""
        self.check_meta()
        if not isinstance(self.client, redis.Redis):  # e.g. a cluster client: the pipelined path
            return sum(r.status == "scheduled" for r in self.schedule_many([NewEntry(*e) for e in entries]))
        with ScheduleStream(self.client, self.keys, CHUNK) as stream:
            for task_id, due_ms, payload in entries:
                stream.add(task_id, due_ms, payload)
        return stream.created

    def reschedule(self, task_id: str, due_ms: int) -> bool:
        """Move a pending entry to ``due_ms``; False when it is not pending."""

        def call(sk: ShardKeys, pipe: Any) -> None:
            args = [self.keys.wake_channel, sk.shard, task_id, int(due_ms)]
            self.scripts.reschedule([sk.due, sk.wake], args, client=pipe)

        return self._first_hit(task_id, call) is not None

    def cancel(self, task_ids: Iterable[str]) -> dict[str, CancelStatus]:
        """Cancel pending entries. In-flight ones (being published right now) cannot be."""
        ids = list(dict.fromkeys(task_ids))
        status: dict[str, CancelStatus] = dict.fromkeys(ids, "unknown")
        by_shard: dict[int, list[str]] = defaultdict(list)
        for task_id in ids:
            by_shard[self.keys.shard_of(task_id)].append(task_id)
        self._cancel_in(by_shard, status)
        # Entries scheduled under an idempotency key live in the key's shard: look there too.
        missing = [i for i, s in status.items() if s == "unknown"]
        if missing and self.shards > 1:
            self._cancel_in({s: missing for s in range(self.shards)}, status)
        return status

    def _cancel_in(self, by_shard: dict[int, list[str]], status: dict[str, CancelStatus]) -> None:
        pipe = self.client.pipeline(transaction=False)
        calls = []
        for shard, ids in by_shard.items():
            sk = self.keys.shard(shard)
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start:start + CHUNK]
                keys = [sk.due, sk.msg, sk.inflight, sk.pending_keys, sk.id_keys]
                self.scripts.cancel(keys, chunk, client=pipe)
                calls.append(chunk)
        for chunk, replies in zip(calls, execute(pipe), strict=True):
            for task_id, reply in zip(chunk, replies, strict=True):
                if reply == 1:
                    status[task_id] = "cancelled"
                elif reply == -1 and status[task_id] == "unknown":
                    status[task_id] = "inflight"

    # -- reading --------------------------------------------------------------------------------

    def get(self, task_id: str) -> StoredEntry | None:
        """The pending or in-flight entry of ``task_id``, or None."""
        found = self._first_hit(
            task_id, lambda sk, pipe: self.scripts.get([sk.due, sk.inflight, sk.msg], [task_id], client=pipe)
        )
        if found is None:
            return None
        shard, reply = found
        state: Literal["pending", "inflight"] = "pending" if reply[0] == b"pending" else "inflight"
        return StoredEntry(task_id, shard, state, int(float(reply[1])), reply[2] or None)

    def counts(self) -> list[ShardCount]:
        """Pending and in-flight entries of every shard (ZCARD: O(1) each)."""
        pipe = self.client.pipeline(transaction=False)
        for shard in range(self.shards):
            sk = self.keys.shard(shard)
            pipe.zcard(sk.due)
            pipe.zcard(sk.inflight)
        replies = execute(pipe)
        return [
            ShardCount(s, int(replies[2 * s]), int(replies[2 * s + 1])) for s in range(self.shards)
        ]

    def pending(self) -> int:
        return sum(c.pending for c in self.counts())

    def earliest(self) -> int | None:
        """The earliest due time (ms) over all shards, or None when nothing is pending."""
        pipe = self.client.pipeline(transaction=False)
        for shard in range(self.shards):
            pipe.zrange(self.keys.shard(shard).due, 0, 0, withscores=True)
        scores = [int(reply[0][1]) for reply in execute(pipe) if reply]
        return min(scores) if scores else None

    def page(
        self, shard: int, *, after: tuple[int, str] | None = None, min_due: int | None = None,
        max_due: int | None = None, limit: int = 100, with_payloads: bool = False,
    ) -> Page:
        """One page of a shard's pending entries in due order, starting after ``after``."""
        sk = self.keys.shard(shard)
        args = [
            "" if after is None else int(after[0]),
            "" if after is None else after[1],
            "-inf" if min_due is None else int(min_due),
            "+inf" if max_due is None else int(max_due),
            max(1, int(limit)),
            "1" if with_payloads else "0",
        ]
        ids, scores, payloads = self.scripts.page([sk.due, sk.msg], args)
        entries = [
            PageEntry(
                i.decode(), int(float(s)), (payloads[n] or None) if with_payloads else None
            )
            for n, (i, s) in enumerate(zip(ids, scores, strict=True))
        ]
        cursor = (entries[-1].due_ms, entries[-1].task_id) if len(entries) == int(args[4]) else None
        return Page(entries, cursor)

    def iter_shard(self, shard: int, *, page_size: int = 1000, **kwargs: Any) -> Iterator[PageEntry]:
        """Every pending entry of a shard, in due order, a page at a time."""
        after = None
        while True:
            page = self.page(shard, after=after, limit=page_size, **kwargs)
            yield from page.entries
            if page.cursor is None:
                return
            after = page.cursor


    def _first_hit(
        self, task_id: str, call: Callable[[ShardKeys, Any], None]
    ) -> tuple[int, Any] | None:
        """Run ``call`` on the id's own shard, then (one pipeline) on the others; first truthy reply.

        Entries scheduled under an idempotency key live in the key's shard, which only the
        second step finds. Either way the cost is independent of the number of entries (I4).
        """
        own = self.keys.shard_of(task_id)
        for shards in ([own], [s for s in range(self.shards) if s != own]):
            if not shards:
                continue
            pipe = self.client.pipeline(transaction=False)
            for shard in shards:
                call(self.keys.shard(shard), pipe)
            for shard, reply in zip(shards, execute(pipe), strict=True):
                if reply:
                    return shard, reply
        return None


def _schedule_result(task_id: str, reply: Any) -> ScheduleResult:
    if isinstance(reply, bytes):
        return ScheduleResult("duplicate_key", reply.decode())
    return ScheduleResult({1: "scheduled", 0: "exists", 2: "replaced"}[int(reply)], task_id)  # type: ignore[arg-type]

"""The sharded ZSET store: scheduling, cancelling, looking up and paging pending entries.

Knows nothing of Celery: an entry is an id, a due time in integer milliseconds and the encoded
message bytes. Every operation is one Lua script per shard (atomic, single slot) and costs
O(log n) in the number of pending entries (I4); bulk calls pipeline one script call per chunk.
The scripts of one entry (cancel, get, reschedule, page) are in :mod:`.entries`; the dispatcher's
side (claim, ack, release, reap) is in :mod:`.claims`.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import ShardCountMismatch
from ..model.keys import PACKED_IDS_SINCE, KeySpace, check_storable, storable
from ..model.logs import log_event
from ..model.reshard import shard_for
from ..settings import MAX_MESSAGE_BYTES as DEFAULT_MAX_BYTES
from ..settings import PREFIX
from . import meta
from .client import is_cluster
from .entries import CancelStatus, Page, PageEntry, StoredEntry, cancel_call, get_call, page_call, reschedule_call
from .reshard import holder_call
from .schedule import NewEntry, ScheduleResult, layout_refused, schedule_call
from .scripts import Call, Scripts, scripts_for
from .shared import Shared
from .stream import ScheduleStream

# Routing again after a refusal by the shard's layout: a reshard begins or ends once, so a second
# refusal in a row would be a bug or a store being resharded back and forth.
LAYOUT_TRIES = 3

# Entries per schedule script call: big enough to amortize the round trip, small enough that
# one call never blocks Redis for long (about a millisecond).
CHUNK = 500

# -- the store ----------------------------------------------------------------------------------

class Store:
    """One client's view of the store at ``prefix`` with ``shards`` shards.

    A client follows a reshard it finds under way or sees happen while it runs (``keys`` routes
    with the new count from the moment a move begins and spans both layouts' shards until it
    ends); a client *started* with a count the store does not have refuses (:meth:`check_meta`).
    """

    def __init__(self, client: Any, keys: KeySpace, wait: tuple[int, int] | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.client = client
        self.max_bytes = max_bytes  # the largest stored message (zset_scheduler_max_message_bytes)
        self.keys = keys
        self.configured = keys.shards  # the zset_scheduler_shards this client was started with
        self.moving_from: int | None = None  # the count a reshard under way moves from
        self.scripts: Scripts = scripts_for(client, wait)
        self.shared = Shared(client, lambda: self.keys)  # the keys change with a reshard
        self._meta_checked = False
        self._meta_lock = threading.Lock()
        #: Whether the store may hold UUIDs as text members (written by format 4 or before): the
        #: schedule script then looks for them too. Known once the meta is read (until then: may).
        self.text_ids = True

    @property
    def clustered(self) -> bool:
        """On a Redis Cluster, where one master down fails only the calls of its shards."""
        return is_cluster(self.client)

    @property
    def shards(self) -> int:
        """How many shards may hold entries (both layouts' while a reshard is under way)."""
        return self.keys.span

    def check_meta(self) -> None:
        """Record the shard count on first use; refuse a store created with another one."""
        if self._meta_checked:
            return
        with self._meta_lock:
            if not self._meta_checked:
                recorded = meta.ensure(self.scripts, self.keys, self.configured)
                self._follow(recorded)
                upgraded_from = recorded.upgraded_from
                if upgraded_from is not None and upgraded_from < PACKED_IDS_SINCE:
                    # The first client of a version with packed ids on a store without them.
                    meta.pack_revoke_records(self.scripts, self.keys)
                self._meta_checked = True

    def verify_meta(self) -> None:
        """Like :meth:`check_meta`, reading only (for tools that must not create a store)."""
        recorded = meta.read(self.client, self.keys)
        found = meta.problem(self.keys, recorded, self.configured)
        if found:
            raise ShardCountMismatch(found)
        self._follow(recorded)

    def refresh_layout(self) -> None:
        """Read the store's layout again and follow a reshard begun or ended since (a running
        client keeps working through a reshard; a new one must be started with the new count)."""
        recorded = meta.read(self.client, self.keys)
        if recorded.layout is None:
            return
        known = {self.keys.shards, self.configured}
        if recorded.layout.moving_to is None and recorded.shards not in known \
                and recorded.resharded_from not in known:
            raise ShardCountMismatch(meta.problem(self.keys, recorded, self.configured) or "")
        self._follow(recorded)
        self._meta_checked = True

    def _follow(self, recorded: meta.Recorded) -> None:
        self.text_ids = recorded.text_ids
        layout = recorded.layout
        if layout is None:
            return
        keys = KeySpace(self.keys.prefix, layout.routing, layout.span if layout.span > layout.routing else 0)
        if keys != self.keys:
            log_event(logging.WARNING if layout.routing != self.configured else logging.INFO,
                      "store.layout", prefix=self.keys.prefix, shards=layout.shards,
                      moving_to=layout.moving_to, configured=self.configured,
                      hint=("set zset_scheduler_shards=" + str(layout.routing) + " before the next start")
                      if layout.routing != self.configured else "")
            self.keys = keys
        self.moving_from = layout.shards if layout.moving else None

    # -- scheduling -----------------------------------------------------------------------------

    def schedule(
        self, task_id: str, due_ms: int, payload: bytes, *,
        idempotency_key: str | None = None, replace: bool = False,
    ) -> ScheduleResult:
        """Schedule one entry; an id (or idempotency key) already pending is left as it is.

        A direct script call, not a one-command pipeline: one round trip per ``apply_async``.
        """
        _check_entry(task_id, idempotency_key)
        self._check_size(task_id, payload)
        self.check_meta()
        entry = NewEntry(task_id, due_ms, payload, idempotency_key)
        for _ in range(LAYOUT_TRIES):
            keys = self.keys
            shard = keys.shard_of(idempotency_key or task_id)
            held = self._held_in_old_shards([entry], replace)
            if held:
                return ScheduleResult("duplicate_key", held[0])
            value, write = self.shared.compact(shard, payload)
            compacted = NewEntry(task_id, due_ms, value, idempotency_key)
            before = () if write is None else (("HSETNX", *write),)
            try:
                return self.scripts.run(schedule_call(keys, shard, [compacted], replace, self.text_ids), durable=True,
                                        before=before)[0]
            except Exception as exc:
                if not layout_refused(exc):
                    raise
                self.refresh_layout()
        raise ShardCountMismatch(f"the store at prefix {self.keys.prefix!r} keeps changing its shard count")

    def schedule_many(self, entries: Sequence[NewEntry], *, replace: bool = False) -> list[ScheduleResult]:
        """Schedule many entries in one pipelined round trip; results are in the input order."""
        for entry in entries:
            _check_entry(entry.task_id, entry.idempotency_key)
            self._check_size(entry.task_id, entry.payload)
        self.check_meta()
        results: list[ScheduleResult | None] = [None] * len(entries)
        todo = list(range(len(entries)))
        for _ in range(LAYOUT_TRIES):
            todo = self._schedule_chunks(entries, todo, replace, results)
            if not todo:
                return [r for r in results if r is not None]
            self.refresh_layout()  # chunks refused by a shard's layout are routed again
        raise ShardCountMismatch(f"the store at prefix {self.keys.prefix!r} keeps changing its shard count")

    def _schedule_chunks(self, entries: Sequence[NewEntry], todo: list[int], replace: bool,
                         results: list[ScheduleResult | None]) -> list[int]:
        """Schedule ``entries[i]`` for each ``i`` of ``todo``; the ones refused by a shard's layout."""
        keys = self.keys
        held = self._held_in_old_shards([entries[i] for i in todo], replace)
        for position, holder in held.items():
            results[todo[position]] = ScheduleResult("duplicate_key", holder)
        todo = [i for n, i in enumerate(todo) if n not in held]
        by_shard: dict[int, list[int]] = defaultdict(list)
        for index in todo:
            entry = entries[index]
            by_shard[keys.shard_of(entry.idempotency_key or entry.task_id)].append(index)
        chunks: list[list[int]] = []
        calls: list[Call[list[ScheduleResult]]] = []
        writes: dict[tuple[str, bytes], bytes] = {}
        for shard, indexes in by_shard.items():
            compacted = []
            for i in indexes:
                value, write = self.shared.compact(shard, entries[i].payload)
                if write is not None:
                    writes[write[0], write[1]] = write[2]
                compacted.append(NewEntry(entries[i].task_id, entries[i].due_ms, value, entries[i].idempotency_key))
            for start in range(0, len(indexes), CHUNK):
                chunks.append(indexes[start:start + CHUNK])
                calls.append(schedule_call(keys, shard, compacted[start:start + CHUNK], replace, self.text_ids))
        before = [("HSETNX", key, sid, prefix) for (key, sid), prefix in writes.items()]
        refused: list[int] = []
        failure: Exception | None = None
        for chunk, replies in zip(chunks, self.scripts.settle(calls, durable=True, before=before), strict=True):
            if isinstance(replies, Exception):
                if layout_refused(replies):
                    refused += chunk
                elif failure is None:
                    failure = replies
                continue
            for i, result in zip(chunk, replies, strict=True):
                results[i] = result
        if failure is not None:
            raise failure
        return refused

    def add_many(self, entries: Iterable[tuple[str, int, bytes]]) -> int:
        """Schedule new ``(task_id, due_ms, payload)`` entries without idempotency keys, streamed
        as they come (the bulk path: see :mod:`.stream`); returns how many were new."""
        self.check_meta()
        with ScheduleStream(self.client, self.keys, CHUNK, self.scripts, self._moved, shared=self.shared,
                            text_ids=self.text_ids) as stream:
            for task_id, due_ms, payload in entries:
                self._check_size(task_id, payload)
                stream.add(task_id, due_ms, payload)
        return stream.created

    def _check_size(self, task_id: str, payload: bytes) -> None:
        if len(payload) > self.max_bytes:
            raise ValueError(
                f"task {task_id}: its message is {len(payload):,} bytes, more than "
                f"{PREFIX}max_message_bytes ({self.max_bytes:,} bytes); nothing was stored. Pass big "
                "data by reference (a key or URL the task reads), or raise the setting"
            )

    def _held_in_old_shards(self, entries: Sequence[NewEntry], replace: bool) -> dict[int, str]:
        """While a reshard moves entries: position -> the pending id holding the entry's
        idempotency key in the key's old shard, which the schedule script (on the new shard)
        cannot see. Read before the write: an entry leaves its old shard only once it is in its
        new one, so a holder not found here is found there."""
        old, keys = self.moving_from, self.keys
        if old is None or replace:
            return {}
        asked: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for position, entry in enumerate(entries):
            key = entry.idempotency_key
            if key is not None and shard_for(key, old) != keys.shard_of(key):
                asked[shard_for(key, old)].append((position, key))
        if not asked:
            return {}
        shards = list(asked)
        replies = self.scripts.run_many([holder_call(keys, s, [k for _, k in asked[s]]) for s in shards])
        held: dict[int, str] = {}
        for shard, holders in zip(shards, replies, strict=True):
            for (position, _), holder in zip(asked[shard], holders, strict=True):
                if holder is not None:
                    held[position] = holder
        return held

    def _moved(self) -> KeySpace:
        """The keys to route with after the stream was refused by a shard's layout."""
        self.refresh_layout()
        return self.keys

    def reschedule(self, task_id: str, due_ms: int) -> bool:
        """Move a pending entry to ``due_ms``; False when it is not pending."""
        return self._first_hit(task_id, lambda shard: reschedule_call(self.keys, shard, task_id, due_ms)) is not None

    def cancel(self, task_ids: Iterable[str]) -> dict[str, CancelStatus]:
        """Cancel pending entries. In-flight ones (being published right now) cannot be."""
        status: dict[str, CancelStatus] = dict.fromkeys(task_ids, "unknown")
        ids = [i for i in status if storable(i)]  # one that is not was never stored: unknown
        by_shard: dict[int, list[str]] = defaultdict(list)
        for task_id in ids:
            by_shard[self.keys.shard_of(task_id)].append(task_id)
        self._cancel_in(by_shard, status)
        # Entries scheduled under an idempotency key live in the key's shard: look there too.
        missing = [i for i in ids if status[i] == "unknown"]
        if missing and self.shards > 1:
            self._cancel_in({s: missing for s in range(self.shards)}, status)
        return status

    def _cancel_in(self, by_shard: dict[int, list[str]], status: dict[str, CancelStatus]) -> None:
        calls = [
            cancel_call(self.keys, shard, ids[start:start + CHUNK])
            for shard, ids in by_shard.items() for start in range(0, len(ids), CHUNK)
        ]
        for outcome in self.scripts.run_many(calls):
            for task_id, found in outcome.items():
                if found == "cancelled" or (found == "inflight" and status[task_id] == "unknown"):
                    status[task_id] = found

    # -- reading --------------------------------------------------------------------------------

    def get(self, task_id: str) -> StoredEntry | None:
        """The pending or in-flight entry of ``task_id``, or None."""
        found = self._first_hit(task_id, lambda shard: get_call(self.keys, shard, task_id))
        if found is None:
            return None
        entry: StoredEntry = found[1]
        if entry.payload is None:
            return entry
        payload = self.shared.resolve(entry.shard, [entry.payload])[0]
        return StoredEntry(entry.task_id, entry.shard, entry.state, entry.score_ms, payload)

    def page(
        self, shard: int, *, after: tuple[int, str] | None = None, min_due: int | None = None,
        max_due: int | None = None, limit: int = 100, with_payloads: bool = False,
    ) -> Page:
        """One page of a shard's pending entries in due order, starting after ``after``."""
        call = page_call(self.keys, shard, after=after, min_due=min_due, max_due=max_due, limit=limit,
                         with_payloads=with_payloads)
        page = self.scripts.run(call)
        if not with_payloads:
            return page
        payloads = self.shared.resolve(shard, [e.payload for e in page.entries])
        return Page([PageEntry(e.task_id, e.due_ms, p, e.stored_as)
                     for e, p in zip(page.entries, payloads, strict=True)], page.cursor)

    def _first_hit(self, task_id: str, make: Any) -> tuple[int, Any] | None:
        """Run ``make(shard)``'s call on the id's own shard, then (one round trip) on the others;
        the first truthy reply.

        Entries scheduled under an idempotency key live in the key's shard, which only the
        second step finds. Either way the cost is independent of the number of entries (I4).
        """
        if not storable(task_id):  # never stored, so nowhere to look
            return None
        own = self.keys.shard_of(task_id)
        for shards in ([own], [s for s in range(self.shards) if s != own]):
            if not shards:
                continue
            for shard, reply in zip(shards, self.scripts.run_many([make(s) for s in shards]), strict=True):
                if reply:
                    return shard, reply
        return None


def _check_entry(task_id: str, idempotency_key: str | None) -> None:
    check_storable(task_id)
    if idempotency_key is not None:
        check_storable(idempotency_key, "idempotency key")

"""Streaming many new entries into the store over one connection (the bulk scheduling path).

A bulk call has two serial costs: building each entry in Python and running the schedule script in
Redis. A redis-py pipeline pays them one after the other (build all, send all, wait). Here a shard's
chunk is sent as soon as it is full and its reply read only once more than ``WINDOW`` chunks are
outstanding, so Redis runs the script for one chunk while Python builds the next: two cores busy
instead of one. The commands are packed here because redis-py's generic per-argument packing costs
more than building the entry. The command is built from the schedule script's own definition
(``schedule.schedule_head``: keys and leading arguments; four arguments an entry) and sent with EVAL,
so a script cache flushed mid-way cannot fail a chunk; the results are those of ``Store.schedule_many``.
Each chunk is preceded by the ``HSETNX`` of the shared prefixes its entries refer to (:mod:`.shared`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any

import redis
from redis.exceptions import ResponseError

from ..model.ids import member
from ..model.keys import KeySpace
from .connections import checkout
from .schedule import SCHEDULE_ENTRY_ARGS, layout_refused, schedule_head
from .scripts import sources
from .shared import Shared

WINDOW = 8  # chunks sent and not yet answered: enough to keep Redis busy, bounded buffers


def refused_count(exc: ResponseError) -> int | None:
    """The shard count a layout refusal names."""
    words = str(exc).split()
    return int(words[1]) if len(words) > 1 and words[1].isdigit() else None


Raw = list[tuple[str, int, bytes]]


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


class _Link:
    """One connection of the stream (one per cluster node) and its replies not yet read."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.conn: Any = checkout(pool)
        self.outstanding = 0
        self.sent: deque[Raw] = deque()  # the entries of each unanswered chunk
        self.prefixes: deque[int] = deque()  # per unanswered chunk: the HSETNX replies before its own


class ScheduleStream:
    """``add()`` entries (any shard order), then ``close()``; returns how many were new.

    For new entries without an idempotency key (bulk scheduling); an id already pending is left
    as it is and not counted. Any error drops the connections (outstanding replies with them) and
    is raised: entries sent before it may be stored, as with a failed pipeline. On a Redis Cluster
    each shard's chunks go to the node serving its slot, one connection per node, each with its
    own window; a slot that moves mid-stream fails the stream (sending it again is safe: stored
    ids are left as they are). With ``scripts.wait`` set, ``close()`` ends with ``WAIT`` on each
    connection. A chunk refused by its shard's layout (a reshard began) is routed again with the
    keys ``moved()`` gives, with every entry not yet sent.
    """

    def __init__(self, client: Any, keys: KeySpace, chunk: int, scripts: Any = None,
                 moved: Callable[[], KeySpace] | None = None, *, shared: Shared | None = None,
                 text_ids: bool = True) -> None:
        source = sources()["schedule"]
        self.keys = keys
        self.chunk = chunk
        self.shared = shared
        self.text_ids = text_ids  # the store may hold UUIDs as text members (format 4 and before)
        self._writes: dict[int, dict[bytes, bytes]] = {}  # shard -> shared prefixes its buffer refers to
        self._moved = moved
        self._raw: dict[int, Raw] = {}  # the entries of each buffer
        self._again: Raw = []  # refused by a shard's layout: to route again
        self._client = client
        self._scripts = scripts
        self._wait: tuple[int, int] | None = getattr(scripts, "wait", None)
        self._links: dict[int, _Link] = {}  # by id() of the pool
        self._routes: dict[int, _Link] = {}  # shard -> its link
        self._buffers: dict[int, list[bytes]] = {}
        self._heads: dict[int, bytes] = {}
        self._script = _bulk(b"EVAL") + _bulk(source.text.encode("utf-8")) + _bulk(b"%d" % source.numkeys)
        self._open = True
        self.created = 0
        if not isinstance(client, redis.RedisCluster):
            self._link_of(client.connection_pool)  # connect now, as a pipeline would

    def _link_of(self, pool: Any) -> _Link:
        link = self._links.get(id(pool))
        if link is None:
            link = self._links[id(pool)] = _Link(pool)
        return link

    def _route(self, shard: int) -> _Link:
        link = self._routes.get(shard)
        if link is None:
            if isinstance(self._client, redis.RedisCluster):
                node = self._scripts.node_of(self.keys.shard(shard).due)
                pool = self._client.get_redis_connection(node).connection_pool
            else:
                pool = self._client.connection_pool
            link = self._routes[shard] = self._link_of(pool)
        return link

    def add(self, task_id: str, due_ms: int, payload: bytes) -> None:
        if self._again:
            self._route_again()
        shard = self.keys.shard_of(task_id)
        buffer = self._buffers.get(shard)
        if buffer is None:
            buffer = self._buffers[shard] = []
            self._raw[shard] = []
        self._raw[shard].append((task_id, due_ms, payload))
        if self.shared is not None:
            payload, write = self.shared.compact(shard, payload)
            if write is not None:
                self._writes.setdefault(shard, {})[write[1]] = write[2]
        packed = member(task_id)
        tid = packed if type(packed) is bytes else task_id.encode("utf-8")
        due = b"%d" % due_ms
        buffer.append(b"$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$0\r\n\r\n" % (
            len(tid), tid, len(due), due, len(payload), payload,
        ))
        if len(buffer) >= self.chunk:
            raw = self._raw[shard]
            self._buffers[shard], self._raw[shard] = [], []
            self._send(shard, buffer, raw)

    def _route_again(self) -> None:
        again, self._again = self._again, []
        for task_id, due_ms, payload in again:
            self.add(task_id, due_ms, payload)

    def _send(self, shard: int, entries: list[bytes], raw: Raw) -> None:
        head = self._heads.get(shard)
        if head is None:
            keys, args = schedule_head(self.keys, shard, replace=False, text_ids=self.text_ids)
            self._head_len = 3 + len(keys) + len(args)  # EVAL, script, numkeys, keys, arguments
            head = self._heads[shard] = self._script + b"".join(
                _bulk(str(v).encode("utf-8")) for v in (*keys, *args)
            )
        try:
            link = self._route(shard)
            commands = []
            key = self.keys.shard(shard).shared.encode("utf-8")
            for sid, prefix in self._writes.pop(shard, {}).items():
                commands.append(b"*4\r\n" + _bulk(b"HSETNX") + _bulk(key) + _bulk(sid) + _bulk(prefix))
            # No health check: its PING would read the reply of a chunk still outstanding.
            count = self._head_len + SCHEDULE_ENTRY_ARGS * len(entries)
            commands.append(b"*%d\r\n%b%b" % (count, head, b"".join(entries)))
            link.conn.send_packed_command(commands, check_health=False)
            link.outstanding += 1
            link.sent.append(raw)
            link.prefixes.append(len(commands) - 1)
            while link.outstanding > WINDOW:
                self._read(link)
        except BaseException:
            self._abort()
            raise

    def _read(self, link: _Link) -> None:
        for _ in range(link.prefixes.popleft()):  # the shared prefixes' HSETNX, sent ahead of the chunk
            link.conn.read_response()
        try:
            replies = link.conn.read_response()
        except ResponseError as exc:
            link.outstanding -= 1
            refused = link.sent.popleft()
            if self._moved is None or not layout_refused(exc):
                raise
            self._relayout(refused, exc)
            return
        link.outstanding -= 1
        link.sent.popleft()
        self.created += sum(1 for r in replies if r == 1)

    def _relayout(self, refused: Raw, exc: ResponseError) -> None:
        """A shard refused a chunk routed with these keys: route it, and what is buffered, again."""
        assert self._moved is not None
        keys = self._moved()
        if keys.shards != refused_count(exc) and keys == self.keys:
            raise exc
        if keys != self.keys:
            self.keys = keys
            self._heads.clear()  # a shard's keys keep their names (and slot): only the count changes
            for raw in self._raw.values():
                self._again += raw
            self._buffers.clear()
            self._raw.clear()
            self._writes.clear()  # the entries routed again ask for theirs again
        self._again += refused

    def close(self) -> int:
        """Send what is buffered, wait for every reply and give the connections back."""
        if not self._open:
            return self.created
        try:
            while True:
                self._route_again()
                buffers, raws = self._buffers, self._raw
                self._buffers, self._raw = {}, {}
                for shard, entries in buffers.items():
                    if entries:
                        self._send(shard, entries, raws[shard])
                for link in list(self._links.values()):
                    while link.outstanding:
                        self._read(link)
                if not self._again and not self._buffers:
                    break
            if self._wait is not None:
                for link in self._links.values():
                    link.conn.send_packed_command(link.conn.pack_command("WAIT", *self._wait), check_health=False)
            if self._wait is not None:
                for link in self._links.values():
                    self._scripts.check_wait(link.conn.read_response())
        except BaseException:
            self._abort()
            raise
        for link in self._links.values():
            link.pool.release(link.conn)
        self._links.clear()
        self._open = False
        return self.created

    def _abort(self) -> None:
        for link in self._links.values():
            link.conn.disconnect()  # unread replies must not reach the pool's next user
            link.pool.release(link.conn)
        self._links.clear()
        self._open = False

    def __enter__(self) -> ScheduleStream:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()

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
from types import TracebackType
from typing import Any

import redis

from ..model.keys import KeySpace
from .schedule import SCHEDULE_ENTRY_ARGS, schedule_head
from .scripts import sources
from .shared import Shared

WINDOW = 8  # chunks sent and not yet answered: enough to keep Redis busy, bounded buffers


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


class _Link:
    """One connection of the stream (one per cluster node) and its replies not yet read."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.conn: Any = pool.get_connection()
        self.outstanding = 0
        self.kinds: deque[bool] = deque()  # per reply not read yet: True for a chunk's, False for an HSETNX's


class ScheduleStream:
    """``add()`` entries (any shard order), then ``close()``; returns how many were new.

    For new entries without an idempotency key (bulk scheduling); an id already pending is left
    as it is and not counted. Any error drops the connections (outstanding replies with them) and
    is raised: entries sent before it may be stored, as with a failed pipeline. On a Redis Cluster
    each shard's chunks go to the node serving its slot, one connection per node, each with its
    own window; a slot that moves mid-stream fails the stream (sending it again is safe: stored
    ids are left as they are). With ``scripts.wait`` set, ``close()`` ends with ``WAIT`` on each
    connection.
    """

    def __init__(self, client: Any, keys: KeySpace, chunk: int, scripts: Any = None, *,
                 shared: Shared | None = None) -> None:
        source = sources()["schedule"]
        self.keys = keys
        self.chunk = chunk
        self.shared = shared
        self._writes: dict[int, dict[bytes, bytes]] = {}  # shard -> shared prefixes its buffer refers to
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
        shard = self.keys.shard_of(task_id)
        buffer = self._buffers.get(shard)
        if buffer is None:
            buffer = self._buffers[shard] = []
        if self.shared is not None:
            payload, write = self.shared.compact(shard, payload)
            if write is not None:
                self._writes.setdefault(shard, {})[write[1]] = write[2]
        tid = task_id.encode("utf-8")
        due = b"%d" % due_ms
        buffer.append(b"$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$0\r\n\r\n" % (
            len(tid), tid, len(due), due, len(payload), payload,
        ))
        if len(buffer) >= self.chunk:
            self._send(shard, buffer)
            self._buffers[shard] = []

    def _send(self, shard: int, entries: list[bytes]) -> None:
        head = self._heads.get(shard)
        if head is None:
            keys, args = schedule_head(self.keys, shard, replace=False)
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
                link.kinds.append(False)
            # No health check: its PING would read the reply of a chunk still outstanding.
            count = self._head_len + SCHEDULE_ENTRY_ARGS * len(entries)
            commands.append(b"*%d\r\n%b%b" % (count, head, b"".join(entries)))
            link.conn.send_packed_command(commands, check_health=False)
            link.kinds.append(True)
            link.outstanding += 1
            while link.outstanding > WINDOW:
                self._read(link)
        except BaseException:
            self._abort()
            raise

    def _read(self, link: _Link) -> None:
        while not link.kinds[0]:  # a shared prefix's HSETNX, sent ahead of its chunk
            link.conn.read_response()
            link.kinds.popleft()
        replies = link.conn.read_response()
        link.kinds.popleft()
        link.outstanding -= 1
        self.created += sum(1 for r in replies if r == 1)

    def close(self) -> int:
        """Send what is buffered, wait for every reply and give the connections back."""
        if not self._open:
            return self.created
        for shard, entries in self._buffers.items():
            if entries:
                self._send(shard, entries)
        self._buffers.clear()
        try:
            if self._wait is not None:
                for link in self._links.values():
                    link.conn.send_packed_command(link.conn.pack_command("WAIT", *self._wait), check_health=False)
            for link in self._links.values():
                while link.outstanding:
                    self._read(link)
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

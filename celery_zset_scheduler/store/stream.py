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

from ..model.keys import KeySpace
from .schedule import SCHEDULE_ENTRY_ARGS, schedule_head
from .scripts import sources
from .shared import Shared

WINDOW = 8  # chunks sent and not yet answered: enough to keep Redis busy, bounded buffers


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


class ScheduleStream:
    """``add()`` entries (any shard order), then ``close()``; returns how many were new.

    For new entries without an idempotency key (bulk scheduling); an id already pending is left
    as it is and not counted. Any error drops the connection (outstanding replies with it) and is
    raised: entries sent before it may be stored, as with a failed pipeline.
    """

    def __init__(self, client: Any, keys: KeySpace, chunk: int, shared: Shared | None = None) -> None:
        source = sources()["schedule"]
        self.keys = keys
        self.chunk = chunk
        self.shared = shared
        self._pool = client.connection_pool
        self._conn: Any = self._pool.get_connection()
        self._buffers: dict[int, list[bytes]] = {}
        self._writes: dict[int, dict[bytes, bytes]] = {}  # shard -> shared prefixes its buffer refers to
        self._replies: deque[bool] = deque()  # per reply outstanding: True for a chunk's
        self._heads: dict[int, bytes] = {}
        self._script = _bulk(b"EVAL") + _bulk(source.text.encode("utf-8")) + _bulk(b"%d" % source.numkeys)
        self._outstanding = 0
        self.created = 0

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
            commands = []
            key = self.keys.shard(shard).shared.encode("utf-8")
            for sid, prefix in self._writes.pop(shard, {}).items():
                commands.append(b"*4\r\n" + _bulk(b"HSETNX") + _bulk(key) + _bulk(sid) + _bulk(prefix))
                self._replies.append(False)
            # No health check: its PING would read the reply of a chunk still outstanding.
            count = self._head_len + SCHEDULE_ENTRY_ARGS * len(entries)
            commands.append(b"*%d\r\n%b%b" % (count, head, b"".join(entries)))
            self._conn.send_packed_command(commands, check_health=False)
            self._replies.append(True)
            self._outstanding += 1
            while self._outstanding > WINDOW:
                self._read()
        except BaseException:
            self._abort()
            raise

    def _read(self) -> None:
        while not self._replies[0]:  # a shared prefix's HSETNX, sent ahead of its chunk
            self._conn.read_response()
            self._replies.popleft()
        replies = self._conn.read_response()
        self._replies.popleft()
        self._outstanding -= 1
        self.created += sum(1 for r in replies if r == 1)

    def close(self) -> int:
        """Send what is buffered, wait for every reply and give the connection back."""
        if self._conn is None:
            return self.created
        for shard, entries in self._buffers.items():
            if entries:
                self._send(shard, entries)
        self._buffers.clear()
        try:
            while self._outstanding:
                self._read()
        except BaseException:
            self._abort()
            raise
        self._pool.release(self._conn)
        self._conn = None
        return self.created

    def _abort(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()  # unread replies must not reach the pool's next user
            self._pool.release(self._conn)
            self._conn = None

    def __enter__(self) -> ScheduleStream:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()

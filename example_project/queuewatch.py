"""When each demo task arrived in the broker queue, as Redis itself saw it.

A ``MONITOR`` connection receives every command the server runs, stamped with the server's own
clock (microseconds). The dispatcher hands a batch to the queue with ``LPUSH`` (Kombu's Redis
transport does too), so the stamp of the LPUSH that carries a task's message is its arrival in the
queue, and arrival minus due time is the dispatch lateness: what the dispatchers control, before
any worker backlog. It is measured outside the product (nothing in the dispatcher reports it) and
costs Redis some CPU while it runs; a server that refuses MONITOR (some managed services) gives no
dispatch figures, and the demo says so.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import redis

_ID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class QueueWatch:
    """Arrival time (server clock, epoch seconds) of the demo's tasks in the queue.

    :meth:`expect` gives the due time of each task id; arrivals seen before it are matched too.
    """

    def __init__(self, url: str) -> None:
        self.arrivals: list[tuple[float, float]] = []  # (due, arrival - due), in arrival order
        self.error: str | None = None
        self._due: dict[bytes, float] | None = None
        self._early: list[tuple[float, list[bytes]]] = []  # LPUSHes seen before expect()
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()
        self._client = redis.Redis.from_url(url)
        self._conn: Any = None
        self._thread = threading.Thread(target=self._run, name="demo-queue-watch", daemon=True)

    def start(self) -> QueueWatch:
        self._conn = self._client.connection_pool.get_connection()
        try:
            self._conn.send_command("MONITOR")
            self._conn.read_response()
        except redis.RedisError as exc:
            self.error = f"MONITOR refused ({exc})"
            return self
        self._thread.start()
        return self

    def expect(self, due: dict[str, float]) -> None:
        with self._lock:
            self._due = {task_id.encode(): when for task_id, when in due.items()}
            for stamp, ids in self._early:
                self._match(stamp, ids)
            self._early = []

    def _run(self) -> None:
        try:
            while True:
                line = self._conn.read_response()
                if b'"LPUSH"' not in line[:200] and b'"lpush"' not in line[:200]:
                    continue
                stamp, ids = float(line.split(b" ", 1)[0]), _ID.findall(line)
                with self._lock:
                    if self._due is None:
                        self._early.append((stamp, ids))
                    else:
                        self._match(stamp, ids)
        except (redis.RedisError, OSError, AttributeError, ValueError):
            return  # closed by stop(), or the server went away: what was seen stays

    def _match(self, stamp: float, ids: list[bytes]) -> None:
        assert self._due is not None
        for task_id in ids:
            due = self._due.get(task_id)
            if due is not None and task_id not in self._seen:  # a republished copy is not an arrival
                self._seen.add(task_id)
                self.arrivals.append((due, stamp - due))

    def lateness(self, last: int | None = None) -> list[float]:
        values = self.arrivals[-last:] if last else self.arrivals
        return [late for _, late in values]

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
        self._thread.join(timeout=5)

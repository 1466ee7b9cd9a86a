"""A Redis broker's backlog: Kombu's queue lists (with their priority sub-lists) and ``unacked``.

A queue list is read from its oldest end, one message at a time, each moved atomically
(``RPOPLPUSH``) into a staging list of its own first; from there it is imported (then dropped
from staging) or moved back to the queue (``RPOPLPUSH``: the kept messages stay in their order).
A message is thus always in the queue, in staging or in the store, and a run begins by finishing
what an interrupted one left in staging. Only as many messages as the queue held at the start are
looked at, so kept messages are not read twice.

``unacked`` (the messages workers had fetched and not acked, restored by Kombu to their queue
after the visibility timeout) is read in place: a future one is imported, then removed from the
hash and its index in one transaction; the others are left for Kombu to restore.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis

from ...model.codec import StoredMessage
from ..core.messages import message_properties
from ..core.state import broker_redis_url
from .common import Importer, Summary, clean_headers

STAGING = "zset-import:staging:"  # + the queue list's name
_TRANSPORT = ("delivery_info", "delivery_tag", "body_encoding")


class RedisBacklog:
    def __init__(self, app: Any, importer: Importer) -> None:
        self.app = app
        self.importer = importer
        options = app.conf.broker_transport_options or {}
        self.prefix = str(options.get("global_keyprefix") or "")
        self.sep = str(options.get("sep", "\x06\x16"))
        self.steps = list(options.get("priority_steps") or [0, 3, 6, 9])
        self.unacked = self.prefix + str(options.get("unacked_key", "unacked"))
        self.unacked_index = self.prefix + str(options.get("unacked_index_key", "unacked_index"))
        url = broker_redis_url(app)
        assert url is not None
        self.client: Any = redis.Redis.from_url(url)

    def lists(self, queue: str) -> list[str]:
        """The queue's Redis lists, as Kombu names them (``_q_for_pri``)."""
        return [self.prefix + (f"{queue}{self.sep}{p}" if p else queue) for p in self.steps]

    def run(self, queues: Sequence[str], total: Callable[[int], None], explicit: bool) -> list[Summary]:
        lists = [(q, key) for q in queues for key in self.lists(q)]
        sizes = {key: int(self.client.llen(key)) + int(self.client.llen(STAGING + key)) for _, key in lists}
        unacked = int(self.client.hlen(self.unacked))
        total(sum(sizes.values()) + unacked)
        summaries = []
        for queue in queues:
            summary = Summary(queue)
            for key in self.lists(queue):
                self._list(queue, key, sizes[key], summary)
            summaries.append(summary)
        summary = Summary(self.unacked)
        self._unacked(set(queues) if explicit else None, summary)
        summaries.append(summary)
        return summaries

    # -- queue lists -------------------------------------------------------------------------------

    def _list(self, queue: str, key: str, size: int, summary: Summary) -> None:
        staging = STAGING + key
        bound = int(self.client.llen(key)) if size else 0  # kept messages go back behind these
        if self.importer.dry_run:
            for raw in self._peek(key, size):
                self._decide(queue, raw, summary, staging=None, key=key)
            return
        # What an interrupted run left in staging first, then at most what the list held.
        while self.client.llen(staging):
            raw = self.client.lindex(staging, -1)
            if raw is None:
                break
            self._decide(queue, raw, summary, staging, key)
        for _ in range(bound):
            raw = self.client.rpoplpush(key, staging)
            if raw is None:
                break
            self._decide(queue, raw, summary, staging, key)

    def _peek(self, key: str, size: int, page: int = 1000) -> Iterator[bytes]:
        for start in range(0, size, page):
            yield from reversed(self.client.lrange(key, -(start + page), -(start + 1)))

    def _decide(self, queue: str, raw: bytes, summary: Summary, staging: str | None, key: str) -> None:
        summary.seen += 1
        message = parse(raw, queue)
        due = self.importer.due_ms(message) if message is not None else None
        if message is None:
            summary.unreadable += 1
        elif due is None:
            summary.kept += 1
        else:
            self.importer.take(message, due, summary)
        if staging is not None:
            if due is not None:
                self.client.rpop(staging)  # imported: the store has it
            else:
                self.client.rpoplpush(staging, key)  # back into its queue
        self.importer.progress(1)

    # -- unacked ----------------------------------------------------------------------------------

    def _unacked(self, queues: set[str] | None, summary: Summary) -> None:
        for tag, raw in self.client.hscan_iter(self.unacked, count=500):
            summary.seen += 1
            self.importer.progress(1)
            try:
                payload, exchange, routing_key = json.loads(raw)
            except (TypeError, ValueError):
                summary.unreadable += 1
                continue
            queue = self._queue_of(str(exchange or ""), str(routing_key or ""))
            if queues is not None and queue not in queues:
                summary.seen -= 1
                continue
            message = parse(json.dumps(payload).encode(), queue)
            due = self.importer.due_ms(message) if message is not None else None
            if message is None:
                summary.unreadable += 1
            elif due is None:
                summary.kept += 1  # Kombu restores it to its queue
            else:
                self.importer.take(message, due, summary)
                if not self.importer.dry_run:
                    with self.client.pipeline(transaction=True) as pipe:
                        pipe.zrem(self.unacked_index, tag)
                        pipe.hdel(self.unacked, tag)
                        pipe.execute()

    def _queue_of(self, exchange: str, routing_key: str) -> str | None:
        if not exchange:
            return routing_key or None
        found = [q.name for q in self.app.amqp.queues.values()
                 if q.exchange is not None and q.exchange.name == exchange and q.routing_key == routing_key]
        return found[0] if len(found) == 1 else None


def parse(raw: bytes, queue: str | None) -> StoredMessage | None:
    """A Kombu Redis envelope in the store's form (None: not one)."""
    try:
        data = json.loads(raw)
        properties = dict(data.get("properties") or {})
        headers = clean_headers(dict(data.get("headers") or {}))
        body = data["body"]
        if properties.get("body_encoding") == "base64":
            body = base64.b64decode(body)
        elif isinstance(body, str):
            body = body.encode(data.get("content-encoding") or "utf-8")
        delivery = properties.get("delivery_info") or {}
        task_id = headers.get("id") or properties.get("correlation_id")
        if not isinstance(task_id, str) or not task_id:
            return None
        kept = {k: v for k, v in properties.items() if k not in _TRANSPORT}
        return StoredMessage(
            task_id=task_id, body=bytes(body), headers=headers,
            content_type=str(data.get("content-type") or "application/json"),
            content_encoding=str(data.get("content-encoding") or "utf-8"),
            properties=message_properties(kept, headers),
            exchange=str(delivery.get("exchange") or ""), routing_key=str(delivery.get("routing_key") or ""),
            queue=queue,
        )
    except (TypeError, ValueError, KeyError, AttributeError):
        return None

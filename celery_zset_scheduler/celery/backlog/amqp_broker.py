# mypy: disallow-untyped-calls=False
"""A RabbitMQ broker's backlog: the app's queues and, for quorum queues, Celery's delay queues.

Each queue is read with ``basic.get`` (manual acks) as many times as it held messages at the
start. A future message is imported, then acked (the broker drops it); every other one stays
unacked until the queue is done and is then handed back (``basic.reject(requeue)``), so the
broker puts it back where it was. A connection lost in between (a crash of the command) makes the
broker requeue every unacked message itself: nothing is lost, and an imported message requeued
that way is only acked by the next run (the store remembers it was imported).

A message parked in Celery's native delayed delivery (``celery_delayed_<n>``: routing key = 28 delay
bits + the queue's routing key) is stored with its queue's own exchange and routing key, found
among the app's queues by that routing key; one that matches none (or several) is kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from ...model.codec import StoredMessage
from ..core.messages import message_properties
from ..producer.timed import DELAY_PREFIX
from .common import Importer, Summary, clean_headers

DELAY_QUEUES = tuple(f"celery_delayed_{n}" for n in range(28))


class AmqpBacklog:
    def __init__(self, app: Any, importer: Importer) -> None:
        self.app = app
        self.importer = importer
        self.connection = app.connection_for_write()

    def run(self, queues: Sequence[str], total: Callable[[int], None], explicit: bool) -> list[Summary]:
        try:
            self.connection.ensure_connection(max_retries=1)
            names = list(queues) + ([] if explicit else list(DELAY_QUEUES))
            sizes = {name: n for name in names if (n := self._size(name)) is not None}
            total(sum(sizes.values()))
            return [self._queue(name, size) for name, size in sizes.items()
                    if size or name not in DELAY_QUEUES]
        finally:
            with contextlib.suppress(Exception):
                self.connection.release()

    def _size(self, name: str) -> int | None:
        """Ready messages of the queue, or None when it does not exist (a passive declare)."""
        channel = self.connection.channel()
        try:
            _, count, consumers = channel.queue_declare(queue=name, passive=True)
        except self.connection.channel_errors as exc:
            if getattr(exc, "code", None) == 404:
                return None
            raise
        else:
            if consumers and not self.importer.dry_run:
                raise RuntimeError(f"queue {name!r} has {consumers} consumer(s): stop the workers first")
            return int(count)
        finally:
            with contextlib.suppress(Exception):
                channel.close()

    def _queue(self, name: str, size: int) -> Summary:
        summary = Summary(name)
        channel = self.connection.channel()
        kept: list[int] = []
        try:
            for _ in range(size):
                got = channel.basic_get(name, no_ack=False)
                if got is None:
                    break
                summary.seen += 1
                message = self._parse(got, name)
                due = self.importer.due_ms(message) if message is not None else None
                if message is None:
                    summary.unreadable += 1
                elif due is None:
                    summary.kept += 1
                else:
                    self.importer.take(message, due, summary)
                if due is not None and not self.importer.dry_run:
                    channel.basic_ack(got.delivery_tag)
                else:
                    kept.append(got.delivery_tag)
                self.importer.progress(1)
            for tag in kept:  # everything not imported goes back where it was
                channel.basic_reject(tag, requeue=True)
        finally:
            with contextlib.suppress(Exception):
                channel.close()
        return summary

    def _parse(self, got: Any, queue: str) -> StoredMessage | None:
        props = dict(got.properties or {})
        headers = clean_headers(dict(props.pop("application_headers", None) or {}))
        task_id = headers.get("id") or props.get("correlation_id")
        if not isinstance(task_id, str) or not task_id:
            return None
        body = got.body
        content_encoding = str(props.pop("content_encoding", None) or "utf-8")
        if isinstance(body, str):
            body = body.encode(content_encoding)
        content_type = str(props.pop("content_type", None) or "application/json")
        exchange = str(got.delivery_info.get("exchange") or "")
        routing_key = str(got.delivery_info.get("routing_key") or "")
        target: str | None = queue
        if queue in DELAY_QUEUES:
            found = self._original(DELAY_PREFIX.sub("", routing_key, count=1))
            if found is None:
                return None
            target, exchange, routing_key = found
        return StoredMessage(task_id=task_id, body=bytes(body), headers=headers, content_type=content_type,
                             content_encoding=content_encoding, properties=message_properties(props, headers),
                             exchange=exchange, routing_key=routing_key, queue=target)

    def _original(self, routing_key: str) -> tuple[str, str, str] | None:
        """The app's queue a delayed message was meant for: (queue, exchange, routing key)."""
        found = [q for q in self.app.amqp.queues.values() if q.routing_key == routing_key]
        if len(found) != 1:
            return None
        q = found[0]
        return q.name, q.exchange.name if q.exchange is not None else "", routing_key

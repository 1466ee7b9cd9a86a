"""Publishing stored messages through Kombu, unchanged: same id, headers, routing and priority.

Kombu builds every message (envelope, priority queue, bindings), so what lands in the queue is what
Kombu itself would write. Three ways, fastest first (docs/benchmarks.md has the figures):

- a Redis broker: :mod:`.redis_queue`, a dispatcher batch in one transaction of multi-value LPUSHes,
  each envelope from a template of Kombu's own (:mod:`.templates`);
- a transport that batches (Kombu >= 5.7's ``Producer.batch()``): one pipelined flush a chunk;
- any other: one ``Producer.publish`` a message, with ``task_publish_retry_policy``.

The lease of each shard is checked at the moment of hand-off: inside the Redis transaction when
the broker is the store's own server and database, otherwise right before each transaction, flush
or message. So a dispatcher paused past its lease publishes at most what one such call was already
sending when the pause began, never the rest of its batch. The revoke records of the messages are
read at the same points (one round trip per transaction, flush or ``CHECK_EVERY`` messages): a
message revoked since its claim is held back (I10).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kombu.entity import Exchange, Queue
from kombu.exceptions import OperationalError

from ...dispatch.handoff import Built, Guard, Outgoing, PublishReport
from ...model.codec import StoredMessage
from . import redis_queue
from .declare import declare
from .envelope import outgoing
from .reach import reachable
from .templates import Templates

# Properties that Producer.publish takes as arguments of their own.
_ARGUMENT_PROPERTIES = ("delivery_mode", "priority")
# Messages per pipelined flush; the batch's own limit (operations, up to 5 a message with queue
# expiry) is set above it so that Kombu never flushes a part we would not count as published.
FLUSH_EVERY = 1000
# Messages published one by one between two reads of their revoke records.
CHECK_EVERY = 100


class KombuPublisher:
    """Publishes with the app's producer pool and ``task_publish_retry_policy``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._same_redis: dict[int, bool] = {}  # broker client -> is it the store's server and db
        self.templates = Templates()  # Kombu's envelopes by task, queue and routing (redis_queue)

    def publish(self, batch: Sequence[Outgoing], guard: Guard) -> PublishReport:
        published = 0
        refused: dict[int, BaseException] = {}
        lapsed: set[int] = set()
        revoked: set[int] = set()
        messages = [o.message for o in batch]
        try:
            with self.app.producer_or_acquire() as producer:
                reachable(producer)
                self._declare_exchanges(producer, messages)
                if messages and redis_queue.can_publish(producer, messages):
                    self._declare(producer, messages)
                    same = self._is_store_redis(producer, guard)
                    refused, lapsed, revoked = redis_queue.publish(  # all or nothing
                        producer, batch, guard, same, self.templates)
                    return PublishReport(len(batch), unpublishable=refused, lapsed=frozenset(lapsed),
                                         revoked=frozenset(revoked))
                # getattr: Producer.batch() is new in Kombu 5.7 (the project allows older ones).
                if len(batch) > 1 and getattr(producer, "supports_batch_publish", False):
                    return self._publish_batched(producer, batch, guard)
                outage = outage_errors(producer)
                for i, item in enumerate(batch):
                    if i % CHECK_EVERY == 0:
                        revoked |= {i + n for n in guard.revoked(batch[i:i + CHECK_EVERY])}
                    if i not in revoked:
                        if guard.still_ours(item.shard):
                            self._publish_or_refuse(producer, item.message, True, outage, refused, i)
                        else:
                            lapsed.add(i)
                    published += 1
        except Exception as exc:  # the broker is unreachable: the dispatcher releases the rest
            return PublishReport(published, exc, refused, frozenset(lapsed),
                                 frozenset(i for i in revoked if i < published))
        return PublishReport(published, unpublishable=refused, lapsed=frozenset(lapsed), revoked=frozenset(revoked))

    def publish_built(self, batch: Sequence[Outgoing | Built], guard: Guard) -> PublishReport | None:
        """The batch in one Redis transaction, envelopes built by the store among the messages;
        None when the broker is not Kombu's Redis transport or a message goes to a fanout."""
        messages = [o.message for o in batch if isinstance(o, Outgoing)]
        try:
            with self.app.producer_or_acquire() as producer:
                reachable(producer)
                self._declare_exchanges(producer, messages)
                if not redis_queue.can_publish(producer, messages):
                    return None
                self._declare(producer, messages)
                same = self._is_store_redis(producer, guard)
                refused, lapsed, revoked = redis_queue.publish(producer, batch, guard, same, self.templates)
        except Exception as exc:  # the broker is unreachable: the dispatcher releases the batch
            return PublishReport(0, exc)
        return PublishReport(len(batch), unpublishable=refused, lapsed=frozenset(lapsed), revoked=frozenset(revoked))

    def _publish_batched(self, producer: Any, batch: Sequence[Outgoing], guard: Guard) -> PublishReport:
        """Flushes every ``FLUSH_EVERY`` messages; a failed flush counts none of its messages.

        Kombu calls a failed pipeline's outcome uncertain (some writes may have landed): those
        messages go back to ``due`` and may be published twice, never lost (I2).
        """
        published = 0
        declared: set[str] = set()
        refused: dict[int, BaseException] = {}
        lapsed: set[int] = set()
        revoked: set[int] = set()
        outage = outage_errors(producer)
        try:
            with producer.batch(max_size=5 * FLUSH_EVERY + 1) as pending:
                for start in range(0, len(batch), FLUSH_EVERY):
                    chunk = batch[start:start + FLUSH_EVERY]
                    ours = {s: guard.still_ours(s) for s in {o.shard for o in chunk}}
                    revoked |= {start + n for n in guard.revoked(chunk)}
                    for i, item in enumerate(chunk, start):
                        if i in revoked:
                            continue
                        if not ours[item.shard]:
                            lapsed.add(i)
                            continue
                        m = item.message
                        # maybe_declare caches per channel; asking once per queue saves the lookups.
                        first = m.queue is not None and m.queue not in declared
                        self._publish_or_refuse(producer, m, first, outage, refused, i)
                        if first:
                            declared.add(str(m.queue))
                    pending.flush()
                    published += len(chunk)
        except Exception as exc:
            return PublishReport(published, exc, {i: e for i, e in refused.items() if i < published},
                                 frozenset(i for i in lapsed if i < published),
                                 frozenset(i for i in revoked if i < published))
        return PublishReport(published, unpublishable=refused, lapsed=frozenset(lapsed), revoked=frozenset(revoked))

    def _is_store_redis(self, producer: Any, guard: Guard) -> bool:
        """Whether the broker's Redis is the store's server and database (checked once per client)."""
        with producer.channel.conn_or_acquire() as client:
            key = id(client.connection_pool)
            if key not in self._same_redis:
                self._same_redis[key] = redis_queue.same_server_and_db(client, guard.store_client)
            return self._same_redis[key]

    def _publish_or_refuse(self, producer: Any, m: StoredMessage, declare: bool,
                           outage: tuple[type[BaseException], ...], refused: dict[int, BaseException],
                           index: int) -> None:
        """Publish one message; an error of the message itself (not an outage, which is raised)
        is recorded in ``refused`` and the batch goes on."""
        try:
            self._publish_one(producer, m, declare=declare)
        except outage:
            raise
        except Exception as exc:
            refused[index] = exc

    def _declare_exchanges(self, producer: Any, messages: Sequence[StoredMessage]) -> None:
        """Declare the app's exchanges the batch names, so that the channel knows their types: a
        fanout (a ``Broadcast`` queue, which has no queue of its own to declare) would otherwise be
        taken for a direct exchange without bindings, and its message dropped."""
        names = {m.exchange for m in messages if m.exchange}  # maybe_declare caches per channel
        if not names:
            return
        policy = self.app.conf.task_publish_retry_policy
        for queue in self.app.amqp.queues.values():
            exchange = queue.exchange
            if exchange is not None and exchange.name in names:
                declare(producer, exchange, policy)

    def _declare(self, producer: Any, messages: Sequence[StoredMessage]) -> None:
        policy = self.app.conf.task_publish_retry_policy
        for name in {m.queue for m in messages if m.queue}:
            declare(producer, self.queue(name), policy)

    def queue(self, name: str) -> Any:
        """The app's declaration of ``name``; for a queue the dispatcher's app does not know (the
        sender named a ``Queue`` of its own), the one Celery creates for a missing queue."""
        queues = self.app.amqp.queues
        found = queues.get(name)
        if found is None:
            found = Queue(name, Exchange(name, type="direct"), name)
        return found

    def _publish_one(self, producer: Any, m: StoredMessage, *, declare: bool) -> None:
        headers, properties, expiration = outgoing(m)
        extra = {k: properties.pop(k) for k in _ARGUMENT_PROPERTIES if k in properties}
        producer.publish(
            m.body,
            exchange=m.exchange,
            routing_key=m.routing_key,
            headers=headers,
            expiration=expiration,
            content_type=m.content_type,
            content_encoding=m.content_encoding,
            declare=[self.queue(m.queue)] if m.queue and declare else None,
            retry=True,
            retry_policy=self.app.conf.task_publish_retry_policy,
            **extra,
            **properties,
        )


def outage_errors(producer: Any) -> tuple[type[BaseException], ...]:
    """Errors that mean the broker cannot be reached (wait and retry), as opposed to errors of one
    message (refuse it)."""
    connection = producer.connection
    errors = tuple(getattr(connection, "connection_errors", ())) + tuple(getattr(connection, "channel_errors", ()))
    return (OperationalError, OSError, *errors)

"""Publishing to RabbitMQ (py-amqp) with publisher confirms, in batches.

A message counts as handed off (acked in the store) only once RabbitMQ confirmed it. The whole
batch is written on one confirm-mode channel of the publisher's own connection, coalesced into
writes of about ``write_bytes`` (:mod:`.amqp_wire`), acks are read while writing (without blocking)
and then waited for; an ack with ``multiple=True`` settles every earlier delivery tag at once. The
fates of the messages (:class:`~.amqp_wire.Fates`) become the :class:`PublishReport`:

=================  ==========================================================================
``confirmed``      published (acked with the next claim)
``unconfirmed``,   not published: back to ``due`` and published again. An unconfirmed message
``not_sent``,      may already be in the queue (measured after a cut connection: every confirmed
``nacked``         message is in the queue, and some unconfirmed ones): at-least-once, within
                   I2's bound, each entry goes out once per claim. A nack or an outage also
                   makes the dispatcher back off (``error``) instead of claiming them at once.
``returned``       ``unpublishable``: dead-lettered with the broker's reason. A ``mandatory``
                   message routed to no queue is routed nowhere again until someone binds a
                   queue: released to ``due`` it would come back at once and block its shard;
                   plain Celery (no ``mandatory``) drops it silently. ``celery zset dlq requeue``
                   sends it again once the binding exists.
``refused``        ``unpublishable`` too: it cannot be encoded, or names an exchange that does not
                   exist (a publish to it would close the channel, with the whole batch).
=================  ==========================================================================

The guard is honoured as by the Kombu publisher: the revoke records of the batch are read once
every ``check_every`` messages, before they are written (a revoked message is held back, I10), and
the lease of each shard in a write is checked right before that write, after its messages are
encoded (a lapsed shard's messages are held back and go back to ``due``), so a dispatcher paused
past its lease publishes at most the one write it was making. The queues of the batch are
declared first, as Celery declares them (:mod:`.amqp_channel`).

The publisher owns its connection (``app.connection_for_write()``: ``broker_write_url`` if set):
the dispatcher's thread is its only user. A connection the broker closed (an outage, a forced
close) is noticed before the next batch and replaced; connecting is tried once per pass, so an
outage is waited out by the dispatcher's backoff, with its heartbeats going on.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...dispatch.handoff import Guard, Outgoing, PublishReport
from ...errors import ZSetSchedulerError
from ...model.logs import log_event
from .amqp_channel import ConfirmChannel
from .amqp_templates import Templates
from .amqp_wire import ENCODING_ERRORS, Fates, FrameEncoder, Returned


class MessageReturned(ZSetSchedulerError):
    """RabbitMQ returned a message: routed to no queue (the reason of its dead letter)."""


class MissingExchange(ZSetSchedulerError):
    """A message names an exchange that does not exist (the reason of its dead letter)."""


class BrokerRefused(ZSetSchedulerError):
    """RabbitMQ nacked messages (a full queue with ``x-overflow: reject-publish``, a queue error)."""


class ConfirmTimeout(TimeoutError):
    """Some messages were neither acked nor nacked within the confirm timeout."""


class ConfirmPublisher(ConfirmChannel):
    """``window`` bounds the messages written and not yet settled; ``confirm_timeout`` how long a
    batch waits for its last confirms (keep it well inside the in-flight lease)."""

    mandatory = True

    def __init__(self, app: Any, *, window: int = 5000, confirm_timeout: float = 10.0,
                 write_bytes: int = 64 * 1024, check_every: int = 1000, drain_every: int = 256) -> None:
        if window < 1 or check_every < 1:
            raise ValueError("window and check_every must be at least 1")
        super().__init__(app)
        self.window = window
        self.confirm_timeout = confirm_timeout
        self.write_bytes = write_bytes
        self.check_every = check_every
        self.drain_every = drain_every
        self._templates = Templates()  # the encoded properties of each shape of message, kept across batches
        # Per batch: unsettled tag -> index; tags in publish order (for multiple acks); per
        # (exchange, routing key, id) the unsettled tags (a basic.return carries no tag).
        self._pending: dict[int, int] = {}
        self._order: collections.deque[int] = collections.deque()
        self._by_key: dict[tuple[str, str, str | None], collections.deque[int]] = {}
        self._returned: dict[int, Returned] = {}
        self._fates: Fates | None = None

    # -- the Publisher protocol ------------------------------------------------------------------

    def publish(self, batch: Sequence[Outgoing], guard: Guard) -> PublishReport:
        return self.begin(batch, guard).finish()

    def begin(self, batch: Sequence[Outgoing], guard: Guard) -> Batch:
        """Write ``batch`` (the guard checked right before each write) and return without waiting
        for its last confirms: :meth:`Batch.finish` waits for them. One batch at a time."""
        if self._fates is not None:
            raise RuntimeError("the batch before is still in flight: finish it first")
        return self._begin(batch, guard)

    # -- one batch -------------------------------------------------------------------------------

    def publish_fates(self, batch: Sequence[Outgoing], guard: Guard, lapsed: set[int], revoked: set[int]) -> Fates:
        """Publish ``batch`` and wait for its confirms; never raises for a broker failure (it is
        ``fates.error``, and the messages it concerns are ``unconfirmed``/``not_sent``)."""
        written = self._begin(batch, guard, lapsed, revoked)
        return self._finish(written)

    def _begin(self, batch: Sequence[Outgoing], guard: Guard, lapsed: set[int] | None = None,
               revoked: set[int] | None = None) -> Batch:
        fates = self._fates = Fates(len(batch))
        written = Batch(self, len(batch), fates, set() if lapsed is None else lapsed,
                        set() if revoked is None else revoked)
        revoked = written.revoked
        self._reset_batch()
        buffered: list[tuple[int, Outgoing, bytes]] = []  # encoded, not written yet
        try:
            channel = self._open_channel_alive()
            channel, missing = self._declare(channel, batch)
            conn = channel.connection
            encoder = FrameEncoder(channel.channel_id, conn.frame_max, self._templates.plain)
            properties = self._templates.encode
            size = since_drain = 0
            for start in range(0, len(batch), self.check_every):
                chunk = batch[start:start + self.check_every]
                revoked.update(start + n for n in guard.revoked(chunk))
                for index, item in enumerate(chunk, start):
                    written.reached = index + 1
                    if index in revoked:
                        fates.held.append(index)
                        continue
                    m = item.message
                    if m.exchange in missing:
                        fates.refused[index] = MissingExchange(
                            f"exchange {m.exchange!r} does not exist in RabbitMQ: declare it, then requeue")
                        continue
                    try:
                        frames = encoder.frames(m.exchange, m.routing_key, self.mandatory, m.body, properties(m))
                    except ENCODING_ERRORS as exc:  # nothing written: the batch goes on
                        fates.refused[index] = exc
                        continue
                    buffered.append((index, item, frames))
                    size += len(frames)
                    if size < self.write_bytes and len(self._pending) + len(buffered) < self.window:
                        continue
                    since_drain += len(buffered)
                    self._write_ours(conn, buffered, guard, written)
                    size = 0
                    if len(self._pending) >= self.window:
                        low = self.window // 2
                        self._wait_until(lambda low=low: len(self._pending) <= low)  # type: ignore[misc]
                    elif since_drain >= self.drain_every:
                        self._drain_nowait()  # keeps the socket's receive side from backing up
                        since_drain = 0
            if buffered:
                self._write_ours(conn, buffered, guard, written)
            self._drain_nowait()  # the confirms already in: a batch may be settled at once
        except Exception as exc:  # connection or channel errors, a confirm timeout, the store (revokes)
            fates.error = exc
            fates.not_sent.extend(index for index, _, _ in buffered)  # encoded, never written
            self._forget_channel()
        written.written_at = time.monotonic()
        return written

    def _finish(self, written: Batch) -> Fates:
        """Wait for the batch's last confirms (``confirm_timeout`` from its last write); its fates."""
        fates = written.fates
        if self._fates is not fates:
            raise RuntimeError("this batch was finished already")
        try:
            if fates.error is None:
                self._wait_until(lambda: not self._pending, written.written_at + self.confirm_timeout)
        except Exception as exc:  # connection or channel errors, a confirm timeout
            fates.error = exc
            self._forget_channel()
        finally:
            for tag, index in self._pending.items():
                returned = self._returned.get(tag)
                if returned is not None:  # returned, its ack lost: still certainly not enqueued
                    fates.returned[index] = returned
                else:
                    fates.unconfirmed.append(index)
            fates.not_sent.extend(range(written.reached, written.size))
            self._reset_batch()
            self._fates = None
        return fates

    def _write_ours(self, conn: Any, buffered: list[tuple[int, Outgoing, bytes]], guard: Guard,
                    written: Batch) -> None:
        """Write the buffered messages of the shards still ours, their leases checked now, right
        before the write: a dispatcher paused past its lease writes nothing once it resumes but
        the write it was making. The others are held back (their lease lapsed). Empties ``buffered``."""
        ours = {shard: guard.still_ours(shard) for shard in {item.shard for _, item, _ in buffered}}
        frames: list[bytes] = []
        for index, item, data in buffered:
            if ours[item.shard]:
                m = item.message
                self._register(index, m.exchange, m.routing_key, m.task_id)
                frames.append(data)
            else:
                written.lapsed.add(index)
                written.fates.held.append(index)
        buffered.clear()  # registered ones are settled by their confirms (or count as unconfirmed)
        if frames:
            self._write(conn, frames)

    def _register(self, index: int, exchange: str, routing_key: str, task_id: str) -> None:
        tag = self._next_tag
        self._next_tag = tag + 1
        self._pending[tag] = index
        self._order.append(tag)
        # A Celery message's correlation_id, header id and message id are all the task id.
        self._by_key.setdefault((exchange, routing_key, task_id), collections.deque()).append(tag)

    def _write(self, conn: Any, buffered: list[bytes]) -> None:
        conn.bytes_sent += 1  # what py-amqp's writer counts (its heartbeats look at it)
        conn.transport.write(b"".join(buffered))

    # -- confirms (py-amqp calls these from drain_events) ----------------------------------------

    def _settle(self, tag: int, nacked: bool) -> None:
        index = self._pending.pop(tag, None)
        fates = self._fates
        if index is None or fates is None:
            return  # settled already (a single ack after a multiple one), or not ours
        returned = self._returned.pop(tag, None)
        if returned is not None:
            fates.returned[index] = returned
        elif nacked:
            fates.nacked.append(index)
        else:
            fates.confirmed.append(index)

    def _settle_up_to(self, tag: int, multiple: bool, nacked: bool) -> None:
        if self._fates is not None:
            self._fates.ack_frames += 1
        order = self._order
        if multiple:
            while order and order[0] <= tag:
                self._settle(order.popleft(), nacked)
        else:
            self._settle(tag, nacked)
            while order and order[0] not in self._pending:
                order.popleft()

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle_up_to(delivery_tag, multiple, nacked=False)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle_up_to(delivery_tag, multiple, nacked=True)

    def _on_return(self, exc: Any, exchange: str, routing_key: str, message: Any) -> None:
        # A return arrives before the ack of its message: it is the oldest unsettled one with
        # the same exchange, routing key and id.
        props = getattr(message, "properties", {}) or {}
        headers = props.get("application_headers") or {}
        ident = props.get("correlation_id") or headers.get("id") or props.get("message_id")
        tags = self._by_key.get((exchange, routing_key, None if ident is None else str(ident)))
        while tags:
            tag = tags.popleft()
            if tag in self._pending and tag not in self._returned:
                code = int(getattr(exc, "code", 0) or getattr(exc, "reply_code", 0) or 0)
                self._returned[tag] = Returned(code, str(getattr(exc, "reply_text", exc)), exchange, routing_key)
                return
        log_event(logging.ERROR, "publish.unknown_return", exchange=exchange, routing_key=routing_key, id=ident)

    def _wait_until(self, done: Callable[[], bool], deadline: float | None = None) -> None:
        conn = self._channel.connection
        deadline = time.monotonic() + self.confirm_timeout if deadline is None else deadline
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConfirmTimeout(f"{len(self._pending)} messages unconfirmed after {self.confirm_timeout}s")
            try:
                conn.drain_events(timeout=min(remaining, 1.0))
            except TimeoutError:
                continue

    def _reset_batch(self) -> None:
        self._pending.clear()
        self._order.clear()
        self._by_key.clear()
        self._returned.clear()


class Batch:
    """A batch written by :meth:`ConfirmPublisher.begin`, its confirms coming in (``InFlight``)."""

    def __init__(self, publisher: ConfirmPublisher, size: int, fates: Fates, lapsed: set[int],
                 revoked: set[int]) -> None:
        self.publisher = publisher
        self.size = size
        self.fates = fates
        self.lapsed = lapsed
        self.revoked = revoked
        self.reached = 0  # messages before this index have a fate other than not_sent
        self.written_at = time.monotonic()
        self._report: PublishReport | None = None

    def settled(self) -> bool:
        return self.fates.error is not None or not self.publisher._pending

    def finish(self) -> PublishReport:
        """The report (waiting for the last confirms first); the same report when asked again."""
        if self._report is None:
            self._report = report(self.publisher._finish(self), self.size, self.lapsed, self.revoked)
        return self._report


def report(fates: Fates, size: int, lapsed: set[int], revoked: set[int]) -> PublishReport:
    """The dispatcher's report of a batch's fates."""
    unpublishable: dict[int, BaseException] = dict(fates.refused)
    for i, r in fates.returned.items():
        unpublishable[i] = MessageReturned(
            f"RabbitMQ returned the message ({r.reply_code} {r.reply_text}): exchange {r.exchange!r} "
            f"routes routing key {r.routing_key!r} to no queue; bind a queue, then requeue it")
    again = frozenset([*fates.unconfirmed, *fates.not_sent, *fates.nacked])
    error = fates.error
    if error is None and fates.nacked:
        error = BrokerRefused(f"RabbitMQ refused (nacked) {len(fates.nacked)} of {size} messages")
    return PublishReport(size, error, unpublishable, frozenset(lapsed), frozenset(revoked), again)

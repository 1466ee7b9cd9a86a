# mypy: disallow-untyped-calls=False
# (Kombu's API is only partly typed and py-amqp's not at all; calling them is allowed here.)
"""Prototype: publish a batch of serialized Celery task messages to RabbitMQ with publisher confirms.

A message counts as handed off only once the broker has confirmed it (``basic.ack``). Confirms
are batched: the whole batch is written, acks are read while writing (without blocking) and then
waited for; an ack with ``multiple=True`` settles every earlier delivery tag at once. Each
message's fate is reported, none is dropped:

``confirmed``
    acked and not returned: the broker has it (for a durable queue and a persistent message: on
    disk, or for a quorum queue committed by a majority), safe to count as published.
``returned``
    ``basic.return`` (published ``mandatory`` and routed to no queue; the broker acks it after the
    return): not handed off, retrying will not help until a queue is bound.
``nacked``
    ``basic.nack``: the broker refused it (``x-overflow: reject-publish`` on a full queue, an
    internal error of the queue); not handed off, may be retried.
``unconfirmed``
    written, but neither ack nor nack arrived before the connection or channel failed or the
    confirm timeout passed: the broker may or may not have it. Only a retry keeps it from being
    lost, at the price of a possible duplicate (at-least-once).
``not_sent``
    never written because the batch failed before it.
``refused``
    could not be encoded (a property of the wrong type, e.g. an int ``expiration``): nothing was
    written, the batch went on; retrying the same message will fail the same way.

How it uses the transports (py-amqp 5.x through Kombu 5.x):

- the channel is ``connection.channel()`` of a Kombu connection (``app.connection_for_write()``);
  ``confirm_select()`` once per channel; after it the broker numbers the channel's publishes
  1, 2, 3... (delivery tags), the same counter its acks and nacks refer to.
- py-amqp dispatches ``basic.ack``/``basic.nack``/``basic.return`` frames to the callables in
  ``channel.events['basic_ack'|'basic_nack'|'basic_return']`` when the connection reads frames
  (``drain_events``); without a ``basic_return`` callable py-amqp raises on a return.
- frames are written coalesced (``coalesce=True``, the default): each message is encoded as
  py-amqp's writer would encode it (its own property serialization, the same three frames and
  frame_max split) and the frames of many messages go out in one ``transport.write`` call instead
  of one ``sendall`` a message. With ``coalesce=False`` each message goes through the channel's
  plain ``basic_publish`` (when the connection was made with ``confirm_publish=True`` py-amqp
  replaces that with a version waiting for each message's ack; the plain method it wraps is used
  instead). Either way the publisher owns its connection: no other thread may write on it.
- a ``basic.return`` carries no delivery tag. It arrives before the ack of its message, so it is
  matched to the oldest unsettled message with the same exchange, routing key and id
  (``correlation_id``, else header ``id``, else ``message_id``: a Celery message has all three
  equal to the task id).
"""

from __future__ import annotations

import collections
import contextlib
import math
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from amqp import spec  # type: ignore[import-untyped]
from amqp.serialization import dumps as amqp_dumps  # type: ignore[import-untyped]

# Arguments of Kombu's prepare_message(); every other property is passed through as is.
_MESSAGE_ARGUMENTS = ("priority", "content_type", "content_encoding")
# What py-amqp raises for a value it cannot encode, before anything is written.
_ENCODING_ERRORS = (TypeError, ValueError, struct.error, UnicodeError, OverflowError)
_FRAME_END = b"\xce"


@dataclass(frozen=True)
class Outgoing:
    """One serialized message, published unchanged."""

    body: bytes
    headers: dict[str, Any]
    exchange: str
    routing_key: str
    content_type: str = "application/json"
    content_encoding: str = "utf-8"
    #: AMQP properties: delivery_mode, priority, correlation_id, reply_to, expiration (a string of
    #: milliseconds, see NOTES.md), message_id...
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_stored(cls, stored: StoredLike) -> Outgoing:
        """From the package's stored form (``celery_zset_scheduler.codec.StoredMessage``)."""
        return cls(stored.body, dict(stored.headers), stored.exchange, stored.routing_key,
                   stored.content_type, stored.content_encoding, dict(stored.properties))

    def ident(self) -> str | None:
        p = self.properties
        found = p.get("correlation_id") or self.headers.get("id") or p.get("message_id")
        return None if found is None else str(found)


class StoredLike(Protocol):
    body: bytes
    headers: dict[str, Any]
    exchange: str
    routing_key: str
    content_type: str
    content_encoding: str
    properties: dict[str, Any]


@dataclass(frozen=True)
class Returned:
    reply_code: int
    reply_text: str


@dataclass
class BatchResult:
    """What became of each message of a batch, by its index in the batch."""

    size: int
    confirmed: list[int] = field(default_factory=list)
    returned: dict[int, Returned] = field(default_factory=dict)
    nacked: list[int] = field(default_factory=list)
    unconfirmed: list[int] = field(default_factory=list)
    not_sent: list[int] = field(default_factory=list)
    refused: dict[int, BaseException] = field(default_factory=dict)
    #: The error that ended the batch early (connection or channel lost, confirm timeout).
    error: BaseException | None = None
    ack_frames: int = 0
    multiple_acks: int = 0
    seconds: float = 0.0

    @property
    def handed_off(self) -> list[int]:
        """The messages safe to count as published."""
        return self.confirmed

    def check(self) -> None:
        """Every message has exactly one fate (a bug in the bookkeeping would break this)."""
        seen = [*self.confirmed, *self.returned, *self.nacked, *self.unconfirmed, *self.not_sent, *self.refused]
        if sorted(seen) != list(range(self.size)):
            raise AssertionError(f"batch bookkeeping lost or doubled messages: {len(seen)} fates for {self.size}")


class ConfirmTimeout(TimeoutError):
    """Some messages were neither acked nor nacked within the confirm timeout."""


class ConfirmPublisher:
    """Publishes batches on one confirm-mode channel of a Kombu connection.

    ``window`` bounds the messages in flight (written, not yet settled): at the limit the writer
    waits for acks until half the window is free. ``window=1`` is one confirm round trip a message.
    ``write_bytes`` is how much coalesced output is gathered before a write.
    """

    def __init__(self, connection: Any, *, mandatory: bool = True, window: int = 5000,
                 confirm_timeout: float = 30.0, drain_every: int = 256, coalesce: bool = True,
                 write_bytes: int = 64 * 1024) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.connection = connection
        self.mandatory = mandatory
        self.window = window
        self.confirm_timeout = confirm_timeout
        self.drain_every = max(1, drain_every)
        self.coalesce = coalesce
        self.write_bytes = write_bytes
        self._channel: Any = None
        self._next_tag = 1
        # Per batch: unsettled tag -> index; tags in publish order (for multiple acks); per
        # (exchange, routing key, id) the unsettled tags (to place a basic.return).
        self._pending: dict[int, int] = {}
        self._order: collections.deque[int] = collections.deque()
        self._by_key: dict[tuple[str, str, str | None], collections.deque[int]] = {}
        self._returned_tags: dict[int, Returned] = {}
        self._result: BatchResult | None = None

    @classmethod
    def for_app(cls, app: Any, **kwargs: Any) -> ConfirmPublisher:
        """A publisher on its own connection to the app's broker (``broker_write_url`` if set)."""
        return cls(app.connection_for_write(), **kwargs)

    # -- channel ------------------------------------------------------------------------------
    def _open_channel(self) -> Any:
        if self._channel is not None and self._channel.is_open:
            return self._channel
        self.connection.ensure_connection(max_retries=3)
        channel = self.connection.channel()
        channel.confirm_select()
        channel.events["basic_ack"].add(self._on_ack)
        channel.events["basic_nack"].add(self._on_nack)
        channel.events["basic_return"].add(self._on_return)
        self._channel = channel
        self._next_tag = 1  # a new channel numbers its publishes from 1
        return channel

    def _open_channel_alive(self) -> Any:
        """The channel, after handling whatever the broker sent since the last batch: a
        connection it closed meanwhile (a forced close, a restart) is noticed here, before
        anything is written, and replaced once."""
        channel = self._open_channel()
        try:
            self._drain_nowait()
        except Exception:
            self._forget_channel()
            channel = self._open_channel()
        return channel

    @property
    def channel(self) -> Any:
        return self._open_channel()

    def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            # Closing a channel of a dead connection: nothing is left to release.
            with contextlib.suppress(Exception):
                channel.close()
        self.connection.release()

    def __enter__(self) -> ConfirmPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- broker callbacks (called from drain_events) --------------------------------------------
    def _settle(self, tag: int, nacked: bool) -> None:
        index = self._pending.pop(tag, None)
        if index is None or self._result is None:
            return  # settled already (a single ack after a multiple one), or not ours
        returned = self._returned_tags.pop(tag, None)
        if returned is not None:
            self._result.returned[index] = returned
        elif nacked:
            self._result.nacked.append(index)
        else:
            self._result.confirmed.append(index)

    def _settle_up_to(self, tag: int, multiple: bool, nacked: bool) -> None:
        if self._result is not None:
            self._result.ack_frames += 1
            self._result.multiple_acks += bool(multiple)
        if multiple:
            order = self._order
            while order and order[0] <= tag:
                self._settle(order.popleft(), nacked)
        else:
            self._settle(tag, nacked)
            order = self._order
            while order and order[0] not in self._pending:
                order.popleft()

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle_up_to(delivery_tag, multiple, nacked=False)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle_up_to(delivery_tag, multiple, nacked=True)

    def _on_return(self, exc: Any, exchange: str, routing_key: str, message: Any) -> None:
        props = getattr(message, "properties", {}) or {}
        headers = props.get("application_headers") or {}
        ident = props.get("correlation_id") or headers.get("id") or props.get("message_id")
        key = (exchange, routing_key, None if ident is None else str(ident))
        tags = self._by_key.get(key)
        while tags:
            tag = tags.popleft()
            if tag in self._pending and tag not in self._returned_tags:
                self._returned_tags[tag] = Returned(int(getattr(exc, "code", 0) or getattr(exc, "reply_code", 0)),
                                                    str(getattr(exc, "reply_text", exc)))
                return
        # A return we cannot place would be a broker or bookkeeping bug: keep it visible.
        raise RuntimeError(f"basic.return for an unknown message: {exchange!r} {routing_key!r} id={ident!r}")

    # -- reading confirms -----------------------------------------------------------------------
    def _drain_nowait(self) -> None:
        """Handle every frame already received, without waiting for more."""
        conn = self._channel.connection
        while True:
            try:
                conn.drain_events(timeout=0)
            except TimeoutError:
                return

    def _wait_until(self, done: Any, deadline: float) -> None:
        conn = self._channel.connection
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConfirmTimeout(f"{len(self._pending)} messages unconfirmed after {self.confirm_timeout}s")
            try:
                conn.drain_events(timeout=min(remaining, 1.0))
            except TimeoutError:
                continue

    # -- publishing -----------------------------------------------------------------------------
    def publish(self, messages: Sequence[Outgoing]) -> BatchResult:
        """Publish ``messages`` and wait for their confirms; never raises for a broker failure
        (it is ``result.error``, and the messages it concerns are ``unconfirmed``/``not_sent``)."""
        result = self._result = BatchResult(len(messages))
        self._reset_batch()
        started = time.monotonic()
        reached = 0  # messages before this index have a fate other than not_sent
        try:
            channel = self._open_channel_alive()
            conn = channel.connection
            write = conn.transport.write
            encoder = _FrameEncoder(channel.channel_id, conn.frame_max)
            publish = channel.basic_publish
            if getattr(publish, "__func__", None) is getattr(type(channel), "basic_publish_confirm", None):
                publish = channel._basic_publish  # not the per-message waiting wrapper (see above)
            prepare = channel.prepare_message
            pending, order, by_key = self._pending, self._order, self._by_key
            mandatory, window, drain_every, coalesce = self.mandatory, self.window, self.drain_every, self.coalesce
            low_water = window // 2
            buffered: list[bytes] = []
            buffered_bytes = since_drain = 0
            for index, m in enumerate(messages):
                reached = index + 1
                props = m.properties
                extra = {k: v for k, v in props.items() if k not in _MESSAGE_ARGUMENTS} if props else None
                try:
                    if "expiration" in props:
                        check_expiration(props["expiration"])
                    msg = prepare(m.body, props.get("priority"), m.content_type, m.content_encoding, m.headers, extra)
                    frames = encoder.publish(m.exchange, m.routing_key, mandatory, msg) if coalesce else b""
                except _ENCODING_ERRORS as exc:
                    # A property py-amqp cannot encode (an int expiration, say): nothing was
                    # written, the channel is fine, the message is refused and the batch goes on.
                    result.refused[index] = exc
                    continue
                tag = self._next_tag
                # Registered before the write: the broker's answer can only be read after it anyway.
                pending[tag] = index
                order.append(tag)
                if mandatory:
                    by_key.setdefault((m.exchange, m.routing_key, m.ident()), collections.deque()).append(tag)
                self._next_tag = tag + 1
                if coalesce:
                    buffered.append(frames)
                    buffered_bytes += len(frames)
                    if buffered_bytes < self.write_bytes and len(pending) < window:
                        continue
                    conn.bytes_sent += 1  # what py-amqp's writer counts (heartbeats look at it)
                    write(b"".join(buffered))
                    buffered.clear()
                    buffered_bytes = 0
                    since_drain = drain_every  # one write is many messages: read acks after each
                else:
                    try:
                        publish(msg, exchange=m.exchange, routing_key=m.routing_key, mandatory=mandatory)
                    except _ENCODING_ERRORS as exc:  # raised before py-amqp wrote anything
                        self._unregister(tag)
                        result.refused[index] = exc
                        continue
                    since_drain += 1
                if len(pending) >= window:
                    self._wait_until(lambda: len(self._pending) <= low_water,
                                     time.monotonic() + self.confirm_timeout)
                elif since_drain >= drain_every:
                    # Acks read as they come keep the socket's receive side from backing up.
                    self._drain_nowait()
                    since_drain = 0
            if buffered:
                conn.bytes_sent += 1
                write(b"".join(buffered))
            self._wait_until(lambda: not self._pending, time.monotonic() + self.confirm_timeout)
        except Exception as exc:
            # Connection or channel errors, a confirm timeout: whatever is unsettled is unknown.
            result.error = exc
            self._forget_channel()
        finally:
            for tag, index in self._pending.items():
                returned = self._returned_tags.get(tag)
                if returned is not None:  # returned, its ack lost: still certainly not enqueued
                    result.returned[index] = returned
                else:
                    result.unconfirmed.append(index)
            result.unconfirmed.sort()
            result.not_sent.extend(range(reached, len(messages)))
            result.confirmed.sort()
            result.nacked.sort()
            result.seconds = time.monotonic() - started
            self._reset_batch()
            self._result = None
        return result

    def _reset_batch(self) -> None:
        self._pending.clear()
        self._order.clear()
        self._by_key.clear()
        self._returned_tags.clear()

    def _unregister(self, tag: int) -> None:
        """Undo the registration of a publish that wrote nothing (its tag is reused)."""
        self._pending.pop(tag, None)
        if self._order and self._order[-1] == tag:
            self._order.pop()
        self._next_tag = tag

    def _forget_channel(self) -> None:
        """After a failure the channel (and maybe the connection) is unusable: drop both so that
        the next batch reconnects."""
        self._channel = None
        with contextlib.suppress(Exception):  # a dead socket: nothing to release cleanly
            self.connection.collect()


def publish_all(connection: Any, messages: Iterable[Outgoing], **kwargs: Any) -> BatchResult:
    """One batch on a publisher of its own (tests, one-off scripts)."""
    with ConfirmPublisher(connection, **kwargs) as publisher:
        return publisher.publish(list(messages))


def check_expiration(value: Any) -> None:
    """Refuse, before it is written, an ``expiration`` the broker would reject.

    RabbitMQ reads it as a per-message TTL in milliseconds and accepts only a string of decimal
    digits (``"0"`` expires the message unless a consumer takes it at once). ``"1.5"`` or ``"-1"``
    make it close the channel with 406 PRECONDITION_FAILED, which would take every unconfirmed
    message of the batch with it; an int makes py-amqp fail to encode the message.
    """
    if value is None:
        return
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        raise ValueError(f"expiration must be a string of milliseconds (e.g. '60000'), not {value!r}")


def expiration_ms(expires_at: Any, now: Any = None) -> str:
    """The ``expiration`` property for a message that must be gone at ``expires_at`` (an aware
    datetime, or an ISO string as in Celery's ``expires`` header), counted from ``now``."""
    from datetime import datetime, timezone

    when = datetime.fromisoformat(expires_at) if isinstance(expires_at, str) else expires_at
    now = now or datetime.now(timezone.utc)
    # Rounded up so that a message is never dropped early; an instant in the past is 0.
    return str(max(0, math.ceil((when - now).total_seconds() * 1000)))


class _FrameEncoder:
    """A ``basic.publish`` as py-amqp's frame writer puts it on the wire (method frame, content
    header frame, body frames of at most ``frame_max - 8`` bytes), as bytes to write later."""

    def __init__(self, channel_id: int, frame_max: int) -> None:
        self.channel_id = channel_id
        self.chunk = frame_max - 8
        self._methods: dict[tuple[str, str, bool], bytes] = {}

    def _frame(self, kind: int, payload: bytes) -> bytes:
        return struct.pack(">BHI", kind, self.channel_id, len(payload)) + payload + _FRAME_END

    def publish(self, exchange: str, routing_key: str, mandatory: bool, msg: Any) -> bytes:
        key = (exchange, routing_key, mandatory)
        method = self._methods.get(key)
        if method is None:  # the same for every message to one queue
            args = amqp_dumps("Bssbb", (0, exchange, routing_key, mandatory, False))
            method = self._methods[key] = self._frame(1, struct.pack(">HH", *spec.Basic.Publish) + args)
        body = msg.body
        if isinstance(body, str):
            body = body.encode(msg.properties.setdefault("content_encoding", "utf-8"))
        header = struct.pack(">HHQ", spec.Basic.Publish[0], 0, len(body)) + msg._serialize_properties()
        parts = [method, self._frame(2, header)]
        chunk = self.chunk
        for i in range(0, len(body), chunk):
            parts.append(self._frame(3, body[i:i + chunk]))
        return b"".join(parts)

"""py-amqp on the wire, for the confirms publisher: each message's fate, and coalesced frames.

- :class:`Fates`: what became of each message of one batch (every message has exactly one).
- :class:`FrameEncoder`: a ``basic.publish`` encoded exactly as py-amqp's frame writer encodes it
  (method frame, content header frame with py-amqp's own property serialization, body frames of at
  most ``frame_max - 8`` bytes), so that the frames of many messages go out in one socket write
  instead of one ``sendall`` a message (measured: client CPU per message down from 100-150 µs to
  40-75 µs, the broker's from 100-190 µs to 55-135 µs; docs/benchmarks.md).
- :func:`check_expiration`: RabbitMQ takes ``expiration`` as a string of decimal milliseconds only;
  anything else makes it close the channel (406), taking every unconfirmed message of the batch with
  it, so a bad value is refused before it is written.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from amqp import spec

#: What py-amqp raises for a value it cannot encode, before anything is written.
ENCODING_ERRORS = (TypeError, ValueError, struct.error, UnicodeError, OverflowError)
_FRAME_END = b"\xce"


@dataclass(frozen=True)
class Returned:
    """A ``basic.return``: the broker routed a ``mandatory`` message to no queue."""

    reply_code: int
    reply_text: str
    exchange: str
    routing_key: str


@dataclass
class Fates:
    """Each message of a batch, by its index, in exactly one of these (``check()`` verifies it).

    ``confirmed``: acked and not returned (on disk, or committed by a quorum queue's majority).
    ``returned``: routed to no queue. ``nacked``: refused by the broker (a full queue with
    ``x-overflow: reject-publish``, an internal error). ``unconfirmed``: written, neither acked nor
    nacked before the channel or connection failed or the confirm timeout passed: the broker may or
    may not have it. ``not_sent``: never written (the batch failed before it, or it was held back).
    ``refused``: cannot be encoded; the same message fails the same way every time.
    """

    size: int
    confirmed: list[int] = field(default_factory=list)
    returned: dict[int, Returned] = field(default_factory=dict)
    nacked: list[int] = field(default_factory=list)
    unconfirmed: list[int] = field(default_factory=list)
    not_sent: list[int] = field(default_factory=list)
    refused: dict[int, BaseException] = field(default_factory=dict)
    held: list[int] = field(default_factory=list)  # lapsed lease or revoked: the caller's reason
    error: BaseException | None = None  # what ended the batch early
    ack_frames: int = 0

    def check(self) -> None:
        seen = [*self.confirmed, *self.returned, *self.nacked, *self.unconfirmed, *self.not_sent,
                *self.refused, *self.held]
        if sorted(seen) != list(range(self.size)):
            raise AssertionError(f"batch bookkeeping lost or doubled messages: {len(seen)} fates for {self.size}")


def check_expiration(value: Any) -> None:
    """Refuse an ``expiration`` RabbitMQ would reject (it must be a string of milliseconds)."""
    if value is None:
        return
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        raise ValueError(f"expiration must be a string of milliseconds (e.g. '60000'), not {value!r}")


class FrameEncoder:
    """A ``basic.publish`` as py-amqp's frame writer puts it on the wire, as bytes to write later."""

    def __init__(self, channel_id: int, frame_max: int) -> None:
        self.channel_id = channel_id
        self.chunk = frame_max - 8
        self._methods: dict[tuple[str, str, bool], bytes] = {}

    def _frame(self, kind: int, payload: bytes) -> bytes:
        return struct.pack(">BHI", kind, self.channel_id, len(payload)) + payload + _FRAME_END

    def publish(self, exchange: str, routing_key: str, mandatory: bool, msg: Any) -> bytes:
        """The frames of one message (``msg``: a py-amqp ``Message``)."""
        from amqp.serialization import dumps

        key = (exchange, routing_key, mandatory)
        method = self._methods.get(key)
        if method is None:  # the same for every message to one exchange and routing key
            args = dumps("Bssbb", (0, exchange, routing_key, mandatory, False))
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

"""Publishing a batch straight into Kombu's Redis queues: one transaction of multi-value LPUSHes.

Kombu's Redis transport writes each message with one LPUSH (or one buffered pipeline command), after
building its envelope in ``producer.publish``. Here Kombu's own channel still builds every envelope
(``prepare_message``, ``_inplace_augment_message``: body encoding, delivery tag, delivery info),
picks the priority sub-queue (``_q_for_pri``) and resolves exchange bindings (``_lookup``, the
``_kombu.binding.*`` table), so what lands in the queue is byte for byte what Kombu writes; only
the writes are grouped: one ``LPUSH key m1 m2 ...`` per queue (same order as one LPUSH each) in one
MULTI/EXEC, through the channel's client (so ``global_keyprefix`` applies). The transaction makes a
refused batch all-or-nothing, so a broker error never leaves half a batch published.
Fanout exchanges (pub/sub) and non-Redis transports are left to Kombu.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from kombu.transport.redis import Channel as RedisChannel
from kombu.utils.json import dumps

from ...model.codec import StoredMessage
from .envelope import kombu_expiration, outgoing

ROUTED_TYPES = ("direct", "topic")


def can_publish(producer: Any, messages: Sequence[StoredMessage]) -> bool:
    """True when the producer's channel is a Kombu Redis channel and no message goes to a fanout."""
    channel = producer.channel
    if not isinstance(channel, RedisChannel):
        return False
    exchanges = {m.exchange for m in messages if m.exchange}
    return all(channel.typeof(name).type in ROUTED_TYPES for name in exchanges)


def publish(producer: Any, messages: Sequence[StoredMessage]) -> dict[int, BaseException]:
    """Write every message to its queue(s) in one transaction; raises when the broker refuses.

    A message whose envelope cannot be built is left out and returned (index -> error): it would
    fail the same way every time.
    """
    channel = producer.channel
    writes: dict[str, list[str]] = {}  # Redis list -> envelopes, in publish order
    routes: dict[tuple[str, str], list[str]] = {}
    queues: set[str] = set()
    refused: dict[int, BaseException] = {}
    for i, m in enumerate(messages):
        try:
            built = _build(producer, channel, m, routes)
        except (ConnectionError, OSError, redis.RedisError):  # reading bindings: the broker, not the message
            raise
        except Exception as exc:
            refused[i] = exc
            continue
        level, payload, targets = built
        for queue in targets:
            writes.setdefault(channel._q_for_pri(queue, level), []).append(payload)
            queues.add(queue)
    with channel.conn_or_acquire() as client:
        pipe = client.pipeline(transaction=True)
        for key, payloads in writes.items():
            pipe.lpush(key, *payloads)
        for queue in queues:
            if channel._expires and queue in channel._expires:  # as Kombu does on every put
                for step in channel.priority_steps:
                    pipe.pexpire(channel._q_for_pri(queue, step), channel._expires[queue])
        pipe.execute()
    return refused


def _build(producer: Any, channel: Any, m: StoredMessage,
           routes: dict[tuple[str, str], list[str]]) -> tuple[int, str, list[str]]:
    """The envelope Kombu would write for ``m``: its priority level, JSON and target queues."""
    headers, properties, expiration = outgoing(m)
    mode = properties.pop("delivery_mode", None)
    priority = properties.pop("priority", 0)
    # As Producer.publish: the delivery mode falls back to the producer's exchange's, then the TTL.
    exchange, properties["delivery_mode"] = producer._delivery_details(m.exchange or producer.exchange, mode)
    if expiration is not None:
        properties["expiration"] = kombu_expiration(expiration)
    message = channel.prepare_message(
        m.body, priority, m.content_type, m.content_encoding, headers, properties,
    )
    channel._inplace_augment_message(message, exchange, m.routing_key)
    if exchange:
        targets = routes.get((exchange, m.routing_key))
        if targets is None:  # bindings read once per exchange and routing key per batch
            targets = routes[(exchange, m.routing_key)] = list(channel._lookup(exchange, m.routing_key))
    else:
        targets = [m.routing_key]
    level = channel._get_message_priority(message, reverse=False)
    return level, dumps(message), targets

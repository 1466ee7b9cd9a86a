"""The Kombu Redis channel's private steps that the Redis publishers call, checked once.

The batch transaction (:mod:`.redis_queue`), the same-Redis fast path (:mod:`.fast_routes`) and
the built lane (:mod:`.built_routes`) write messages into Kombu's Redis queues themselves, so they
ask Kombu's own channel for what ``Producer.publish`` would do: the priority sub-queue's name, the
delivery mode, the envelope's body encoding and delivery info, its priority, the bindings. Those
are private methods; the check compares their parameters with what the publishers pass. When one
differs, a Redis broker gets Kombu's public ``Producer.publish`` for every message (and the fast
path is off), never a guess at what the method now does.
"""

from __future__ import annotations

import inspect
from typing import Any

from kombu.messaging import Producer
from kombu.transport.redis import Channel as RedisChannel

from ...model.internals import Internal, register

#: Each private method and the leading parameters the publishers pass (after ``self``).
EXPECTED: tuple[tuple[Any, str, tuple[str, ...]], ...] = (
    (RedisChannel, "_q_for_pri", ("queue", "pri")),
    (RedisChannel, "_inplace_augment_message", ("message", "exchange", "routing_key")),
    (RedisChannel, "_get_message_priority", ("message", "reverse")),
    (RedisChannel, "_lookup", ("exchange", "routing_key")),
    (RedisChannel, "prepare_message",
     ("body", "priority", "content_type", "content_encoding", "headers", "properties")),
    (Producer, "_delivery_details", ("exchange", "delivery_mode")),
)


def _differs() -> str | None:
    for cls, name, params in EXPECTED:
        method = getattr(cls, name, None)
        if not callable(method):
            return f"{cls.__module__}.{cls.__name__} has no {name}"
        got = tuple(inspect.signature(method).parameters)[1:1 + len(params)]
        if got != params:
            return f"{cls.__name__}.{name} takes {got}, not {params}"
    return None


KOMBU_REDIS = register(Internal(
    "the Redis broker's batch transaction, the same-Redis fast path and the built lane",
    tuple(f"{cls.__module__}.{cls.__name__}.{name}" for cls, name, _ in EXPECTED if name.startswith("_")),
    "every message goes through Kombu's Producer.publish (Producer.batch on Kombu 5.7), and the "
    "dispatcher takes the generic path: a fraction of the drain rate (docs/design.md#private-internals)",
    _differs,
))

"""Declaring a queue or exchange with the publish retry policy, as every supported Kombu can.

Kombu before 5.5 binds an unbound entity to the channel only in a copy it then drops, and its retrying
``maybe_declare`` fails on the app's (unbound) declarations with ``NotBoundError``; a bound copy
declares the same entity on every version (Kombu's declaration cache keys it by its hash).
"""

from __future__ import annotations

from typing import Any


def declare(producer: Any, entity: Any, policy: dict[str, Any]) -> Any:
    """``producer.maybe_declare(entity, retry=True, **policy)`` on a copy bound to its channel."""
    bound = entity if entity.is_bound else entity(producer.channel)
    return producer.maybe_declare(bound, retry=True, **policy)

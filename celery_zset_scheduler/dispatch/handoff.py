"""The seam between a claim and the broker: how due entries leave the store.

A :class:`HandOff` moves what is due on the shards a dispatcher leads into the broker and reports,
per shard, what the loop needs to plan its next pass. The first implementation is the generic path
(:mod:`.generic`: claim, publish through a :class:`Publisher`, ack); a same-Redis fast path (one
script moving due entries into the broker's queue lists) or a RabbitMQ publisher with confirms is
another class behind the same interface.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ZSetSchedulerError
from ..model.clock import RedisClock
from ..model.codec import StoredMessage
from ..store.claims import Claims, Fence
from ..store.deadletters import DeadLetters
from .config import DispatcherConfig
from .meter import DispatchMeter
from .observer import Observer


class BrokerUnavailable(ZSetSchedulerError):
    """The broker refused a publish; the unpublished rest of the batch went back to ``due``."""


@dataclass(frozen=True)
class PublishReport:
    """What became of a batch: the first ``published`` messages were handled, in order; of those,
    the ``unpublishable`` indexes were refused for a reason of their own (they never will be
    published, so they are dead-lettered); ``error`` is an outage that stopped the rest."""

    published: int
    error: BaseException | None = None
    unpublishable: dict[int, BaseException] = field(default_factory=dict)


class Publisher(Protocol):
    """Hands messages to the broker in order: an outage stops the batch, a message's own error
    only skips that message (see :class:`PublishReport`)."""

    def publish(self, messages: Sequence[StoredMessage]) -> PublishReport: ...


@dataclass(frozen=True)
class ShardPass:
    """What one pass did on one shard."""

    fenced: bool  # the lease was lost: nothing was claimed
    now_ms: int  # Redis time of the claim
    next_due_ms: int | None  # earliest entry still pending afterwards
    claimed: int  # entries taken out of ``due``


@dataclass(frozen=True)
class Pass:
    shards: dict[int, ShardPass]
    sent_at: float  # monotonic time just before the claim was sent
    answered_at: float  # monotonic time its reply arrived
    broker_error: BaseException | None = None  # an outage stopped the batch (the rest went back)
    retry: frozenset[int] = frozenset()  # shards whose claimed entries went back to ``due``


@dataclass(frozen=True)
class Env:
    """What every hand-off works with, given by the dispatcher that runs it."""

    claims: Claims
    dead_letters: DeadLetters
    observer: Observer
    meter: DispatchMeter
    clock: RedisClock
    config: DispatcherConfig
    lease_valid: Callable[[int, float], bool]  # (shard, monotonic now): still safely ours


class HandOff(Protocol):
    def dispatch(self, fences: Sequence[Fence]) -> Pass:
        """Move what is due on these shards to the broker. A Redis error is raised (the loop waits
        it out); nothing claimed is ever dropped: it is published and acked, released to ``due``,
        or left in flight for the reap."""
        ...

    def settle(self, *, acks: bool = True) -> None:
        """Send what earlier passes still owe Redis: releases an outage interrupted and, with
        ``acks``, the acks held back to ride on the next claim."""
        ...


HandOffFactory = Callable[[Env], HandOff]

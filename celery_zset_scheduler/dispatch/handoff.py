"""The seam between a claim and the broker: how due entries leave the store.

A :class:`HandOff` moves what is due on the shards a dispatcher leads into the broker and reports,
per shard, what the loop needs to plan its next pass. The first implementation is the generic path
(:mod:`.generic`: claim, publish through a :class:`Publisher`, ack); a same-Redis fast path (one
script moving due entries into the broker's queue lists) or a RabbitMQ publisher with confirms is
another class behind the same interface.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

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
    published, so they are dead-lettered) and the ``lapsed`` ones were held back because their
    shard's lease lapsed at the moment of hand-off (they go back to ``due``); the ``revoked`` ones
    were held back because they were revoked since their claim (they are dropped); the
    ``unconfirmed`` ones were handed over but the broker did not confirm them (a publisher with
    confirms: they go back to ``due`` and may be published twice); ``error`` is an outage that
    stopped the rest (or made the broker refuse some), and makes the dispatcher back off."""

    published: int
    error: BaseException | None = None
    unpublishable: dict[int, BaseException] = field(default_factory=dict)
    lapsed: frozenset[int] = frozenset()
    revoked: frozenset[int] = frozenset()
    unconfirmed: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Outgoing:
    """A message to publish and the shard whose lease covers it."""

    message: StoredMessage
    shard: int

    @property
    def task_id(self) -> str:
        return self.message.task_id


class Built(NamedTuple):
    """An envelope the store's claim script built (``store/built.py``), for one broker list
    (``key``: without the client's ``global_keyprefix``), and the shard whose lease covers it (a
    named tuple: one is made per entry)."""

    task_id: str
    shard: int
    envelope: bytes
    key: str


class Guard(Protocol):
    """What a publisher checks at the moment of hand-off, so that a dispatcher paused past its lease
    never publishes what a newer leader may be publishing (I2, I3)."""

    def still_ours(self, shard: int) -> bool:
        """The shard's lease is still safely ours by this process's clock, right now."""
        ...

    def fence(self, shard: int) -> Fence:
        """The token and epoch the batch of ``shard`` was claimed under."""
        ...

    def lease_keys(self, shard: int) -> tuple[str, str]:
        """The shard's lock and epoch keys in the store, for a check inside the broker's own
        transaction when the broker is the store's Redis server and database."""
        ...

    @property
    def store_client(self) -> object:
        """The store's client (to tell whether the broker is the same server and database)."""
        ...

    def revoked(self, batch: Sequence[Outgoing | Built], *, now: bool = False) -> frozenset[int]:
        """The indexes of ``batch`` revoked since their claim (I10), read from the store now, or,
        for the first check of a pass of the built lane in a backlog, from the revoke counts it
        read before sending its next claim ahead. ``now``: read now in any case (a check inside a
        ``WATCH``ed transaction, which covers only what changes after the ``WATCH``)."""
        ...

    def revoke_key(self, shard: int) -> str:
        """The shard's revoke counter, watched with its lease keys inside the broker's transaction
        when the broker is the store's Redis server and database (a revoke changes it)."""
        ...


class Publisher(Protocol):
    """Hands messages to the broker in order: an outage stops the batch, a message's own error
    only skips that message, a lapsed lease holds back its shard's messages, a revoked message
    is held back (see :class:`PublishReport`). ``guard`` is consulted right before each publish
    call and, where the broker allows, inside the transaction that writes the messages."""

    def publish(self, batch: Sequence[Outgoing], guard: Guard) -> PublishReport: ...


class BuiltPublisher(Publisher, Protocol):
    """A publisher that also forwards envelopes the store built (:class:`Built`), in the same
    order and with the same checks as :meth:`publish`."""

    def publish_built(self, batch: Sequence[Outgoing | Built], guard: Guard) -> PublishReport | None:
        """None when the batch's messages cannot share the envelopes' write (nothing was done)."""
        ...


class InFlight(Protocol):
    """A batch written to the broker, its confirms still coming in."""

    def settled(self) -> bool:
        """Nothing is left to wait for (every message confirmed, or the batch failed)."""
        ...

    def finish(self) -> PublishReport:
        """Wait for the rest of the confirms (within the publisher's timeout); the report."""
        ...


class PipelinedPublisher(Publisher, Protocol):
    """A publisher whose batches can be written now and confirmed later: the dispatcher claims
    the next batch while the broker confirms this one (:mod:`.pipelined`). ``begin`` checks the
    guard as ``publish`` does, right before each write; one batch is in flight at a time."""

    def begin(self, batch: Sequence[Outgoing], guard: Guard) -> InFlight: ...


@dataclass(frozen=True)
class ShardPass:
    """What one pass did on one shard."""

    fenced: bool  # the lease was lost: nothing was claimed
    now_ms: int  # Redis time of the claim
    next_due_ms: int | None  # earliest entry still pending afterwards
    claimed: int  # entries taken out of ``due``
    error: Exception | None = None  # this shard's claim failed (the others' went on)


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
    fences: Callable[[], list[Fence]]  # the leases held right now
    stopping: Callable[[], bool] = lambda: False  # the dispatcher is shutting down
    #: Renew the leases held when their last renewal is a heartbeat old (between the publish calls
    #: of a long hand-off, which runs in the loop's own thread, where the heartbeat does).
    keep_alive: Callable[[], None] = lambda: None


class HandOff(Protocol):
    @property
    def holding(self) -> bool:
        """Claimed entries wait for the next pass (to keep due order): pass again at once."""
        ...

    def dispatch(self, fences: Sequence[Fence], waiting: Mapping[int, int] | None = None) -> Pass:
        """Move what is due on these shards to the broker. ``waiting``: the led shards left out of
        this pass -> the earliest due time (Redis ms) pending on each at its last claim (nothing
        due at or after it may go first). A Redis error is raised (the loop waits it out); nothing
        claimed is ever dropped: it is published and acked, released to ``due``, or left in flight
        for the reap."""
        ...

    def settle(self, *, acks: bool = True, releasing: bool = False) -> None:
        """Send what earlier passes still owe Redis: releases an outage interrupted and, with
        ``acks`` (before sleeping, at a heartbeat, on shutdown), the acks held back to ride on the
        next claim and the entries held for the next pass. ``releasing``: the dispatcher is about
        to hand shards to another: no entry may stay claimed and unpublished."""
        ...


HandOffFactory = Callable[[Env], HandOff]

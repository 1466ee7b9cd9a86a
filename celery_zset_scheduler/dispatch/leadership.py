"""Per-shard leases and the membership that shares shards fairly between dispatchers.

Every dispatcher heartbeats into a membership ZSET (deadline = Redis time + lease). The live
members, sorted by id, deal the shards round-robin: shard ``s`` belongs to member ``s mod M``. Each
dispatcher acquires the leases of its share when they are free and releases the shards that are no
longer its share, so a joining dispatcher gets its share within a heartbeat or two, and a dead
one's shards move once its lease and its membership expire (one ``lock_timeout``).

A lease is a ``SET NX PX`` token; every new holder increments the shard's epoch. Losing a lease
(renew refused) just drops the shard: the dispatcher stays in the election.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import redis

from ..model.clock import RedisClock
from ..model.leaders import LeaderRecord
from ..model.logs import log_event
from ..store.claims import Fence
from ..store.leases import Leases
from ..store.pending import Store
from .meter import DispatchMeter
from .observer import Observer

MAX_MEMBERS = 10_000


def new_member_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass
class Lease:
    fence: Fence
    renewed_at: float  # monotonic time just before the last successful acquire/renew was sent

    def valid(self, now: float, ttl: float) -> bool:
        """Still safely ours by our own clock; a margin covers the round trip of the renewal."""
        return now - self.renewed_at < ttl * 0.8


@dataclass
class Changes:
    acquired: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)


def fair_share(members: Iterable[str], me: str, shards: int) -> set[int]:
    """Shards dealt to ``me`` when ``shards`` are dealt round-robin over the sorted members."""
    ordered = sorted(set(members))
    if me not in ordered:
        return set()
    index, count = ordered.index(me), len(ordered)
    return {s for s in range(shards) if s % count == index}


class Leadership:
    """The leases one dispatcher holds, kept up to date by :meth:`beat`."""

    def __init__(
        self, store: Store, member_id: str, lock_timeout: float, *,
        pinned: set[int] | None = None, observer: Observer | None = None,
    ) -> None:
        self.store = store
        self.leases = Leases(store)
        self.member_id = member_id
        self.ttl = lock_timeout
        self.ttl_ms = max(1, int(lock_timeout * 1000))
        self.pinned = pinned
        self.observer = observer or Observer()
        self.owned: dict[int, Lease] = {}
        self.members: list[str] = []
        self.clock = RedisClock()
        self.meter = DispatchMeter()  # the dispatcher adds what it published; announced with renewals

    def desired(self) -> set[int]:
        if self.pinned is not None:
            return set(self.pinned)
        return fair_share(self.members, self.member_id, self.store.shards)

    def beat(self, before_release: Callable[[], None] | None = None) -> Changes:
        """Heartbeat, renew what is held, release what is no longer ours (``before_release`` is
        called first, once), acquire our free share."""
        changes = Changes()
        if self.pinned is None:
            sent_at = time.monotonic()
            try:
                membership = self.leases.heartbeat(self.member_id, self.ttl_ms, MAX_MEMBERS)
            except redis.OutOfMemoryError as exc:
                # A full store refuses the heartbeat (a write that grows memory) but not the
                # renewals, claims and acks that drain it: keep leading with what we know.
                log_event(logging.WARNING, "membership.refused", dispatcher=self.member_id, error=str(exc))
            except redis.RedisError as exc:
                if not self.store.clustered:
                    raise
                # On a cluster the membership lives on one master: while it is down, the shards
                # on the other masters are led with the membership last read.
                log_event(logging.WARNING, "membership.unavailable", dispatcher=self.member_id, error=str(exc))
            else:
                self.clock.observe(membership.now_ms, (sent_at + time.monotonic()) / 2)
                self.members = membership.members
        desired = self.desired()
        leaving = sorted(set(self.owned) - desired)
        if leaving and before_release is not None:
            before_release()
        for shard in leaving:
            self.release(shard)
            changes.released.append(shard)
        self._renew(changes)
        for shard in sorted(desired - set(self.owned)):
            if self._acquire(shard):
                changes.acquired.append(shard)
        self._announce_all()
        return changes

    def renew(self) -> list[int]:
        """Renew what is held now, outside a heartbeat (no membership, no rebalancing); the
        shards lost."""
        changes = Changes()
        self._renew(changes)
        return changes.lost

    def _renew(self, changes: Changes) -> None:
        if not self.owned:
            return
        sent_at = time.monotonic()
        shards = sorted(self.owned)
        fences = [self.owned[s].fence for s in shards]
        if self.store.clustered:
            renewed = self.leases.renew_each(fences, self.ttl_ms)
            errors = [r for r in renewed if isinstance(r, Exception)]
            if errors and len(errors) == len(renewed):
                raise errors[0]  # no master answered: an outage of the whole store
        else:
            renewed = list(self.leases.renew(fences, self.ttl_ms))
        for shard, ok in zip(shards, renewed, strict=True):
            if isinstance(ok, Exception):
                # Its master is down (a failover under way): the lease stays ours until it would
                # have expired; the hand-off publishes nothing of it meanwhile (Lease.valid).
                if sent_at - self.owned[shard].renewed_at >= self.ttl_ms / 1000:
                    self.drop(shard, reason="renew failed")
                    changes.lost.append(shard)
            elif ok:
                self.owned[shard].renewed_at = sent_at
            else:
                self.drop(shard, reason="renew refused")
                changes.lost.append(shard)

    def _acquire(self, shard: int) -> bool:
        token = secrets.token_hex(16)
        sent_at = time.monotonic()
        try:
            epoch = self.leases.acquire(shard, token, self.ttl_ms)
        except redis.OutOfMemoryError:
            return False  # a full store takes no new lease; the current leaders keep theirs
        except redis.RedisError:
            if not self.store.clustered:
                raise
            return False  # its master is down: tried again at the next heartbeat
        if not epoch:
            return False
        self.owned[shard] = Lease(Fence(shard, token, epoch), sent_at)
        log_event(logging.INFO, "leader.acquired", shard=shard, epoch=epoch, dispatcher=self.member_id)
        self.observer.leadership(shard, True)
        return True

    def _announce_all(self) -> None:
        """Announce who leads each owned shard (see ``model.leaders``). For people only: a
        failure (a full store) is ignored."""
        if not self.owned:
            return
        now = time.monotonic()
        records = {}
        for shard, lease in self.owned.items():
            total, rate = self.meter.sample(shard, now)
            records[lease.fence] = LeaderRecord(self.member_id, lease.fence.epoch, total, rate)
        try:
            self.leases.announce(records, self.ttl_ms)
        except (redis.ResponseError, redis.ConnectionError, redis.TimeoutError) as exc:
            log_event(logging.DEBUG, "leader.announce_failed", error=str(exc))

    def drop(self, shard: int, reason: str) -> None:
        """Forget a lease that is no longer ours (fenced or expired); stay in the election."""
        lease = self.owned.pop(shard, None)
        self.meter.forget(shard)
        if lease is not None:
            log_event(
                logging.WARNING, "leader.lost", shard=shard, epoch=lease.fence.epoch,
                dispatcher=self.member_id, reason=reason.replace(" ", "_"),
            )
            self.observer.leadership(shard, False)

    def release(self, shard: int) -> None:
        """Give a shard up on purpose (rebalance or shutdown)."""
        lease = self.owned.pop(shard, None)
        self.meter.forget(shard)
        if lease is None:
            return
        try:
            self.leases.unlock(lease.fence)
        except redis.RedisError:
            if not self.store.clustered:
                raise
            # Its master is down: the lease expires by itself, the next leader takes it then.
        log_event(logging.INFO, "leader.released", shard=shard, epoch=lease.fence.epoch, dispatcher=self.member_id)
        self.observer.leadership(shard, False)

    def release_all(self) -> None:
        for shard in sorted(self.owned):
            self.release(shard)
        if self.pinned is None:
            self.leases.leave(self.member_id)

    def lease(self, shard: int) -> Lease | None:
        return self.owned.get(shard)

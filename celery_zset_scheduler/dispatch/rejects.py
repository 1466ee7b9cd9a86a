"""What a hand-off refuses instead of publishing, and the drops it reports.

An entry that does not decode, a message a worker would discard (:data:`~.items.Check`) and one the
broker refuses for a reason of its own go to the dead-letter store and their entries are acked, so
no poison blocks its shard; orphans (due without a message) and revoked ids dropped are logged,
counted and told to the ``revoked`` hook. The base of :class:`~.generic.GenericHandOff`.
"""

from __future__ import annotations

import logging
import time

import redis

from ..errors import PoisonMessage
from ..model.codec import decode
from ..model.letters import DeadLetter
from ..model.logs import describe, log_event
from ..store.claims import Claimed
from .handoff import Env
from .items import Check, Claim, Item, Revoked


class Rejects:
    env: Env
    check: Check | None
    on_revoked: Revoked | None
    _to_ack: list[Claimed]  # acked with the hand-off's next acks

    def _decode(self, claims: list[Claim], claimed_at: float) -> list[Item]:
        """Messages of the entries; an entry that does not decode is dead-lettered (and acked)."""
        items: list[Item] = []
        poison: list[tuple[Claimed, PoisonMessage]] = []
        for entries, fence in claims:
            for entry in entries:
                try:
                    items.append(Item(entry, decode(entry.task_id, entry.payload), fence, claimed_at))
                except PoisonMessage as exc:
                    poison.append((entry, exc))
        for entry, error in poison:
            letter = DeadLetter.for_poison(entry.task_id, entry.payload, error, entry.shard)
            self._dead_letter(entry, letter, "poison", str(error))
        return items

    def _check(self, items: list[Item]) -> list[Item]:
        """Keep what a worker would run; dead-letter what it would discard, with the reason."""
        if self.check is None or all(i.message is None for i in items):  # all built: nothing to check
            return items
        kept: list[Item] = []
        for item in items:
            if item.message is None:  # built by the claim script, which runs the worker's checks
                kept.append(item)
                continue
            problem = self.check(item.message)
            if problem is None:
                kept.append(item)
                continue
            now = int(time.time() * 1000)
            letter = DeadLetter.for_message(
                item.message, "invalid", exc_type="InvalidMessage", exc_message=problem,
                first_failure_ms=now, last_failure_ms=now, worker="dispatcher", extra={"shard": item.entry.shard},
            )
            self._dead_letter(item.entry, letter, "invalid", problem)
        return kept

    def _dead_letter(self, entry: Claimed, letter: DeadLetter, reason: str, why: str) -> None:
        """Store the letter and ack the entry; if the letter cannot be stored (a full store) the entry
        stays in flight, to be reaped and tried again, and the rest of the batch goes on."""
        try:
            self.env.dead_letters.add(letter)
        except redis.RedisError as exc:
            log_event(logging.ERROR, f"{reason}.dead_letter_failed", id=entry.task_id, shard=entry.shard,
                      error=str(exc))
            return
        log_event(logging.ERROR, f"{reason}.dead_lettered", id=entry.task_id, shard=entry.shard, why=why)
        self.env.observer.dead_lettered(reason, 1)
        self._to_ack.append(entry)

    def _orphans(self, shard: int, ids: list[str]) -> None:
        log_event(logging.ERROR, "orphan.dropped", shard=shard, count=len(ids), ids=",".join(ids[:10]),
                  why="in due without a stored message: nothing to publish")
        self.env.observer.orphaned(shard, len(ids))

    def _revoked(self, shard: int, ids: list[str], where: str) -> None:
        log_event(logging.INFO, "revoked.dropped", shard=shard, count=len(ids), ids=",".join(ids[:10]), at=where)
        self.env.observer.revoked(shard, len(ids))
        if self.on_revoked is not None:
            try:
                self.on_revoked(ids)
            except Exception as exc:  # a result backend's trouble is not the dispatcher's
                log_event(logging.WARNING, "revoked.mark_failed", shard=shard, error=repr(exc))

    def _dead_letter_unpublishable(self, refused: list[tuple[Item, BaseException]]) -> None:
        """A message the broker (or Kombu) refuses for a reason of its own would block its shard
        if it went back to ``due``: it goes to the dead-letter store, and the shard goes on."""
        now = int(time.time() * 1000)
        for item, exc in refused:
            if item.message is None:  # a built envelope is never refused alone: the write fails whole
                continue
            letter = DeadLetter.for_message(
                item.message, "unpublishable", exc_type=type(exc).__name__, exc_message=str(exc),
                first_failure_ms=now, last_failure_ms=now, worker="dispatcher",
            )
            self._dead_letter(item.entry, letter, "unpublishable", describe(exc))

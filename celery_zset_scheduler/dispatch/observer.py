"""What a dispatcher reports as it works: the :class:`Observer` interface (metrics implement it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class Observer:
    """What a dispatcher reports. The base class does nothing; metrics subclass it."""

    def claimed(self, shard: int, count: int, seconds: float) -> None:
        """A claim call on ``shard`` took ``seconds`` and moved ``count`` entries in flight."""

    def published(self, per_shard: Mapping[int, int], lateness_ms: Sequence[int], seconds: float) -> None:
        """Entries were handed to the broker (``per_shard`` counts), each ``lateness_ms`` late."""

    def leadership(self, shard: int, acquired: bool) -> None:
        """This dispatcher became (or stopped being) the leader of ``shard``."""

    def reaped(self, shard: int, count: int) -> None:
        """Expired in-flight entries went back to ``due``."""

    def dead_lettered(self, reason: str, count: int) -> None:
        """Entries went to the dead-letter store."""

    def outage(self, what: str, error: BaseException) -> None:
        """Redis or the broker could not be reached."""

    def orphaned(self, shard: int, count: int) -> None:
        """Ids were found in ``due`` without a stored message (dropped: nothing to publish)."""

    def revoked(self, shard: int, count: int) -> None:
        """Revoked entries were dropped instead of published (I10)."""


class Observers(Observer):
    """Reports to several observers in turn (a caller's own plus the metrics)."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def claimed(self, shard: int, count: int, seconds: float) -> None:
        for o in self.observers:
            o.claimed(shard, count, seconds)

    def published(self, per_shard: Mapping[int, int], lateness_ms: Sequence[int], seconds: float) -> None:
        for o in self.observers:
            o.published(per_shard, lateness_ms, seconds)

    def leadership(self, shard: int, acquired: bool) -> None:
        for o in self.observers:
            o.leadership(shard, acquired)

    def reaped(self, shard: int, count: int) -> None:
        for o in self.observers:
            o.reaped(shard, count)

    def dead_lettered(self, reason: str, count: int) -> None:
        for o in self.observers:
            o.dead_lettered(reason, count)

    def outage(self, what: str, error: BaseException) -> None:
        for o in self.observers:
            o.outage(what, error)

    def orphaned(self, shard: int, count: int) -> None:
        for o in self.observers:
            o.orphaned(shard, count)

    def revoked(self, shard: int, count: int) -> None:
        for o in self.observers:
            o.revoked(shard, count)

    def find(self, kind: type[Observer]) -> Observer | None:
        """The first observer of ``kind`` among these (nested ones included)."""
        for o in self.observers:
            found = o.find(kind) if isinstance(o, Observers) else (o if isinstance(o, kind) else None)
            if found is not None:
                return found
        return None

"""What a hand-off carries from the claim to the publisher: claimed entries with their messages.

Shared by every hand-off (:mod:`.generic` and the ones built on it), and the hooks the Celery layer
gives them (:data:`Check`, :data:`Revoked`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..model.codec import StoredMessage
from ..store.claims import Claimed, Fence
from .handoff import Built, Outgoing

#: Why a worker would discard a message (None: it would run it); the Celery layer provides it.
Check = Callable[[StoredMessage], "str | None"]
#: Told the ids dropped because they were revoked (the Celery layer marks their results revoked).
Revoked = Callable[[list[str]], None]
#: A shard's claimed entries and the fence of the claim (a claim returns up to a batch of them).
Claim = tuple[list[Claimed], Fence]


class Item(NamedTuple):
    """A claimed entry that decoded, with its message and the claim it came from; or one whose
    envelope the claim script built (``built``; ``message`` None: it was not decoded)."""

    entry: Claimed
    message: StoredMessage | None
    fence: Fence
    claimed_at: float  # monotonic time the claim's reply arrived
    built: Built | None = None


def item_bytes(item: Item) -> int:
    """The stored size of an item (what the byte budget counts)."""
    return len(item.entry.payload)


def outgoing(items: Sequence[Item]) -> list[Outgoing]:
    """The messages of decoded items (a built envelope is its own hand-off's: :mod:`.built`)."""
    batch = [Outgoing(i.message, i.entry.shard) for i in items if i.message is not None]
    if len(batch) != len(items):
        raise TypeError("built envelopes are published by the hand-off that claimed them")
    return batch

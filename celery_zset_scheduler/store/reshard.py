"""The steps of a reshard's move, one script per step, each on the keys of one shard.

An entry never moves in one script: that would span two shards (two slots on a Redis Cluster).
It moves in three steps, each atomic on its own shard and safe to repeat:

1. **take** (old shard): out of ``due``/``msg`` into the shard's moving area, where no claim sees it;
2. **put** (new shard): into ``due``/``msg`` there, marked in ``moved_in`` with the digest of its value;
3. **drop** (old shard): out of the moving area, with its idempotency-key bookkeeping.

A crash after 1 leaves the entry in the moving area (``held_call`` finds it, the next run puts and
drops it); after 2, the mark makes the repeated put a no-op even if the entry has run since. At no
moment can two shards both claim it. Periodic entries move the same way (``periodic_*``), revoke
records by copy-then-delete (a record twice is harmless). The procedure is ``ops.reshard``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..model.ids import task_id_of
from ..model.keys import KeySpace
from .scripts import Call, ScriptDef, as_bool, as_int

TAKE = ScriptDef("reshard_take", ("due", "msg", "id_keys", "moving", "moving_msg", "big"))
HELD = ScriptDef("reshard_held", ("moving", "moving_msg", "id_keys"))
PUT = ScriptDef("reshard_put", ("due", "msg", "wake", "pending_keys", "id_keys", "moved_in", "big"))
DROP = ScriptDef("reshard_drop", ("due", "moving", "moving_msg", "pending_keys", "id_keys"))
PERIODIC_TAKE = ScriptDef("reshard_periodic_take", (
    "periodic_names", "periodic_defs", "periodic_plan", "periodic_state", "periodic_tpl", "periodic_next",
    "periodic_run", "moving_periodic",
))
PERIODIC_PUT = ScriptDef("reshard_periodic_put", (
    "periodic_names", "periodic_defs", "periodic_plan", "periodic_state", "periodic_tpl", "periodic_next",
    "periodic_run", "periodic_wake", "moved_in",
))
REVOKES_PUT = ScriptDef("reshard_revokes_put", ("revoked", "revoked_gen"))
LOCK = ScriptDef("reshard_lock", ("reshard_lock",))
HOLDER = ScriptDef("reshard_holder", ("pending_keys", "due", "moving"))


@dataclass(frozen=True)
class Held:
    """An entry taken out of its old shard: what its put needs."""

    task_id: str
    due_ms: int
    value: bytes | None  # the stored value, arrival stamp included; None for an id without a message
    idempotency_key: str | None
    member: bytes = b""  # as stored (model/ids.py): the move carries it as it is


def _held(reply: Any) -> list[Held]:
    return [
        Held(task_id_of(i), int(float(s)), v or None, k.decode() if k else None, i)
        for i, s, v, k in reply
    ]


def take_call(keys: KeySpace, shard: int, members: Sequence[bytes | str]) -> Call[list[Held]]:
    """Take the entries still pending in ``shard`` into its moving area, by member as stored."""
    return TAKE.call(keys.shard(shard), list(members), _held)


def held_call(keys: KeySpace, shard: int, most: int) -> Call[list[Held]]:
    """Entries of ``shard``'s moving area (taken by a run that has not dropped them)."""
    return HELD.call(keys.shard(shard), [max(1, int(most))], _held)


def put_call(keys: KeySpace, shard: int, entries: Sequence[Held]) -> Call[list[int]]:
    """Put taken entries into ``shard``: 1 put, 0 put before, 2 the id was pending there already."""
    args: list[Any] = [keys.wake_channel, shard]
    for e in entries:
        args += (e.member, e.due_ms, e.value or b"", e.idempotency_key or "")
    return PUT.call(keys.shard(shard), args, lambda reply: [int(r) for r in reply])


def drop_call(keys: KeySpace, shard: int, members: Sequence[bytes | str]) -> Call[int]:
    """Forget moved entries (by member as stored) in their old ``shard``; how many were still there."""
    return DROP.call(keys.shard(shard), list(members), as_int)


def periodic_take_call(keys: KeySpace, shard: int, names: Sequence[str]) -> Call[list[tuple[str, bytes]]]:
    """Take periodic entries out of ``shard``: ``(name, packed entry)`` for each taken."""
    return PERIODIC_TAKE.call(keys.shard(shard), list(names), lambda reply: [(n.decode(), p) for n, p in reply])


def periodic_put_call(keys: KeySpace, shard: int, entries: Sequence[tuple[str, bytes]]) -> Call[list[int]]:
    """Put taken periodic entries into ``shard``: 1 put, 0 put before, 2 one of that name was there."""
    args: list[Any] = [keys.wake_channel, shard]
    for name, packed in entries:
        args += (name, packed)
    return PERIODIC_PUT.call(keys.shard(shard), args, lambda reply: [int(r) for r in reply])


def revokes_put_call(keys: KeySpace, shard: int, records: Sequence[tuple[bytes | str, int]]) -> Call[int]:
    """Record revokes (member as stored, expiry ms) moved from another shard into ``shard``."""
    args: list[Any] = []
    for task_id, expiry in records:
        args += (task_id, int(expiry))
    return REVOKES_PUT.call(keys.shard(shard), args, as_int)


def lock_call(keys: KeySpace, token: str, ttl_ms: int) -> Call[bool]:
    """Take or extend the reshard lease for ``token``; False while another process holds it."""
    return LOCK.call(keys, [token, int(ttl_ms)], as_bool)


def holder_call(keys: KeySpace, shard: int, idempotency_keys: Sequence[str]) -> Call[list[str | None]]:
    """During a move: the id each key holds in its old ``shard`` (pending or moving), or None."""
    return HOLDER.call(keys.shard(shard), list(idempotency_keys),
                       lambda reply: [task_id_of(r) if r else None for r in reply])

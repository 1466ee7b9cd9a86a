"""The store's shard count and format version, recorded on first use and checked by everyone.

A client configured with another shard count would hash ids to other shards and never find (or
dispatch) what the others stored, so every client refuses such a store with the same message.
The count changes only through a reshard (``ops.reshard``): while one is under way the meta hash
also names the count being moved to, and clients configured with either count follow the move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ShardCountMismatch
from ..model.keys import FORMAT_VERSION, PACKED_IDS_SINCE, UPGRADES_FROM, KeySpace
from ..model.reshard import Layout
from .scripts import Call, ScriptDef, Scripts

META = ScriptDef("meta", ("meta",))
RESHARD_BEGIN = ScriptDef("reshard_begin", ("meta",))
RESHARD_FINISH = ScriptDef("reshard_finish", ("meta",))

FIELDS = ("shards", "version", "moving_to", "resharded_from", "text_ids")
#: Copies a shard's revoke records of UUIDs stored as text to their packed form (model/ids.py).
PACK_REVOKES = ScriptDef("revokes_pack", ("revoked",))


@dataclass(frozen=True)
class Recorded:
    """What the store's meta hash says (None: not recorded yet)."""

    shards: int | None
    version: int | None
    moving_to: int | None = None  # a reshard under way, to this count
    resharded_from: int | None = None  # the count before the last reshard
    text_flag: int | None = None  # 1: upgraded from a version that stored every task id as text
    upgraded_from: int | None = None  # the version this very call upgraded the store from

    @property
    def upgraded(self) -> bool:
        """Whether this very call upgraded the store."""
        return self.upgraded_from is not None

    @property
    def text_ids(self) -> bool:
        """Whether members may be UUIDs as text (written by format 4 or before), so that a lookup
        of a packed id must look for its text too."""
        return bool(self.text_flag) or (self.version is not None and self.version < PACKED_IDS_SINCE)

    @property
    def layout(self) -> Layout | None:
        return None if self.shards is None else Layout(self.shards, self.moving_to)


def _int(value: Any) -> int | None:
    return None if value is None or value is False else int(value)


def _recorded(reply: Any) -> Recorded:
    values = [_int(v) for v in reply[: len(FIELDS)]] + [None] * (len(FIELDS) - len(reply))
    upgraded_from = int(reply[len(FIELDS)]) if len(reply) > len(FIELDS) else 0
    shards, version, moving_to, resharded_from, text_flag = values[: len(FIELDS)]
    return Recorded(shards, version, moving_to, resharded_from, text_flag, upgraded_from or None)


def _layout(reply: Any) -> Layout | None:
    shards, moving_to = reply
    return None if shards is None or shards is False else Layout(int(shards), _int(moving_to))


def record_call(keys: KeySpace) -> Call[Recorded]:
    """Record this client's shard count and format unless recorded (a store of the previous format
    is upgraded: it is read as it is); returns what is recorded."""
    return META.call(keys, [keys.shards, FORMAT_VERSION, PACKED_IDS_SINCE, *UPGRADES_FROM], _recorded)


def pack_revoke_records(scripts: Scripts, keys: KeySpace) -> None:
    """After the upgrade from format 4: give every revoke record of a UUID kept as text a copy
    under the packed member, which the claim of an entry scheduled from now on looks for (records
    are capped per shard: a bounded pass, once)."""
    scripts.run_many([PACK_REVOKES.call(keys.shard(s), [], lambda r: int(r)) for s in range(keys.span)])


def begin_call(keys: KeySpace, current: int, to: int) -> Call[Layout | None]:
    """Begin the move from ``current`` to ``to`` shards (or find it under way); the layout after it."""
    return RESHARD_BEGIN.call(keys, [current, to], _layout)


def finish_call(keys: KeySpace, current: int, to: int) -> Call[Layout | None]:
    """Record ``to`` as the shard count, ending the move from ``current``; the layout after it."""
    return RESHARD_FINISH.call(keys, [current, to], _layout)


def read(client: Any, keys: KeySpace) -> Recorded:
    """What is recorded, without writing anything."""
    return _recorded(client.hmget(keys.meta, list(FIELDS)))


def problem(keys: KeySpace, recorded: Recorded, configured: int | None = None) -> str | None:
    """Why a client configured with ``configured`` shards (default ``keys.shards``) must not use
    this store, or None."""
    count = keys.shards if configured is None else configured
    layout = recorded.layout
    if layout is not None and not layout.accepts(count):
        if layout.moving_to is not None:
            return (
                f"the store at prefix {keys.prefix!r} is being resharded from {layout.shards} to "
                f"{layout.moving_to} shards but this client is configured with zset_scheduler_shards={count}; "
                f"set it to {layout.moving_to} and restart"
            )
        was = (f" (it was resharded from {recorded.resharded_from})"
               if recorded.resharded_from is not None else "")
        return (
            f"the store at prefix {keys.prefix!r} has {layout.shards} shards{was} but this client is "
            f"configured with zset_scheduler_shards={count}; set zset_scheduler_shards={layout.shards} "
            f"and restart (the count of an existing store changes only with `celery zset reshard --to N`)"
        )
    if recorded.version is not None and recorded.version not in (FORMAT_VERSION, *UPGRADES_FROM):
        return (
            f"the store at prefix {keys.prefix!r} uses format version {recorded.version}, "
            f"this version of celery-zset-scheduler reads version {FORMAT_VERSION}"
        )
    return None


def ensure(scripts: Scripts, keys: KeySpace, configured: int | None = None) -> Recorded:
    """Record the shard count on first use; raise :class:`ShardCountMismatch` on a mismatch."""
    recorded = scripts.run(record_call(keys))
    found = problem(keys, recorded, configured)
    if found:
        raise ShardCountMismatch(found)
    return recorded


def verify(client: Any, keys: KeySpace) -> None:
    """Like :func:`ensure`, reading only (for tools that must not create a store)."""
    found = problem(keys, read(client, keys))
    if found:
        raise ShardCountMismatch(found)

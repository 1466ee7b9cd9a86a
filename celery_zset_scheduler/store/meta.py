"""The store's shard count and format version, recorded on first use and checked by everyone.

A client configured with another shard count would hash ids to other shards and never find (or
dispatch) what the others stored, so every client refuses such a store with the same message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ShardCountMismatch
from ..model.keys import FORMAT_VERSION, UPGRADES_FROM, KeySpace
from .scripts import Call, ScriptDef, Scripts

META = ScriptDef("meta", ("meta",))


@dataclass(frozen=True)
class Recorded:
    """What the store's meta hash says (None: not recorded yet)."""

    shards: int | None
    version: int | None


def _recorded(reply: Any) -> Recorded:
    shards, version = reply
    return Recorded(None if shards is None else int(shards), None if version is None else int(version))


def record_call(keys: KeySpace) -> Call[Recorded]:
    """Record this client's shard count and format unless recorded (a store of the previous format
    is upgraded: it is read as it is); returns what is recorded."""
    return META.call(keys, [keys.shards, FORMAT_VERSION, *UPGRADES_FROM], _recorded)


def read(client: Any, keys: KeySpace) -> Recorded:
    """What is recorded, without writing anything."""
    return _recorded(client.hmget(keys.meta, ["shards", "version"]))


def problem(keys: KeySpace, recorded: Recorded) -> str | None:
    """Why a client with ``keys.shards`` shards must not use this store, or None."""
    if recorded.shards is not None and recorded.shards != keys.shards:
        return (
            f"the store at prefix {keys.prefix!r} has {recorded.shards} shards but this client is "
            f"configured with zset_scheduler_shards={keys.shards}; set it to {recorded.shards} "
            "(changing the count of an existing store is not supported: use a new "
            "zset_scheduler_prefix and let the old one drain)"
        )
    if recorded.version is not None and recorded.version not in (FORMAT_VERSION, *UPGRADES_FROM):
        return (
            f"the store at prefix {keys.prefix!r} uses format version {recorded.version}, "
            f"this version of celery-zset-scheduler reads version {FORMAT_VERSION}"
        )
    return None


def ensure(scripts: Scripts, keys: KeySpace) -> None:
    """Record the shard count on first use; raise :class:`ShardCountMismatch` on a mismatch."""
    found = problem(keys, scripts.run(record_call(keys)))
    if found:
        raise ShardCountMismatch(found)


def verify(client: Any, keys: KeySpace) -> None:
    """Like :func:`ensure`, reading only (for tools that must not create a store)."""
    found = problem(keys, read(client, keys))
    if found:
        raise ShardCountMismatch(found)

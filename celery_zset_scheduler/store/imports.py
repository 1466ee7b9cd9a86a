"""Importing a broker's backlog: each id scheduled at most once, whatever the interruptions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..model.ids import member
from .pending import Store
from .scripts import Call, ScriptDef

IMPORT = ScriptDef("import", ("due", "msg", "wake", "imported", "big"))
#: How long a shard remembers the ids imported into it: longer than any run of the command.
KEEP_MS = 7 * 86_400_000

ImportStatus = Literal["imported", "pending", "imported_before"]
_STATUSES: tuple[ImportStatus, ...] = ("pending", "imported", "imported_before")


@dataclass(frozen=True)
class Importing:
    task_id: str
    due_ms: int
    payload: bytes


def import_entries(store: Store, entries: Sequence[Importing]) -> list[ImportStatus]:
    """Schedule ``entries`` unless imported before (one script call per shard); statuses in order."""
    store.check_meta()
    by_shard: dict[int, list[int]] = defaultdict(list)
    for n, e in enumerate(entries):
        by_shard[store.keys.shard_of(e.task_id)].append(n)
    out: list[ImportStatus] = ["pending"] * len(entries)
    for shard, indexes in sorted(by_shard.items()):
        sk = store.keys.shard(shard)
        args: list[Any] = [store.keys.wake_channel, shard, KEEP_MS]
        for n in indexes:
            args += (member(entries[n].task_id), int(entries[n].due_ms), entries[n].payload)
        call: Call[list[ImportStatus]] = IMPORT.call_with(
            (sk.due, sk.msg, sk.wake, store.keys.imported(shard), sk.big), args, _parse)
        statuses: list[ImportStatus] = store.scripts.run(call)
        for n, status in zip(indexes, statuses, strict=True):
            out[n] = status
    return out


def _parse(reply: Any) -> list[ImportStatus]:
    return [_STATUSES[int(r)] for r in reply]

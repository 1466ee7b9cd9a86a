"""One periodic entry's read-modify-write: read it with the Redis time, plan, compare-and-set.

A leader firing the entry between the read and the write makes the compare-and-set fail: the
change is planned again on what the leader wrote, so a change never loses a fire nor undoes one.
Every change of the runtime API (:mod:`.runtime`) is a plan given to :func:`change`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ZSetSchedulerError
from ...model.periodic import PeriodicEntry, PeriodicState
from ...model.periodic_json import join_entry, split_entry, state_from_json, state_to_json
from ...store.periodic import EntryRecord, Occurrence, PeriodicStore, WriteMode
from ..core.state import ensure_installation

ATTEMPTS = 20
#: What a change did ("added", "updated", "unchanged", "unknown", ...).
Status = str


@dataclass(frozen=True)
class Current:
    record: EntryRecord
    entry: PeriodicEntry
    state: PeriodicState

    @property
    def now_ms(self) -> int:
        return self.record.now_ms


@dataclass(frozen=True)
class Write:
    status: Status
    entry: PeriodicEntry | None  # None: remove it
    state: PeriodicState
    template: bytes | None = None  # None: keep the stored one
    look_ms: int | None = None
    mark: str = ""
    occurrences: Sequence[Occurrence] = ()


def periodic_store(app: Any) -> PeriodicStore:
    return PeriodicStore(ensure_installation(app).store)


def next_look(entry: PeriodicEntry, state: PeriodicState) -> int | None:
    return state.next_run_ms if entry.enabled and not entry.paused else None


def read_entry(ps: PeriodicStore, name: str) -> Current | None:
    record = ps.read(name)
    if record.definition is None or record.plan is None or record.state is None:
        return None
    return Current(record, join_entry(record.plan, record.definition), state_from_json(record.state))


def change_entry(app: Any, name: str, plan: Callable[[Current], Write | Status]) -> Status:
    """Read, plan, compare-and-set, again while a leader's fire gets in between."""
    ps = periodic_store(app)
    for _ in range(ATTEMPTS):
        current = read_entry(ps, name)
        if current is None:
            return "unknown"
        write = plan(current)
        if isinstance(write, str):
            return write
        ok, _ = ps.write(name, **write_args(write, "cas", current.record.state))
        if ok:
            return write.status
    raise ZSetSchedulerError(f"periodic entry {name!r} kept changing while it was written; try again")


def write_args(write: Write, mode: WriteMode, expected: bytes | None) -> dict[str, Any]:
    plan, definition = (None, None) if write.entry is None else split_entry(write.entry)
    return {"mode": mode, "expected": expected, "definition": None if definition is None else definition.encode(),
            "plan": None if plan is None else plan.encode(), "template": write.template,
            "state": state_to_json(write.state, defaults=False).encode(), "look_ms": write.look_ms,
            "mark": write.mark, "occurrences": write.occurrences}

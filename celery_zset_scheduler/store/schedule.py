"""Scheduling entries: the schedule script's definition, shared by single, pipelined and streamed
writes (``Store.schedule``, ``Store.schedule_many``, :mod:`.stream`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from redis.exceptions import ResponseError

from ..model.ids import member, task_id_of
from ..model.keys import KeySpace
from .scripts import Call, ScriptDef

SCHEDULE = ScriptDef("schedule", ("due", "msg", "wake", "pending_keys", "id_keys", "layout", "big"))
#: How the schedule script refuses a call routed with a shard count its shard no longer takes.
LAYOUT_REFUSAL = "ZSET_LAYOUT"
#: Arguments each entry adds after the leading ones: id, due ms, message, idempotency key.
SCHEDULE_ENTRY_ARGS = 4


@dataclass(frozen=True)
class NewEntry:
    task_id: str
    due_ms: int
    payload: bytes
    idempotency_key: str | None = None


ScheduleStatus = Literal["scheduled", "exists", "replaced", "duplicate_key"]


@dataclass(frozen=True)
class ScheduleResult:
    status: ScheduleStatus
    task_id: str  # the id that now holds the slot: the caller's, or the earlier one with the same key

    @property
    def created(self) -> bool:
        return self.status in ("scheduled", "replaced")


def schedule_head(keys: KeySpace, shard: int, replace: bool, text_ids: bool = True
                  ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The keys and leading arguments of a schedule call (the streamed bulk writer packs the same);
    each entry then adds :data:`SCHEDULE_ENTRY_ARGS` arguments. ``text_ids``: the store may hold
    UUIDs as text members (written by format 4 or before), so the script looks for them too."""
    sk = keys.shard(shard)
    head = (keys.wake_channel, shard, "1" if replace else "0", keys.shards, "1" if text_ids else "0")
    return tuple(getattr(sk, k) for k in SCHEDULE.keys), head


def layout_refused(error: BaseException) -> bool:
    """Whether ``error`` is the schedule script's refusal of a call routed with another shard
    count (the store is being, or has been, resharded): read the layout and route again."""
    return isinstance(error, ResponseError) and str(error).startswith(LAYOUT_REFUSAL)


def schedule_call(keys: KeySpace, shard: int, entries: Sequence[NewEntry], replace: bool,
                  text_ids: bool = True) -> Call[list[ScheduleResult]]:
    names, head = schedule_head(keys, shard, replace, text_ids)
    args: list[Any] = list(head)
    for e in entries:
        args += (member(e.task_id), int(e.due_ms), e.payload, e.idempotency_key or "")

    def parse(replies: Any) -> list[ScheduleResult]:
        return [_schedule_result(e.task_id, r) for e, r in zip(entries, replies, strict=True)]

    return SCHEDULE.call_with(names, args, parse)


def _schedule_result(task_id: str, reply: Any) -> ScheduleResult:
    if isinstance(reply, bytes):
        return ScheduleResult("duplicate_key", task_id_of(reply))
    statuses: tuple[ScheduleStatus, ...] = ("exists", "scheduled", "replaced")
    status = statuses[int(reply)]
    return ScheduleResult(status, task_id)

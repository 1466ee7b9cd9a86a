"""One pending entry's reads and changes: the cancel, get, reschedule and page scripts.

What they return too (:class:`StoredEntry`, :class:`Page`). Each is one script call on one shard,
so :class:`~.pending.Store` can send them where the entry lives, and pipeline them by shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..model.ids import member, task_id_of
from ..model.keys import KeySpace
from .scripts import Call, ScriptDef, as_bool
from .values import payload as stored_payload

CANCEL = ScriptDef("cancel", ("due", "msg", "inflight", "pending_keys", "id_keys", "big"))
GET = ScriptDef("get", ("due", "inflight", "msg"))
PAGE = ScriptDef("page", ("due", "msg"))
RESCHEDULE = ScriptDef("reschedule", ("due", "wake"))


CancelStatus = Literal["cancelled", "inflight", "unknown"]


@dataclass(frozen=True)
class StoredEntry:
    task_id: str
    shard: int
    state: Literal["pending", "inflight"]
    score_ms: int  # due time when pending, lease deadline when in flight
    payload: bytes | None


@dataclass(frozen=True)
class PageEntry:
    task_id: str
    due_ms: int
    payload: bytes | None
    #: the member as stored (model/ids.py): packed, or the text an older version wrote
    stored_as: bytes | str = ""

    @property
    def member(self) -> bytes | str:
        return self.stored_as or member(self.task_id)


@dataclass(frozen=True)
class Page:
    entries: list[PageEntry]
    cursor: tuple[int, str] | None  # pass back as ``after`` for the next page; None at the end


def cancel_call(keys: KeySpace, shard: int, ids: Sequence[str]) -> Call[dict[str, CancelStatus]]:
    def parse(replies: Any) -> dict[str, CancelStatus]:
        named: dict[int, CancelStatus] = {1: "cancelled", -1: "inflight", 0: "unknown"}
        return {i: named[int(r)] for i, r in zip(ids, replies, strict=True)}

    return CANCEL.call(keys.shard(shard), [member(i) for i in ids], parse)


def get_call(keys: KeySpace, shard: int, task_id: str) -> Call[StoredEntry | None]:
    def parse(reply: Any) -> StoredEntry | None:
        if not reply:
            return None
        state: Literal["pending", "inflight"] = "pending" if reply[0] == b"pending" else "inflight"
        return StoredEntry(task_id, shard, state, int(float(reply[1])), stored_payload(reply[2] or None))

    return GET.call(keys.shard(shard), [member(task_id)], parse)


def reschedule_call(keys: KeySpace, shard: int, task_id: str, due_ms: int) -> Call[bool]:
    return RESCHEDULE.call(keys.shard(shard), [keys.wake_channel, shard, member(task_id), int(due_ms)], as_bool)


def page_call(keys: KeySpace, shard: int, *, after: tuple[int, str] | None, min_due: int | None,
              max_due: int | None, limit: int, with_payloads: bool) -> Call[Page]:
    limit = max(1, int(limit))
    args = [
        "" if after is None else int(after[0]),
        "" if after is None else member(after[1]),
        "-inf" if min_due is None else int(min_due),
        "+inf" if max_due is None else int(max_due),
        limit,
        "1" if with_payloads else "0",
    ]

    def parse(reply: Any) -> Page:
        ids, scores, payloads = reply
        entries = [
            PageEntry(task_id_of(i), int(float(s)), stored_payload(payloads[n] or None) if with_payloads else None, i)
            for n, (i, s) in enumerate(zip(ids, scores, strict=True))
        ]
        cursor = (entries[-1].due_ms, entries[-1].task_id) if len(entries) == limit else None
        return Page(entries, cursor)

    return PAGE.call(keys.shard(shard), args, parse)

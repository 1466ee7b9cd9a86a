"""The dead-letter store: tasks that will not run again on their own, kept for people to act on.

Records (:class:`~..model.letters.DeadLetter`) are JSON in one hash, indexed by dead-lettered time
in a ZSET, both under the hash tag ``{prefix:dlq}``. Adding trims by count and by age in the same
script (I7).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..model.keys import KeySpace, storable
from ..model.letters import DeadLetter
from .scripts import Call, ScriptDef, Scripts, as_int, scripts_for

DLQ_ADD = ScriptDef("dlq_add", ("dlq_index", "dlq_data"))
DLQ_PAGE = ScriptDef("dlq_page", ("dlq_index", "dlq_data"))
DLQ_REMOVE = ScriptDef("dlq_remove", ("dlq_index", "dlq_data"))
REMOVE_CHUNK = 500


@dataclass(frozen=True)
class DeadLetterPage:
    letters: list[DeadLetter]
    cursor: tuple[int, str] | None


def add_call(keys: KeySpace, letter: DeadLetter, max_len: int, max_age_ms: int) -> Call[int]:
    """Returns the dead-lettered time (ms, Redis clock)."""
    return DLQ_ADD.call(keys, [letter.task_id, letter.to_json(), max_len, max_age_ms], lambda reply: int(reply[0]))


def page_call(keys: KeySpace, *, after: tuple[int, str] | None, newest_ms: int | None,
              oldest_ms: int | None, limit: int) -> Call[DeadLetterPage]:
    limit = max(1, int(limit))
    args = [
        "" if after is None else after[0], "" if after is None else after[1],
        "+inf" if newest_ms is None else int(newest_ms),
        "-inf" if oldest_ms is None else int(oldest_ms), limit,
    ]

    def parse(reply: Any) -> DeadLetterPage:
        ids, times, records = reply
        letters = [
            DeadLetter.from_json(raw, int(float(t)))
            for t, raw in zip(times, records, strict=True) if raw is not None
        ]
        cursor = (int(float(times[-1])), ids[-1].decode()) if len(ids) == limit else None
        return DeadLetterPage(letters, cursor)

    return DLQ_PAGE.call(keys, args, parse)


def remove_call(keys: KeySpace, ids: Sequence[str]) -> Call[int]:
    return DLQ_REMOVE.call(keys, ids, as_int)


class DeadLetters:
    """The capped dead-letter store of one prefix."""

    def __init__(self, client: Any, keys: KeySpace, *, max_len: int = 100_000,
                 max_age: float = 7 * 86400.0, scripts: Scripts | None = None,
                 on_add: Callable[[DeadLetter], None] | None = None) -> None:
        self.client = client
        self.on_add = on_add
        self.keys = keys
        self.max_len = max_len
        self.max_age_ms = int(max_age * 1000)
        self.scripts = scripts or scripts_for(client)

    def add(self, letter: DeadLetter) -> int:
        """Store a dead letter (replacing one with the same id); returns its time (ms)."""
        now = self.scripts.run(add_call(self.keys, letter, self.max_len, self.max_age_ms))
        if self.on_add is not None:
            self.on_add(replace(letter, dead_lettered_ms=now))
        return now

    def count(self) -> int:
        return int(self.client.zcard(self.keys.dlq_index))

    def count_between(self, oldest_ms: int | None, newest_ms: int | None) -> int:
        """Letters dead-lettered in a time range (ZCOUNT: O(log n))."""
        return int(self.client.zcount(self.keys.dlq_index, "-inf" if oldest_ms is None else oldest_ms,
                                      "+inf" if newest_ms is None else newest_ms))

    def get(self, task_id: str) -> DeadLetter | None:
        return self.get_many([task_id]).get(task_id)

    def get_many(self, task_ids: Sequence[str]) -> dict[str, DeadLetter]:
        """The letters of those ids that have one (one round trip)."""
        task_ids = [i for i in task_ids if storable(i)]  # one that is not can have no letter
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hget(self.keys.dlq_data, task_id)
            pipe.zscore(self.keys.dlq_index, task_id)
        replies = pipe.execute()
        found = {}
        for n, task_id in enumerate(task_ids):
            raw, score = replies[2 * n], replies[2 * n + 1]
            if raw is not None:
                found[task_id] = DeadLetter.from_json(raw, int(score or 0))
        return found

    def present(self, task_ids: Sequence[str]) -> list[str]:
        """Those ids that have a letter (one round trip)."""
        task_ids = [i for i in task_ids if storable(i)]
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.zscore(self.keys.dlq_index, task_id)
        return [i for i, score in zip(task_ids, pipe.execute(), strict=True) if score is not None]

    def page(self, *, after: tuple[int, str] | None = None, newest_ms: int | None = None,
             oldest_ms: int | None = None, limit: int = 50) -> DeadLetterPage:
        """Newest first, ``limit`` at a time; pass ``cursor`` back as ``after``."""
        return self.scripts.run(page_call(self.keys, after=after, newest_ms=newest_ms, oldest_ms=oldest_ms,
                                          limit=limit))

    def remove(self, task_ids: Iterable[str]) -> int:
        ids = list(task_ids)
        calls = [remove_call(self.keys, ids[s:s + REMOVE_CHUNK]) for s in range(0, len(ids), REMOVE_CHUNK)]
        return sum(self.scripts.run(c) for c in calls)

"""The dead-letter store: tasks that will not run again on their own, kept for people to act on.

Records are JSON in one hash, indexed by dead-lettered time in a ZSET, both under the hash tag
``{prefix:dlq}``. Adding trims by count and by age in the same script (I7). The original message
is kept as the store's exact encoding (base64), so a requeue publishes the same bytes again.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .codec import StoredMessage, decode, encode
from .keys import KeySpace
from .scripts import Scripts


@dataclass(frozen=True)
class DeadLetter:
    task_id: str
    task_name: str
    reason: str  # retries_exhausted | rejected | unknown_task | poison | failed
    exc_type: str = ""
    exc_message: str = ""
    traceback: str = ""
    args: Any = None
    kwargs: Any = None
    attempts: int = 0
    first_failure_ms: int = 0
    last_failure_ms: int = 0
    worker: str = ""
    message: str = ""  # base64 of the stored encoding of the original message
    dead_lettered_ms: int = 0  # filled in from the index when read back
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_poison(cls, task_id: str, raw: bytes, error: BaseException, shard: int) -> DeadLetter:
        now = int(time.time() * 1000)
        return cls(
            task_id=task_id, task_name="", reason="poison", exc_type=type(error).__name__,
            exc_message=str(error), attempts=0, first_failure_ms=now, last_failure_ms=now,
            worker="dispatcher", message=base64.b64encode(raw).decode("ascii"), extra={"shard": shard},
        )

    @classmethod
    def for_message(cls, message: StoredMessage, reason: str, **fields: Any) -> DeadLetter:
        payload = base64.b64encode(encode(message)).decode("ascii")
        return cls(task_id=message.task_id, task_name=message.task_name, reason=reason,
                   message=payload, **fields)

    def original(self) -> StoredMessage:
        """The message as it was stored; raises PoisonMessage when it never decoded."""
        return decode(self.task_id, base64.b64decode(self.message))

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("dead_lettered_ms")
        return json.dumps(data, separators=(",", ":"), default=repr)

    @classmethod
    def from_json(cls, raw: bytes | str, dead_lettered_ms: int = 0) -> DeadLetter:
        data = json.loads(raw)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known, dead_lettered_ms=dead_lettered_ms)


@dataclass(frozen=True)
class DeadLetterPage:
    letters: list[DeadLetter]
    cursor: tuple[int, str] | None


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
        self.scripts = scripts or Scripts(client)

    def add(self, letter: DeadLetter) -> int:
        """Store a dead letter (replacing one with the same id); returns its time (ms)."""
        now, _trimmed = self.scripts.dlq_add(
            [self.keys.dlq_index, self.keys.dlq_data],
            [letter.task_id, letter.to_json(), self.max_len, self.max_age_ms],
        )
        if self.on_add is not None:
            self.on_add(replace(letter, dead_lettered_ms=int(now)))
        return int(now)

    def count(self) -> int:
        return int(self.client.zcard(self.keys.dlq_index))

    def get(self, task_id: str) -> DeadLetter | None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.keys.dlq_data, task_id)
        pipe.zscore(self.keys.dlq_index, task_id)
        raw, score = pipe.execute()
        if raw is None:
            return None
        return DeadLetter.from_json(raw, int(score or 0))

    def page(self, *, after: tuple[int, str] | None = None, newest_ms: int | None = None,
             oldest_ms: int | None = None, limit: int = 50) -> DeadLetterPage:
        """Newest first, ``limit`` at a time; pass ``cursor`` back as ``after``."""
        args = [
            "" if after is None else after[0], "" if after is None else after[1],
            "+inf" if newest_ms is None else int(newest_ms),
            "-inf" if oldest_ms is None else int(oldest_ms), max(1, int(limit)),
        ]
        ids, times, records = self.scripts.dlq_page([self.keys.dlq_index, self.keys.dlq_data], args)
        letters = [
            DeadLetter.from_json(raw, int(float(t)))
            for t, raw in zip(times, records, strict=True) if raw is not None
        ]
        cursor = None
        if len(ids) == int(args[4]):
            cursor = (int(float(times[-1])), ids[-1].decode())
        return DeadLetterPage(letters, cursor)

    def iter(self, *, task_name: str | None = None, newest_ms: int | None = None,
             oldest_ms: int | None = None, page_size: int = 500) -> Iterator[DeadLetter]:
        after = None
        while True:
            page = self.page(after=after, newest_ms=newest_ms, oldest_ms=oldest_ms, limit=page_size)
            for letter in page.letters:
                if task_name is None or letter.task_name == task_name:
                    yield letter
            if page.cursor is None:
                return
            after = page.cursor

    def remove(self, task_ids: Iterable[str]) -> int:
        ids = list(task_ids)
        removed = 0
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            removed += int(self.scripts.dlq_remove([self.keys.dlq_index, self.keys.dlq_data], chunk))
        return removed


def reset_for_requeue(message: StoredMessage) -> StoredMessage:
    """The message a requeue schedules: the same body, the attempt counter reset and no ETA
    (the store decides when it runs)."""
    headers = {k: v for k, v in message.headers.items() if k not in _FAILURE_HEADERS}
    return replace(message, headers={**headers, "retries": 0, "eta": None})


# Headers the task side adds to carry failure history across retries; a requeue starts afresh.
_FAILURE_HEADERS = ("zset_first_failure",)

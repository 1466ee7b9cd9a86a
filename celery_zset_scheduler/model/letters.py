"""A dead letter: a task that will not run again on its own, as a record people act on.

The original message is kept as the store's exact encoding (base64), so a requeue schedules the
same bytes again.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .codec import StoredMessage, decode, encode
from .headers import FAILURE_HEADERS


@dataclass(frozen=True)
class DeadLetter:
    task_id: str
    task_name: str
    reason: str  # retries_exhausted | rejected | unknown_task | poison | unpublishable | failed
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


def reset_for_requeue(message: StoredMessage) -> StoredMessage:
    """The message a requeue schedules: the same body, the attempt counter reset and no ETA
    (the store decides when it runs)."""
    headers = {k: v for k, v in message.headers.items() if k not in FAILURE_HEADERS}
    return replace(message, headers={**headers, "retries": 0, "eta": None})

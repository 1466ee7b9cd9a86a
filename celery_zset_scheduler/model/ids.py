"""How a task id is stored as a ZSET/HASH member: canonical UUIDs packed to 17 bytes.

A canonical lowercase UUID (``str(uuid.uuid4())``, what Celery makes) is stored as ``\\xff`` and
its 16 bytes instead of its 36 characters: each of the two copies (the ``due`` ZSET and the ``msg``
HASH) then fits Redis' 24-byte allocation class instead of the 48-byte one. ``\\xff`` starts no
UTF-8 text, so a packed member can never be mistaken for an id stored as text: every other id
(a custom ``task_id``, an uppercase UUID) and every member an older version wrote (36-character
text, format 4 and before) stays as it is and reads back unchanged.

Lookups by an id a user gives try the packed form, then the text one (:func:`forms`); the leader's
calls (ack, release) carry the member the claim read instead of packing the id again.
"""

from __future__ import annotations

import re

#: The first byte of a packed member: never the first byte of UTF-8 text.
PACKED = 0xFF
PACKED_LENGTH = 17

_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def packable(task_id: str) -> bool:
    """Whether ``task_id`` is stored packed: a canonical lowercase UUID (any version)."""
    return len(task_id) == 36 and _CANONICAL.match(task_id) is not None


def member(task_id: str) -> bytes | str:
    """The member ``task_id`` is written as: 17 bytes for a canonical UUID, else the id itself."""
    if len(task_id) == 36 and _CANONICAL.match(task_id) is not None:
        return b"\xff" + bytes.fromhex(task_id.replace("-", ""))
    return task_id


def forms(task_id: str) -> tuple[bytes | str, ...]:
    """Every member ``task_id`` may be stored as, the current one first: a canonical UUID also
    as its text, which a store written by format 4 or before holds."""
    packed = member(task_id)
    return (packed, task_id) if packed is not task_id else (task_id,)


def task_id_of(stored: bytes | str) -> str:
    """The task id of a member read from Redis (packed or text)."""
    if isinstance(stored, str):
        return stored
    if len(stored) == PACKED_LENGTH and stored[0] == PACKED:
        h = stored[1:].hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return stored.decode("utf-8", errors="replace")


def task_ids_of(stored: list[bytes]) -> list[str]:
    """:func:`task_id_of` of each member (read as bytes), in a comprehension (no call a member)."""
    packed = [(len(s) == PACKED_LENGTH and s[0] == PACKED) for s in stored]
    if all(packed):
        return [f"{h[2:10]}-{h[10:14]}-{h[14:18]}-{h[18:22]}-{h[22:]}" for h in map(bytes.hex, stored)]
    return [task_id_of(s) for s in stored]


def is_packed(stored: bytes | str) -> bool:
    return isinstance(stored, bytes) and len(stored) == PACKED_LENGTH and stored[0] == PACKED

"""Opaque paging cursors: compressed, URL-safe, and bound to the query that made them.

A cursor carries the position of a listing (for the pending store: one ``(score, id)`` per shard)
and a fingerprint of the filters it was made with, so resuming with other filters is refused
instead of silently returning a wrong page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from collections.abc import Mapping
from typing import Any

from ..errors import ZSetSchedulerError

VERSION = 1


class InvalidCursor(ZSetSchedulerError, ValueError):
    """The cursor is not one this version made, or was made for another query."""


def fingerprint(kind: str, query: Mapping[str, Any]) -> str:
    text = json.dumps([kind, dict(query)], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def encode_cursor(kind: str, query: Mapping[str, Any], state: Any) -> str:
    data = {"v": VERSION, "q": fingerprint(kind, query), "s": state}
    raw = zlib.compress(json.dumps(data, separators=(",", ":")).encode("utf-8"), 9)
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(kind: str, query: Mapping[str, Any], cursor: str) -> Any:
    """The state stored in ``cursor``; raises :class:`InvalidCursor`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(zlib.decompress(raw))
        version, made_for, state = data["v"], data["q"], data["s"]
    except (binascii.Error, ValueError, zlib.error, KeyError, TypeError):
        raise InvalidCursor("invalid cursor: pass the cursor printed by the previous page unchanged") from None
    if version != VERSION:
        raise InvalidCursor(f"cursor of format {version!r}: made by another version, start again without it")
    if made_for != fingerprint(kind, query):
        raise InvalidCursor("this cursor was made with other filters: repeat the same filters to resume")
    return state

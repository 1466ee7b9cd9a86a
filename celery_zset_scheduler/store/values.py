"""The values of a shard's ``msg`` hash: the encoded message behind an arrival stamp.

Since format 3 the schedule script stores ``\\x01`` + Redis TIME (seconds, microseconds, 4 bytes
each) + the entry's place in its call (2 bytes) + the message. The stamp is the store's own: it
orders entries due at the same instant by arrival (send order) across shards, and it is taken off
before a message is decoded. A value without the marker was written by format 2 and has no stamp.
"""

from __future__ import annotations

import struct

MARKER = 0x01
_STAMP = struct.Struct(">IIH")
STAMP_BYTES = 1 + _STAMP.size
_MARKED = struct.Struct(">x" + _STAMP.format.removeprefix(">"))  # a stamp, its marker skipped

#: (seconds, microseconds, place in call): compares as arrival order.
Arrival = tuple[int, int, int]
#: Sorts before any stamp: format-2 values arrived before format 3 existed.
UNSTAMPED: Arrival = (0, 0, 0)


def split(value: bytes) -> tuple[Arrival, bytes]:
    """The arrival stamp and the encoded message of a stored value."""
    if value[:1] == b"\x01" and len(value) >= STAMP_BYTES:
        seconds, micros, place = _STAMP.unpack_from(value, 1)
        return (seconds, micros, place), value[STAMP_BYTES:]
    return UNSTAMPED, value


def split_all(values: list[bytes]) -> tuple[list[Arrival], list[bytes]]:
    """:func:`split` of each value: their stamps, and their messages (comprehensions: no call a value)."""
    unpack, mark = _STAMP.unpack_from, b"\x01"
    arrivals = [unpack(v, 1) if v[:1] == mark and len(v) >= STAMP_BYTES else UNSTAMPED for v in values]
    return arrivals, messages_of(values)


def messages_of(values: list[bytes]) -> list[bytes]:
    """The messages of the values, their stamps taken off."""
    mark = b"\x01"
    return [v[STAMP_BYTES:] if v[:1] == mark and len(v) >= STAMP_BYTES else v for v in values]


def payload(value: bytes | None) -> bytes | None:
    """The encoded message of a stored value, without its stamp."""
    return None if value is None else split(value)[1]


def arrivals_of(stamps: bytes, count: int) -> list[Arrival]:
    """The arrivals of ``count`` stamps written one after the other (``STAMP_BYTES`` each, marker
    included, as a claim that builds envelopes returns them); a string of another length raises."""
    if len(stamps) != count * STAMP_BYTES:
        raise ValueError(f"{len(stamps)} bytes of stamps for {count} entries")
    return list(_MARKED.iter_unpack(stamps))

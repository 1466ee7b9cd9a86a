"""Stamps written one after the other (a claim that builds envelopes returns them so)."""

from __future__ import annotations

import struct

import pytest

from celery_zset_scheduler.store.values import STAMP_BYTES, UNSTAMPED, arrivals_of, split


def test_stamps_in_a_row_read_as_each_value_reads_its_own() -> None:
    stamps = [b"\x01" + struct.pack(">IIH", 1_700_000_000 + n, 999_999 - n, n) for n in range(3)]
    unstamped = b"\x01" + bytes(10)
    assert arrivals_of(b"".join(stamps) + unstamped, 4) == [split(s + b"[...]")[0] for s in stamps] + [UNSTAMPED]
    assert arrivals_of(b"", 0) == []


def test_stamps_of_another_length_are_refused() -> None:
    with pytest.raises(ValueError, match="12 bytes of stamps for 1 entries"):
        arrivals_of(bytes(STAMP_BYTES + 1), 1)
    with pytest.raises(ValueError):
        arrivals_of(bytes(STAMP_BYTES), 2)

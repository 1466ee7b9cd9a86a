"""How task ids become members: only canonical lowercase UUIDs are packed, and back exactly."""

from __future__ import annotations

import uuid

import pytest

from celery_zset_scheduler.model.ids import forms, is_packed, member, packable, task_id_of


def test_a_canonical_uuid_packs_to_17_bytes_and_back() -> None:
    for made in (uuid.uuid4(), uuid.uuid1(), uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)):
        text = str(made)
        packed = member(text)
        assert packed == b"\xff" + made.bytes and len(packed) == 17
        assert is_packed(packed) and task_id_of(packed) == text
        assert forms(text) == (packed, text)  # the packed one first, then what format 4 stored


@pytest.mark.parametrize("task_id", [
    "order-42",  # a custom task_id
    str(uuid.uuid4()).upper(),  # not canonical: Celery never makes it, and it must read back as given
    "{" + str(uuid.uuid4()) + "}",
    str(uuid.uuid4()).replace("-", ""),
    "g" + str(uuid.uuid4())[1:],  # 36 characters, not hex
    "ünïcode-" + "x" * 28,
    "",
])
def test_every_other_id_is_stored_as_it_is(task_id: str) -> None:
    assert not packable(task_id)
    assert member(task_id) == task_id and forms(task_id) == (task_id,)
    assert task_id_of(task_id.encode("utf-8")) == task_id


def test_no_text_member_reads_as_packed() -> None:
    # \xff starts no UTF-8 text: a member an older version wrote can never be taken for a packed one.
    with pytest.raises(UnicodeDecodeError):
        (b"\xff" + bytes(16)).decode("utf-8")
    text = str(uuid.uuid4())
    assert task_id_of(text.encode()) == text and not is_packed(text.encode())

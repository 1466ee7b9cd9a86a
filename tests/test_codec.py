"""The compact stored encoding is exact: decode(encode(m)) == m for every shape of message."""

from __future__ import annotations

import json

import pytest

from celery_zset_scheduler.codec import StoredMessage, decode, encode
from celery_zset_scheduler.errors import PoisonMessage

TID = "5d3c6a5e-2f43-4a4c-9a41-0f1a2b3c4d5e"
BODY = b'[[2, 3], {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'


def celery_headers(**changes: object) -> dict[str, object]:
    headers: dict[str, object] = {
        "lang": "py", "task": "proj.add", "id": TID, "shadow": None, "eta": None, "expires": None,
        "group": None, "group_index": None, "retries": 0, "timelimit": [None, None],
        "root_id": TID, "parent_id": None, "argsrepr": "(2, 3)", "kwargsrepr": "{}",
        "origin": "gen42@host", "ignore_result": False, "replaced_task_nesting": 0,
        "stamped_headers": None, "stamps": {},
    }
    headers.update(changes)
    return headers


def message(**changes: object) -> StoredMessage:
    fields: dict[str, object] = {
        "task_id": TID, "body": BODY, "headers": celery_headers(),
        "properties": {"correlation_id": TID, "reply_to": "a1b2", "delivery_mode": 2, "priority": 0},
        "exchange": "", "routing_key": "celery", "queue": "celery",
    }
    fields.update(changes)
    return StoredMessage(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "msg",
    [
        message(),
        message(headers=celery_headers(retries=3, parent_id="p", root_id="r", eta=None, group="g")),
        message(body=b"\x80\x81binary", content_type="application/x-python-serialize", content_encoding="binary"),
        message(body=b'{"no": "embed suffix"}'),
        message(headers={"task": "x", "id": "other-id"}),  # a protocol without Celery's defaults
        message(properties={"reply_to": "x"}),  # no correlation id
        message(queue=None, exchange="tasks", routing_key="tasks.add"),
        message(queue="q1", routing_key="rk"),
        message(headers=celery_headers(argsrepr="('é', '日本')"), body='[["é"], {}, {}]'.encode()),
    ],
)
def test_round_trip_is_exact(msg: StoredMessage) -> None:
    assert decode(msg.task_id, encode(msg)) == msg


def test_defaults_are_left_out() -> None:
    raw = encode(message())
    data = json.loads(raw)
    assert TID not in raw.decode()  # the id is the entry's key, stored once elsewhere
    assert set(data["h"]) == {"task", "argsrepr", "kwargsrepr", "origin"}
    assert len(raw) < 200, len(raw)


def test_eta_header_is_not_restored() -> None:
    # The store waited already: what is published must run at once.
    msg = message(headers=celery_headers(eta=None))
    assert decode(TID, encode(msg)).headers["eta"] is None


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b'{"h": 1}', b'{"h": {}, "b": "x"}', b'{"h": {"task": "t"}, "B": "!!"}'])
def test_malformed_entries_raise_poison(raw: bytes) -> None:
    with pytest.raises(PoisonMessage, match="cannot be decoded"):
        decode("x", raw)

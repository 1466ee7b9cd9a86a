"""The compact stored encoding is exact: decode(encode(m)) == m for every shape of message."""

from __future__ import annotations

import json

import pytest

from celery_zset_scheduler.errors import PoisonMessage
from celery_zset_scheduler.model.codec import EMBED_SUFFIX, StoredMessage, Template, decode, encode

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
        message(body=b"\n\x00\xff" + BODY[-60:]),  # binary, with newlines, ending like the suffix
        message(body=b""),
        message(headers={k: v for k, v in celery_headers().items() if k not in ("origin", "argsrepr")}),
        message(headers=celery_headers(origin=None, kwargsrepr=None, custom={"a": [1, "\n"]})),
        message(properties={"correlation_id": TID, "priority": 7, "expiration": "10"}),  # no reply_to etc.
        message(properties={"correlation_id": TID, "reply_to": None, "delivery_mode": 1}),
        message(routing_key="", queue=""),
        message(properties={"correlation_id": TID, "reply_to": "e2703fd9-5749-32a0-b37c-9056a99b5c8a"}),
        message(properties={"correlation_id": TID, "reply_to": "~not-a-packed-uuid"}),
        message(properties={"correlation_id": TID, "reply_to": "E2703FD9-5749-32A0-B37C-9056A99B5C8A"}),
    ],
)
def test_round_trip_is_exact(msg: StoredMessage) -> None:
    assert decode(msg.task_id, encode(msg)) == msg


def test_defaults_are_left_out() -> None:
    raw = encode(message())
    meta, body = raw.split(b"\n", 1)
    assert TID not in raw.decode()  # the id is the entry's key, stored once elsewhere
    # Only the slots: task, argsrepr, kwargsrepr, origin, reply_to, delivery_mode, routing key.
    assert json.loads(meta) == ["proj.add", "(2, 3)", "{}", "gen42@host", "a1b2", 2, "celery", {"p": {"priority": 0}}]
    assert body == b"[[2, 3], {}"  # raw, without the embed suffix
    assert len(raw) < 110, len(raw)


@pytest.mark.parametrize(
    "template",
    [
        message(),
        message(headers=celery_headers(root_id="parent-root", parent_id="p", argsrepr="x", kwargsrepr="y")),
        message(properties={"correlation_id": TID, "priority": 3}, exchange="ex", routing_key="rk", queue=None),
    ],
)
@pytest.mark.parametrize(
    ("argsrepr", "kwargsrepr", "stripped"),
    [("(1, 1)", "{}", b"[[1, 1], {}"), ("('\"q\"\\n', 'é')", "{'k': '日本'}", b'[["\\"q\\""], {"k": "\\u65e5"}')],
)
def test_template_encodes_like_encode(template: StoredMessage, argsrepr: str, kwargsrepr: str, stripped: bytes) -> None:
    new_id = "9f0c1d2e-0000-4000-8000-000000000001"
    own_root = template.headers["root_id"] == template.task_id
    headers = {**template.headers, "id": new_id, "argsrepr": argsrepr, "kwargsrepr": kwargsrepr}
    if own_root:
        headers["root_id"] = new_id
    full = StoredMessage(
        task_id=new_id, body=stripped + EMBED_SUFFIX, headers=headers,
        content_type=template.content_type, content_encoding=template.content_encoding,
        properties={**template.properties, "correlation_id": new_id}, exchange=template.exchange,
        routing_key=template.routing_key, queue=template.queue,
    )
    raw = Template(template).encode(argsrepr, kwargsrepr, stripped)
    assert raw == encode(full)
    assert decode(new_id, raw) == full


def test_eta_header_is_not_restored() -> None:
    msg = message(headers=celery_headers(eta=None))
    assert decode(TID, encode(msg)).headers["eta"] is None


@pytest.mark.parametrize("eta", [
    "2031-05-01T12:00:00.250000+00:00", "2031-05-01T12:00:00+00:00", "1969-12-31T23:59:59.999999+00:00",
])
def test_an_eta_celery_writes_in_utc_is_kept_exactly_in_17_bytes(eta: str) -> None:
    msg = message(headers=celery_headers(eta=eta))
    raw = encode(msg)
    assert decode(TID, raw) == msg
    assert eta.encode() not in raw
    assert len(raw) - len(encode(message())) <= 18


@pytest.mark.parametrize("eta", ["2031-05-01T14:00:00.250000+02:00", "2031-05-01T12:00:00.25+00:00",
                                 "2031-05-01 12:00:00+00:00", "tomorrow"])
def test_any_other_eta_text_is_kept_as_it_is(eta: str) -> None:
    msg = message(headers=celery_headers(eta=eta), properties={"priority": 3})
    assert decode(TID, encode(msg)) == msg


def test_a_template_with_an_eta_encodes_each_tasks_own() -> None:
    template = message(headers=celery_headers(eta="2031-05-01T12:00:00.250000+00:00"))
    new_id = "0b5b4d4e-7a4a-4e4e-8b8b-5a5a5a5a5a5a"
    full = message(task_id=new_id, headers=celery_headers(id=new_id, root_id=new_id, argsrepr="(7,)",
                                                          eta="2032-01-02T03:04:05.678901+00:00"),
                   properties={"correlation_id": new_id, "reply_to": "a1b2", "delivery_mode": 2, "priority": 0},
                   body=b"[[7], {}" + EMBED_SUFFIX)
    raw = Template(template).encode("(7,)", "{}", b"[[7], {}", 1956625445678901)
    assert raw == encode(full) and decode(new_id, raw) == full


@pytest.mark.parametrize("raw", [
    b"", b"not json", b"[]\n", b'{"h": 1}\n', b'["t", "", "", "", null, 2, "q"]',  # no newline
    b'["t"]\nbody', b'[1, "", "", "", null, 2, "q"]\n', b'["t", "", "", "", null, 2, "q", []]\n',
    b'["t", "", "", "", null, 2, "q", {"h": 5}]\n', b'\xff\n', b'["t", "", "", "", "~abc", 2, "q"]\n',
    b'["t", "", "", "", "~!!", 2, "q"]\n',
])
def test_malformed_entries_raise_poison(raw: bytes) -> None:
    with pytest.raises(PoisonMessage, match="cannot be decoded"):
        decode("x", raw)


def test_a_uuid_reply_to_is_packed() -> None:
    reply_to = "e2703fd9-5749-32a0-b37c-9056a99b5c8a"
    raw = encode(message(properties={"correlation_id": TID, "reply_to": reply_to, "delivery_mode": 2}))
    meta = json.loads(raw.split(b"\n", 1)[0])
    assert meta[4].startswith("~") and len(meta[4]) == 23 and reply_to.encode() not in raw
    assert decode(TID, raw).properties["reply_to"] == reply_to


def test_values_equal_to_a_default_but_of_another_type_are_kept() -> None:
    headers = celery_headers(retries=False, ignore_result=0, timelimit=(None, None))
    decoded = decode(TID, encode(message(headers=headers)))
    assert decoded.headers["retries"] is False and decoded.headers["ignore_result"] == 0
    assert type(decoded.headers["ignore_result"]) is int and decoded.headers["timelimit"] == [None, None]


def test_decoded_defaults_are_fresh_copies() -> None:
    first = decode(TID, encode(message()))
    first.headers["timelimit"][0] = 5
    first.headers["stamps"]["x"] = 1
    again = decode(TID, encode(message()))
    assert (again.headers["timelimit"], again.headers["stamps"]) == ([None, None], {})

# mypy: disallow-untyped-calls=False
"""The confirms publisher's own frame and property encoding writes the bytes py-amqp writes."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from amqp.basic_message import Message

from celery_zset_scheduler.celery.publishers.amqp_wire import FrameEncoder, PropertyEncoder, check_expiration

from ..support.helpers import AppFactory, built_message

ODD_HEADERS: list[dict[str, Any]] = [
    {},
    {"big": 2**40, "neg": -2**31, "edge": 2147483647, "f": 1.5, "t": True, "n": None, "b": b"raw"},
    {"nested": {"a": [1, "x", None, {"deep": False}], "empty": {}}, "tuple": (1, 2), "unicode": "é€😀"},
    {"when": datetime(2024, 5, 1, 12, 0, 0), "dec": Decimal("1.25")},
]


def py_amqp(body: bytes, properties: dict[str, Any]) -> bytes:
    return bytes(Message(body, **properties)._serialize_properties())


@pytest.mark.parametrize("headers", ODD_HEADERS)
def test_properties_are_encoded_as_py_amqp_encodes_them(headers: dict[str, Any]) -> None:
    encoder = PropertyEncoder()
    properties = {"content_type": "application/json", "content_encoding": "utf-8", "application_headers": headers,
                  "delivery_mode": 2, "priority": 7, "correlation_id": "abc", "reply_to": "", "expiration": "100",
                  "timestamp": 1700000000, "app_id": "zt", "unknown_to_amqp": "dropped"}
    for _ in range(2):  # the second time from the cache
        assert encoder.encode(properties) == py_amqp(b"", properties)


def test_a_celery_message_is_framed_as_py_amqp_frames_it(apps: AppFactory) -> None:
    app = apps()
    m = built_message(app.tasks["t.record"], kwargs={"tag": "x" * 300_000}, countdown=60, priority=2)
    properties = {"content_type": m.content_type, "content_encoding": m.content_encoding,
                  "application_headers": m.headers, **m.properties}
    frames = FrameEncoder(3, 131072).publish("ex", "rk", True, m.body, properties)
    assert py_amqp(m.body, properties) in frames
    # Body frames of at most frame_max - 8 bytes: 300 KB of body in three of them.
    assert frames.count(b"\xce\x03\x00\x03") == 3 and len(frames) > 300_000


def test_a_property_py_amqp_cannot_encode_fails_the_same_way() -> None:
    with pytest.raises(TypeError):
        PropertyEncoder().encode({"correlation_id": 5})
    with pytest.raises(TypeError):
        py_amqp(b"", {"correlation_id": 5})


@pytest.mark.parametrize("value", ["1.5", "-1", 200, "", "١٢"])
def test_a_malformed_expiration_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="string of milliseconds"):
        check_expiration(value)
    check_expiration("0")
    check_expiration(None)


def test_cached_lists_and_tables_keep_equal_values_of_other_types_apart() -> None:
    encoder = PropertyEncoder()
    # 1 == 1.0 == True in Python, but each has an AMQP type of its own.
    for value in ([1], [True], [1.0], (1,), {"x": 1}, {"x": True}, {"x": [1]}, {"x": [1.0]}, [None, None], [],
                  {}, [1], {"x": 1}):
        properties = {"application_headers": {"v": value}}
        assert encoder.encode(properties) == py_amqp(b"", properties), value

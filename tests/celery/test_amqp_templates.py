# mypy: disallow-untyped-calls=False
"""The confirms publisher's message templates write the bytes py-amqp writes for each message,
and a template never serves a message that differs from it in a value it holds encoded."""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any

import pytest
from amqp.basic_message import Message

from celery_zset_scheduler.celery.publishers.amqp_templates import Templates, amqp_properties
from celery_zset_scheduler.celery.publishers.amqp_wire import FrameEncoder
from celery_zset_scheduler.model.codec import StoredMessage, decode, encode

from ..support.helpers import AppFactory, built_message

NOW = 1_800_000_000.0


def py_amqp(m: StoredMessage, now: float = NOW) -> bytes:
    """What py-amqp writes for the message's properties, as the plain path builds them."""
    return bytes(Message(b"", **amqp_properties(m, now))._serialize_properties())


def assert_same(templates: Templates, batch: list[StoredMessage]) -> None:
    for n, m in enumerate(batch):
        assert templates.encode(m, NOW) == py_amqp(m), (n, m)


def test_messages_of_one_task_share_one_template(apps: AppFactory) -> None:
    app = apps()
    task = app.tasks["t.record"]
    batch = [built_message(task, kwargs={"tag": i}, countdown=60 + i) for i in range(50)]
    batch += [decode(m.task_id, encode(m)) for m in batch]  # as the dispatcher reads them back
    templates = Templates()
    assert_same(templates, batch)
    assert templates.built == 2  # decoding lists the properties in another order: a shape of its own


def test_tasks_queues_and_options_that_differ_do_not_share_a_template(apps: AppFactory) -> None:
    app = apps()
    record, span = app.tasks["t.record"], app.tasks["t.span"]
    variants = [
        built_message(record, kwargs={"tag": 1}, countdown=60),
        built_message(span, countdown=60),  # another task name
        built_message(record, kwargs={"tag": 1}, countdown=60, queue="other"),  # another queue
        built_message(record, kwargs={"tag": 1}, countdown=60, exchange="ex", routing_key="rk"),
        built_message(record, kwargs={"tag": 1}),  # no eta: nothing moved to zset_eta
        built_message(record, kwargs={"tag": 1}, countdown=60, expires=300),  # an expiration
        built_message(record, kwargs={"tag": 1}, countdown=60, priority=5),
        built_message(record, kwargs={"tag": 1}, countdown=60, priority=6),
        built_message(record, kwargs={"tag": 1}, countdown=60, headers={"tenant": "a"}),
        built_message(record, kwargs={"tag": 1}, countdown=60, headers={"tenant": "b"}),
        built_message(record, kwargs={"tag": 1}, countdown=60, headers={"tenant": 1}),
        built_message(record, kwargs={"tag": 1}, countdown=60, headers={"tenant": True}),
        built_message(record, kwargs={"tag": 1}, countdown=60, headers={"tenant": 1.0}),
        built_message(record, kwargs={"tag": 1}, countdown=60, headers={"tenant": [1]}),
        built_message(record, kwargs={"tag": 1}, countdown=60, headers={"tenant": [True]}),
        built_message(record, kwargs={"tag": 1}, countdown=60, time_limit=10),
        dataclasses.replace(built_message(record, countdown=60), content_type="application/x-msgpack"),
        dataclasses.replace(built_message(record, countdown=60), content_encoding="binary"),
        built_message(record, kwargs={"tag": 1}, countdown=60, delivery_mode=1),
        built_message(record, kwargs={"tag": 1}, countdown=60, delivery_mode="persistent"),
        built_message(record, kwargs={"tag": 1}, countdown=60, ignore_result=True),
    ]
    templates = Templates()
    for _ in range(3):  # each pattern again, in an order that alternates shapes and values
        assert_same(templates, variants)
        assert_same(templates, list(reversed(variants)))
    built = templates.built
    assert_same(templates, variants)
    assert templates.built == built  # it learnt which values vary: no more rebuilding


def test_a_value_that_varies_per_message_is_learnt(apps: AppFactory) -> None:
    app = apps()
    task = app.tasks["t.record"]
    batch = [built_message(task, countdown=60, headers={"request": f"r{i}", "n": i % 3 == 0}) for i in range(30)]
    templates = Templates()
    assert_same(templates, batch)
    assert templates.built <= 3  # the first, then once per header that varies


def base_message() -> StoredMessage:
    return StoredMessage(
        "id-1", b"[[], {}, {}]",
        {"lang": "py", "task": "t.x", "id": "id-1", "eta": None, "expires": None, "retries": 0,
         "timelimit": [None, None], "root_id": "id-1", "argsrepr": "()", "stamps": {}, "flag": False, "n": 0},
        properties={"correlation_id": "id-1", "reply_to": "r", "delivery_mode": 2},
        routing_key="q", queue="q",
    )


VALUES: list[Any] = [0, 1, -1, 2**40, False, True, None, "", "a", "é€😀", 1.5, float("nan"), [], [None], ["a", None],
                     [1], [True], (1,), ("a",), {}, {"a": 1}, {"a": True}, b"raw"]


def test_random_values_of_the_same_shape_encode_as_py_amqp() -> None:
    rng = random.Random(7)
    base = base_message()
    templates = Templates()
    for i in range(2000):
        headers = dict(base.headers)
        for key in rng.sample(sorted(headers), 3):
            headers[key] = rng.choice(VALUES)
        if rng.random() < 0.2:
            headers["eta"] = "2026-01-01T00:00:00+00:00"
        if rng.random() < 0.2:
            headers["expires"] = "2027-01-01T00:00:00+00:00"
        properties = dict(base.properties, reply_to=rng.choice(["r", "s"]),
                          delivery_mode=rng.choice([1, 2, "transient"]))
        m = dataclasses.replace(base, task_id=f"id-{i}", headers=headers, properties=properties)
        try:
            expected = py_amqp(m)
        except (TypeError, ValueError) as exc:  # py-amqp cannot write it: the template path refuses it too
            with pytest.raises(type(exc)):
                templates.encode(m, NOW)
            continue
        assert templates.encode(m, NOW) == expected, headers


def test_properties_of_unusual_kinds_are_encoded_the_plain_way() -> None:
    m = dataclasses.replace(base_message(), properties={"correlation_id": "id-1", "reply_to": 5})
    templates = Templates()
    with pytest.raises(TypeError):
        templates.encode(m, NOW)
    with pytest.raises(TypeError):
        py_amqp(m)
    ok = dataclasses.replace(base_message(), properties={"correlation_id": "id-1", "user_id": b"guest", "type": "x"})
    assert templates.encode(ok, NOW) == py_amqp(ok)


def test_the_expiration_is_computed_at_each_message(apps: AppFactory) -> None:
    app = apps()
    m = built_message(app.tasks["t.record"], countdown=60, expires=600)
    templates = Templates()
    for later in (0.0, 1.0, 2.5, 700.0):
        assert templates.encode(m, NOW + later) == py_amqp(m, NOW + later)
    # Its default clock: the one the plain path reads.
    before = time.time()
    got = templates.encode(m)
    assert got in {py_amqp(m, before + d / 1000) for d in range(0, 2000)}


def test_frames_of_a_templated_message_are_py_amqp_frames(apps: AppFactory) -> None:
    app = apps()
    m = built_message(app.tasks["t.record"], kwargs={"tag": "x" * 300_000}, countdown=60, priority=2)
    encoder = FrameEncoder(3, 131072)
    frames = encoder.frames("ex", "rk", True, m.body, Templates().encode(m, NOW))
    assert frames == encoder.publish("ex", "rk", True, m.body, amqp_properties(m, NOW))
    assert py_amqp(m) in frames



@pytest.mark.parametrize(("first", "then"), [(0, False), (False, 0), (1, True), ([None], (None,)), ("1", 1),
                                              ([], {}), (None, "")])
def test_equal_values_of_other_types_do_not_share_a_template(first: Any, then: Any) -> None:
    base = base_message()
    templates = Templates()
    for value in (first, then, first):
        m = dataclasses.replace(base, headers={**base.headers, "n": value})
        assert templates.encode(m, NOW) == py_amqp(m), value
    assert templates.built == 2

"""The compact stored encoding is exact: decode(encode(m)) == m for every shape of message."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from celery_zset_scheduler.errors import PoisonMessage
from celery_zset_scheduler.model.codec import (
    EMBED_SUFFIX,
    StoredMessage,
    decode,
    encode,
    shared_length,
)
from celery_zset_scheduler.model.template import Template

from ..support import codec4, old_codec

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
    msg = message(headers=celery_headers(argsrepr="(2, 3)", kwargsrepr="{'k': 1}"),
                  body=b'[[2, 3], {"k": 1}' + EMBED_SUFFIX)
    raw = encode(msg)
    meta, body = raw.split(b"\n", 1)
    assert TID not in raw.decode()  # the id is the entry's key, stored once elsewhere
    # Only the layout and the slots: task, origin, reply_to, delivery_mode, routing key (shared
    # by every message of a producer, task and queue), then argsrepr, kwargsrepr.
    assert json.loads(meta) == [5, "proj.add", "gen42@host", "a1b2", 2, "celery", "(2, 3)", "{'k': 1}",
                                {"p": {"priority": 0}}]
    assert raw[:shared_length(raw)] == b'[5,"proj.add","gen42@host","a1b2",2,"celery",'
    assert body == b'[[2, 3], {"k": 1}'  # raw, without the embed suffix
    assert len(raw) < 110, len(raw)
    assert decode(TID, raw) == msg


def simple(args_text: str, argsrepr: str | None = None, kwargsrepr: str = "{}", **headers: object) -> StoredMessage:
    """A message whose body holds ``args_text`` as its args and no kwargs, with Celery's argsrepr
    of them unless ``argsrepr`` is given."""
    body = b"[[" + args_text.encode() + b"], {}" + EMBED_SUFFIX
    if argsrepr is None:
        argsrepr = repr(tuple(json.loads("[" + args_text + "]")))
    return message(headers=celery_headers(argsrepr=argsrepr, kwargsrepr=kwargsrepr, **headers), body=body)


@pytest.mark.parametrize("args_text", [
    "2, 3", "1234567, 1234567", "-5, 0, 42", "7", "", '"abc"', '"a b", 1', '"x"', '""',
    '"~!#$%&()*+-./:;<=>?@[]^_`{|}"', "123456789012345678901234567890", "-0",
])
def test_a_simple_call_keeps_only_its_arguments_text(args_text: str) -> None:
    msg = simple(args_text)
    if args_text == "-0":  # Python's repr of the int is "0": not Celery's argsrepr of that body
        assert json.loads(encode(msg).split(b"\n")[0])[6] == "(0,)"
        assert decode(TID, encode(msg)) == msg
        return
    raw = encode(msg)
    meta, body = raw.split(b"\n", 1)
    assert json.loads(meta) == [5, "proj.add", "gen42@host", "a1b2", 2, "celery", 0, {"p": {"priority": 0}}]
    assert body == args_text.encode()
    assert decode(TID, raw) == msg
    assert decode(TID, raw).headers["argsrepr"] == msg.headers["argsrepr"]


def test_the_benchmarks_task_is_31_bytes_shorter_than_in_layout_4() -> None:
    eta = "2027-01-01T00:00:00.137166+00:00"
    msg = simple("1234567, 1234567", eta=eta)
    msg = replace(msg, properties={"correlation_id": TID, "reply_to": "e2703fd9-5749-32a0-b37c-9056a99b5c8a",
                                   "delivery_mode": 2})
    raw, old = encode(msg), codec4.encode(msg)  # type: ignore[arg-type]
    assert raw[shared_length(raw):] == b"0,1798761600137166]\n1234567, 1234567"
    assert len(old) - shared_length(old) - (len(raw) - shared_length(raw)) == 31
    # Stored: the 11-byte stamp, the 9-byte shared reference, then this: 56 bytes, under 61
    # (an sds of up to 60 bytes is a 64-byte allocation).
    assert 11 + 9 + len(raw) - shared_length(raw) == 56
    assert decode(TID, raw) == msg == decode(TID, old)


@pytest.mark.parametrize(("args_text", "argsrepr", "kwargsrepr"), [
    ('"a,b"', None, "{}"),  # a comma inside a string
    ('"it\'s"', None, "{}"),  # a quote Python's repr writes another way
    ('"\\u00e9"', "('é',)", "{}"),  # non-ASCII (Kombu's JSON escapes it)
    ('"a\\\\b"', None, "{}"),  # a backslash
    ('"a\\"b"', None, "{}"),  # a double quote
    ("1.5", None, "{}"),  # a float
    ("true, null", None, "{}"),
    ("[1, 2]", None, "{}"),
    ("1, 2", "(1, 2)", "{'k': 1}"),  # kwargs
    ("1, 2", "user's own argsrepr", "{}"),  # an argsrepr given by the user
    ("1, 2", "(1, 2,)", "{}"),
    ("1", "(1)", "{}"),
    ("1,2", "(1,2)", "{}"),  # not Kombu's separator
    ("1,  2", "(1,  2)", "{}"),
])
def test_anything_else_is_stored_as_it_was(args_text: str, argsrepr: str | None, kwargsrepr: str) -> None:
    msg = simple(args_text, argsrepr, kwargsrepr)
    raw = encode(msg)
    meta = json.loads(raw.split(b"\n", 1)[0])
    assert type(meta[6]) is str and meta[7] == kwargsrepr
    assert decode(TID, raw) == msg


def test_a_truncated_argsrepr_is_not_a_simple_call() -> None:
    from celery.utils.saferepr import saferepr

    args = tuple(range(300))
    argsrepr = saferepr(args, 1024)
    assert argsrepr.endswith("...)")
    msg = simple(", ".join(map(str, args)), argsrepr)
    raw = encode(msg)
    assert json.loads(raw.split(b"\n", 1)[0])[6] == argsrepr and decode(TID, raw) == msg


@pytest.mark.parametrize("headers", [
    {"argsrepr": 0}, {"argsrepr": 7}, {"argsrepr": True}, {"argsrepr": None}, {"kwargsrepr": 0},
    {"argsrepr": "(2, 3)", "kwargsrepr": None}, {"argsrepr": 0.0}, {"argsrepr": -0.0}, {"argsrepr": 1.5},
])
def test_an_argsrepr_that_is_not_a_string_is_kept_as_it_is(headers: dict[str, object]) -> None:
    msg = message(headers=celery_headers(**headers))
    raw = encode(msg)
    # Never a number in the slot: the fast path's cjson reads 0.0 as a simple call's 0.
    assert type(json.loads(raw.split(b"\n", 1)[0])[6]) not in (int, float)
    assert decode(TID, raw) == msg
    without = {k: v for k, v in celery_headers().items() if k not in headers}
    msg = message(headers=without)  # and left out altogether
    assert decode(TID, encode(msg)) == msg


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
    [("(1, 1)", "{}", b"[[1, 1], {}"), ("('\"q\"\\n', 'é')", "{'k': '日本'}", b'[["\\"q\\""], {"k": "\\u65e5"}'),
     ("('a', -2)", "{}", b'[["a", -2], {}'), ("('a',)", "{}", b'[["a"], {}'), ("()", "{}", b"[[], {}"),
     ("(1, 1)", "{}", b'[[1, 1], {"k": 1}'), ("('a,b',)", "{}", b'[["a,b"], {}'), ("x", "{}", b"[[1, 1], {}"),
     ("(1, 1)", "{'k': 1}", b"[[1, 1], {}")],
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
    b'["t", "", "", "", "~!!", 2, "q"]\n', b'[4, "t", "", null, 2, "q", ""]\n', b'[6, "t", "", null, 2, "q", "", ""]\n',
    b'[5,"t","",null,2,"q",1]\n1', b'[5,"t","",null,2,"q",0]\n1.5', b'[5,"t","",null,2,"q",0,{"ne":1}]\n1',
    b'[5,"t","",null,2,"q",0]\n"it\'s"', b'[5,"t","",null,2,"q",0]\n1,2', b'[5,"t","",null,2,"q",0]\n[[1], {}',
    b'[5,"t","",null,2,"q"]\n1', b'[5,"t","",null,2,"q",0]\n01', b'[4,"t","",null,2,"q",0]\n1',
    b'[4, "t", "", null, 2, "q", "", "", {"m": ["nope"]}]\n', b'[4, 7, "", null, 2, "q", "", ""]\n', b'[]\n',
])
def test_malformed_entries_raise_poison(raw: bytes) -> None:
    with pytest.raises(PoisonMessage, match="cannot be decoded"):
        decode("x", raw)


def test_a_uuid_reply_to_is_packed() -> None:
    reply_to = "e2703fd9-5749-32a0-b37c-9056a99b5c8a"
    raw = encode(message(properties={"correlation_id": TID, "reply_to": reply_to, "delivery_mode": 2}))
    meta = json.loads(raw.split(b"\n", 1)[0])
    assert meta[3].startswith("~") and len(meta[3]) == 23 and reply_to.encode() not in raw
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


def _random_message(rnd: random.Random) -> StoredMessage:
    """A message of a random shape: any header or property left out, changed or added, any routing."""
    def text() -> str:
        return "".join(rnd.choice(["a", "é", "日", "\n", '"', "\\", ",", "~", " ", "\ud800", "0"])
                       for _ in range(rnd.randrange(0, 6)))

    def value() -> object:
        return rnd.choice([None, 0, 1, -3, 2.5, True, False, text(), [], {}, [None, None], {"k": [1, text()]}])

    tid = rnd.choice([TID, "custom-id", "", "e2703fd9-5749-32a0-b37c-9056a99b5c8a", text()])
    headers: dict[str, object] = dict(celery_headers(id=tid, root_id=rnd.choice([tid, "root", None])))
    for key in list(headers):
        roll = rnd.random()
        if roll < 0.1:
            del headers[key]
        elif roll < 0.2:
            headers[key] = value()
    if rnd.random() < 0.3:
        headers[text() or "x"] = value()
    if rnd.random() < 0.5:
        headers["eta"] = rnd.choice(["2031-05-01T12:00:00.250000+00:00", "2031-05-01T12:00:00+00:00", text()])
    headers["task"] = rnd.choice(["proj.add", text() or "t"]) if rnd.random() < 0.95 else 4
    properties: dict[str, object] = {"correlation_id": rnd.choice([tid, "other"]),
                                     "reply_to": rnd.choice(["e2703fd9-5749-32a0-b37c-9056a99b5c8a", text(), None]),
                                     "delivery_mode": rnd.choice([2, 1, None, "2"]), "priority": rnd.randrange(10)}
    for key in list(properties):
        if rnd.random() < 0.15:
            del properties[key]
    body = rnd.choice([BODY, b"[[1], {}" + EMBED_SUFFIX, bytes(rnd.randrange(256) for _ in range(rnd.randrange(20))),
                       text().encode("utf-8", "surrogatepass")])
    rk = rnd.choice(["celery", "", text()])
    return StoredMessage(
        task_id=tid, body=body, headers=headers,
        content_type=rnd.choice(["application/json", "application/x-msgpack"]),
        content_encoding=rnd.choice(["utf-8", "binary"]), properties=properties,
        exchange=rnd.choice(["", "ex"]), routing_key=rk, queue=rnd.choice([rk, None, "q"]),
    )


def _decodable(msg: StoredMessage) -> bool:
    return type(msg.headers.get("task")) is str


@pytest.mark.parametrize("seed", range(40))
def test_round_trip_is_exact_for_varied_messages(seed: int) -> None:
    rnd = random.Random(seed)
    for _ in range(50):
        msg = _random_message(rnd)
        if not _decodable(msg):
            with pytest.raises(PoisonMessage):
                decode(msg.task_id, encode(msg))
            continue
        raw = encode(msg)
        assert decode(msg.task_id, raw) == msg
        cut = shared_length(raw)
        assert cut == 0 or raw.startswith(b"[5,")  # the shared prefix, when the slots allow one


@pytest.mark.parametrize("seed", range(20))
def test_entries_written_by_the_previous_layout_decode_the_same(seed: int) -> None:
    rnd = random.Random(1000 + seed)
    for _ in range(50):
        msg = _random_message(rnd)
        if not _decodable(msg):
            continue
        old = old_codec.encode(msg)  # type: ignore[arg-type]
        assert not old.startswith(b"[4,") and shared_length(old) == 0
        assert decode(msg.task_id, old) == msg


@pytest.mark.parametrize("seed", range(20))
def test_entries_written_by_layout_4_decode_the_same(seed: int) -> None:
    rnd = random.Random(2000 + seed)
    for n in range(50):
        msg = _random_message(rnd) if n % 2 else _random_simple(rnd)
        if not _decodable(msg):
            continue
        old = codec4.encode(msg)  # type: ignore[arg-type]
        assert old.startswith(b"[4,") and decode(msg.task_id, old) == msg
        assert shared_length(old) == codec4.shared_length(old)


def _random_simple(rnd: random.Random) -> StoredMessage:
    """A call of a few ints and strings, with Celery's argsrepr (sometimes another one, or kwargs)."""
    def token() -> object:
        if rnd.random() < 0.5:
            return rnd.choice([0, -1, 7, 10**rnd.randrange(20), -(10**12)])
        return "".join(rnd.choice("ab ,'\"\\é~!-[]{}") for _ in range(rnd.randrange(4)))

    args = tuple(token() for _ in range(rnd.randrange(4)))
    kwargs = rnd.choice([{}, {}, {}, {"k": 1}])
    body = json.dumps([list(args), kwargs]).encode()[:-1] + EMBED_SUFFIX
    argsrepr = rnd.choice([repr(args), repr(args), repr(args), repr(args)[:-1], "x"])
    return message(headers=celery_headers(argsrepr=argsrepr, kwargsrepr=repr(kwargs),
                                          eta=rnd.choice([None, "2031-05-01T12:00:00.250000+00:00"])), body=body)


@pytest.mark.parametrize("seed", range(20))
def test_round_trip_is_exact_for_varied_calls(seed: int) -> None:
    rnd = random.Random(3000 + seed)
    simple_ones = 0
    for _ in range(200):
        msg = _random_simple(rnd)
        raw = encode(msg)
        assert decode(TID, raw) == msg
        meta = json.loads(raw.split(b"\n", 1)[0])
        simple_ones += type(meta[6]) is int
        tmpl = Template(message(headers=celery_headers(eta=msg.headers["eta"])))
        stripped = msg.body[: -len(EMBED_SUFFIX)]
        eta_us = None if msg.headers["eta"] is None else 1956625445678901
        again = tmpl.encode(str(msg.headers["argsrepr"]), str(msg.headers["kwargsrepr"]), stripped, eta_us)
        eta = "2032-01-02T03:04:05.678901+00:00"
        expected = msg if eta_us is None else replace(msg, headers={**msg.headers, "eta": eta})
        assert again == encode(expected)
    assert simple_ones > 20


def test_the_shared_prefix_is_the_same_for_every_call_of_a_producer() -> None:
    one = encode(message())
    other = encode(message(task_id="x", headers=celery_headers(id="x", root_id="x", argsrepr="(9, 9)"),
                           properties={"correlation_id": "x", "reply_to": "a1b2", "delivery_mode": 2, "priority": 0},
                           body=b"[[9, 9], {}" + EMBED_SUFFIX))
    assert one[:shared_length(one)] == other[:shared_length(other)]
    assert shared_length(one) > 0

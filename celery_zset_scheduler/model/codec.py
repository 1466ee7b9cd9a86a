"""The stored form of a task message, and its compact encoding.

A stored entry is the message exactly as Celery serialized it at ``apply_async`` time: the body
bytes, content type and encoding, headers, properties and routing. ``decode(encode(m)) == m`` always.

Encoding (layout 5, since format version 6, see ``model.keys.FORMAT_VERSION``): ``<meta>\\n<body>``.

- ``meta`` is one line of compact JSON: an array ``[5, task, origin, reply_to, delivery_mode,
  routing_key, argsrepr, kwargsrepr]``, then, only when needed, the ``eta`` and an object with
  everything else. Positions instead of key names save ~60 bytes a task; JSON output never holds a
  raw newline, so the first ``\\n`` ends it. A ``reply_to`` that is a UUID (Celery's client id, in
  every message) takes 23 bytes instead of 36.
- The values every message of one producer, task and queue shares come first: that prefix
  (:func:`shared_length`) is what the store keeps once per shard and refers to from each entry.
- ``body`` follows raw: no JSON escaping, no base64 for binary serializers.
- A *simple call* (no kwargs, every positional argument an int or a string of printable ASCII
  without quotes, backslashes or commas, and Celery's own argsrepr of them) keeps only what is
  between ``[[`` and ``], {}`` of its body: the argsrepr slot holds the integer ``0`` (an argsrepr
  is otherwise a string; another number is kept in the extras), the kwargsrepr slot is left out, and
  decoding rebuilds the body, ``argsrepr`` and ``kwargsrepr="{}"`` from that text
  (:func:`simple_args`; the encoder checks that what it would rebuild is what it was given, so
  nothing else takes this form). ``add(1234567, 1234567)``: ``0,<eta>]\\n1234567, 1234567`` after
  the shared prefix, 31 bytes fewer than layout 4.
- An ``eta`` as Celery writes it with the default UTC timezone is kept as integer microseconds in
  an optional slot after the kwargsrepr (17 bytes instead of ~45; an integer there cannot be
  the extras object); any other ``eta`` text is kept in the extras as it is.
- Layout 4 (formats 4 and 5: the same with a leading ``4`` and never a simple call) and layout 2
  (formats 2 and 3: ``[task, argsrepr, kwargsrepr, origin, reply_to, delivery_mode, routing_key,
  ...]``, no leading layout number) are still read: stores written before keep working.

Left out because they can be rebuilt exactly: the task id (it is the entry's key) and the ``id``,
``root_id`` and ``correlation_id`` equal to it; header values equal to Celery's defaults; the embed
suffix Celery appends to every protocol-2 JSON body. A small task is ~70 bytes instead of the
~950-byte Kombu envelope.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import PoisonMessage
from .times import isoformat_us, us_isoformat

JSON = "application/json"
UTF8 = "utf-8"

# Headers Celery's protocol 2 always sets, with the value that lets us leave them out.
_HEADER_DEFAULTS: dict[str, Any] = {
    "lang": "py",
    "shadow": None,
    "eta": None,
    "expires": None,
    "group": None,
    "group_index": None,
    "retries": 0,
    "timelimit": [None, None],
    "parent_id": None,
    "ignore_result": False,
    "replaced_task_nesting": 0,
    "stamped_headers": None,
    "stamps": {},
}
# The slots every message carries, in layout 5's (and 4's) order after its leading number: the
# shared ones (headers task and origin, properties reply_to and delivery_mode, the routing key),
# then the per-message argsrepr and kwargsrepr. Layout 2 had task, argsrepr, kwargsrepr, origin,
# reply_to, delivery_mode, routing key.
LAYOUT = 5
#: The layouts :func:`decode` reads with a leading layout number (2 has none).
_NUMBERED = (5, 4)
_HEADER_SLOTS = ("task", "origin", "argsrepr", "kwargsrepr")
_PROPERTY_SLOTS = ("reply_to", "delivery_mode")
#: The shared prefix of layouts 5 and 4: ``[5,`` (``[4,``) and the first five slots, each followed by a comma.
_SHARED = re.compile(rb'\[[45],(?:(?:"(?:[^"\\]|\\.)*"|-?[0-9]+|null),){5}')
#: Kombu's JSON of the protocol-2 embed part with nothing in it; most bodies end with it.
EMBED_SUFFIX = b', {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'
#: A simple call's arguments as its JSON body holds them: JSON ints and strings of printable ASCII
#: without ``"``, ``'``, ``\`` or ``,`` (their JSON and Python reprs differ only in the quotes),
#: separated by ``", "``; no token holds a comma, so one token is one without any.
_TOKEN = rb'(?:-?(?:0|[1-9][0-9]*)|"[ !#-&(-+\--\[\]-~]*")'
_SIMPLE_ARGS = re.compile(rb"(?:%s(?:, %s)*)?" % (_TOKEN, _TOKEN))
_SIMPLE_BODY = re.compile(rb"\[\[(%s)\], \{\}" % _SIMPLE_ARGS.pattern)  # a body without the embed suffix
_SIMPLE_HEAD, _SIMPLE_TAIL = b"[[", b"], {}"

# reply_to (Celery: the client's uuid, in every message) is stored packed; other values never start
# with the marker in the slot (such a value is kept in the extras instead).
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PACKED = "~"

_dumps: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON. A lone surrogate (Celery's argsrepr keeps one from an argument) has no
    UTF-8 form: it is written as a ``\\udXXX`` escape, as Kombu's JSON writes it, which reads back
    as the same string; character by character, so a :class:`~.template.Template` gives the same bytes."""
    text = _dumps(value)
    try:
        return text.encode(UTF8)
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode(UTF8)


@dataclass(frozen=True)
class StoredMessage:
    """A serialized Celery task message, ready to publish unchanged."""

    task_id: str
    body: bytes
    headers: dict[str, Any]
    content_type: str = JSON
    content_encoding: str = UTF8
    properties: dict[str, Any] = field(default_factory=dict)
    exchange: str = ""
    routing_key: str = ""
    queue: str | None = None

    @property
    def task_name(self) -> str:
        return str(self.headers.get("task", ""))

    def with_headers(self, **changes: Any) -> StoredMessage:
        return replace(self, headers={**self.headers, **changes})


def encode(message: StoredMessage) -> bytes:
    """Compact, exact encoding of a message (the task id is not included: it is the key)."""
    extra: dict[str, Any] = {}
    headers = dict(message.headers)
    properties = dict(message.properties)
    tid = message.task_id
    if headers.get("id") == tid:
        del headers["id"]
    else:
        extra["i"] = 0  # the id header differs from the entry's key: keep it as it is
    if headers.get("root_id") == tid:
        del headers["root_id"]
    else:
        extra["r"] = 0
    if properties.get("correlation_id") == tid:
        del properties["correlation_id"]
    else:
        extra["c"] = 0
    missing = [k for k in _HEADER_DEFAULTS if k not in headers]
    if missing:
        extra["m"] = missing
    for key, default in _HEADER_DEFAULTS.items():
        # The type too: False == 0, but it would be published as another JSON value.
        if key in headers and type(headers[key]) is type(default) and headers[key] == default:
            del headers[key]
    eta = headers.get("eta")
    eta_us = isoformat_us(eta) if isinstance(eta, str) else None
    if eta_us is not None:
        del headers["eta"]
    absent = [k for k in _HEADER_SLOTS if k not in headers] + [k for k in _PROPERTY_SLOTS if k not in properties]
    if absent:
        extra["a"] = absent
    reply_to = properties.pop("reply_to", None)
    if isinstance(reply_to, str) and reply_to.startswith(_PACKED):  # would read as packed: keep aside
        properties["reply_to"] = reply_to
        extra["a"] = [*extra.get("a", ()), "reply_to"]
        reply_to = None
    meta: list[Any] = [
        LAYOUT, headers.pop("task", None), headers.pop("origin", None), _pack_uuid(reply_to),
        properties.pop("delivery_mode", None), message.routing_key,
    ]
    body = message.body
    args = None
    if body.endswith(EMBED_SUFFIX):
        body = body[: -len(EMBED_SUFFIX)]
        if "argsrepr" in headers and "kwargsrepr" in headers:
            args = simple_args(headers["argsrepr"], headers["kwargsrepr"], body)
    else:
        extra["ne"] = 1
    if args is not None:
        del headers["argsrepr"], headers["kwargsrepr"]
        meta.append(0)
        body = args
    else:
        argsrepr = headers.pop("argsrepr", None)
        if type(argsrepr) in (int, float):  # would read as a simple call's mark (cjson: 0.0 == 0): aside
            headers["argsrepr"] = argsrepr
            argsrepr = None
        meta += (argsrepr, headers.pop("kwargsrepr", None))
    if headers:
        extra["h"] = headers
    if properties:
        extra["p"] = properties
    if message.content_type != JSON:
        extra["ct"] = message.content_type
    if message.content_encoding != UTF8:
        extra["ce"] = message.content_encoding
    if message.exchange:
        extra["x"] = message.exchange
    if message.queue is None:
        extra["nq"] = 1
    elif message.queue != message.routing_key:
        extra["q"] = message.queue
    if eta_us is not None:
        meta.append(eta_us)
    if extra:
        meta.append(extra)
    return json_bytes(meta) + b"\n" + body


def simple_args(argsrepr: Any, kwargsrepr: Any, stripped_body: bytes) -> bytes | None:
    """The arguments' text a simple call is stored with (what is between ``[[`` and ``], {}`` of a
    body given without :data:`EMBED_SUFFIX`), or None when the message is not one: kwargs empty,
    every argument a token of :data:`_SIMPLE_ARGS`, and argsrepr/kwargsrepr exactly what
    :func:`_simple_reprs` rebuilds from that text."""
    if kwargsrepr != "{}" or type(kwargsrepr) is not str or type(argsrepr) is not str:
        return None
    found = _SIMPLE_BODY.fullmatch(stripped_body)
    if found is None:
        return None
    args: bytes = found.group(1)
    return args if argsrepr == _simple_reprs(args) else None


def _simple_reprs(args: bytes) -> str:
    """Celery's argsrepr (``saferepr`` of the args tuple) of a simple call's arguments' text."""
    if not args:
        return "()"
    text = args.decode("ascii")
    if '"' in text:
        text = text.replace('"', "'")
    return "(" + text + (")" if "," in text else ",)")


def shared_length(raw: bytes) -> int:
    """How many leading bytes of an encoding are its shared values (``[5,`` task, origin,
    reply_to, delivery_mode, routing key): the part many messages have in common. 0 when the
    encoding has no such prefix (layout 2, or a value of an unusual type in those slots)."""
    found = _SHARED.match(raw)
    return found.end() if found else 0


def decode(task_id: str, raw: bytes) -> StoredMessage:
    """Rebuild a message (layout 5, 4 or 2); anything malformed raises :class:`PoisonMessage`."""
    try:
        if raw[:1] == b"\x02":
            raise ValueError("it refers to shared values (store/shared.py) the store no longer has")
        end = raw.index(b"\n")
        meta = json.loads(raw[:end])
        if type(meta) is not list or not meta:
            raise ValueError("not an encoded message")
        body = raw[end + 1:]
        simple = False
        if type(meta[0]) is int:
            if meta[0] not in _NUMBERED or len(meta) < 7:
                raise ValueError("not an encoded message")
            if meta[0] == LAYOUT and type(meta[6]) is int:  # a simple call (layout 5 only)
                if meta[6] != 0 or _SIMPLE_ARGS.fullmatch(body) is None:
                    raise ValueError("malformed simple call")
                task, origin, reply_to, delivery_mode, routing = meta[1:6]
                argsrepr, kwargsrepr, simple = _simple_reprs(body), "{}", True
                body = _SIMPLE_HEAD + body + _SIMPLE_TAIL + EMBED_SUFFIX
                rest = meta[7:]
            else:
                if len(meta) < 8:
                    raise ValueError("not an encoded message")
                task, origin, reply_to, delivery_mode, routing, argsrepr, kwargsrepr = meta[1:8]
                rest = meta[8:]
        else:
            if len(meta) < 7:
                raise ValueError("not an encoded message")
            task, argsrepr, kwargsrepr, origin, reply_to, delivery_mode, routing = meta[:7]
            rest = meta[7:]
        eta_us = rest.pop(0) if rest and type(rest[0]) is int else None
        if len(rest) > 1:
            raise ValueError("not an encoded message")
        extra = rest[0] if rest else {}
        if type(extra) is not dict:
            raise ValueError("malformed extras")
        # Celery's defaults, fresh (the list and the dict too), then the slots.
        headers: dict[str, Any] = {
            "lang": "py", "task": task, "id": task_id, "shadow": None,
            "eta": None if eta_us is None else us_isoformat(eta_us), "expires": None, "group": None,
            "group_index": None, "retries": 0, "timelimit": [None, None], "root_id": task_id,
            "parent_id": None, "argsrepr": argsrepr, "kwargsrepr": kwargsrepr, "origin": origin,
            "ignore_result": False, "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {},
        }
        properties: dict[str, Any] = {
            "reply_to": _unpack_uuid(reply_to), "delivery_mode": delivery_mode, "correlation_id": task_id,
        }
        if extra:
            for key in extra.get("a", ()):
                if key in _PROPERTY_SLOTS:
                    del properties[key]
                else:
                    del headers[key]
            for key in extra.get("m", ()):
                del headers[key]
            if "i" in extra:
                del headers["id"]
            if "r" in extra:
                del headers["root_id"]
            if "c" in extra:
                del properties["correlation_id"]
            headers.update(extra.get("h", ()))
            properties.update(extra.get("p", ()))
        if simple:
            if "ne" in extra:
                raise ValueError("malformed simple call")
        elif not extra.get("ne"):
            body += EMBED_SUFFIX
        routing_key = str(routing)
        queue = None if extra.get("nq") else str(extra.get("q", routing_key))
        if type(headers.get("task")) is not str:
            raise ValueError("no task name")
        return StoredMessage(
            task_id=task_id,
            body=body,
            headers=headers,
            content_type=str(extra.get("ct", JSON)),
            content_encoding=str(extra.get("ce", UTF8)),
            properties=properties,
            exchange=str(extra.get("x", "")),
            routing_key=routing_key,
            queue=queue,
        )
    except (ValueError, TypeError, KeyError, OverflowError, UnicodeDecodeError, binascii.Error) as exc:
        raise PoisonMessage(f"stored entry {task_id!r} cannot be decoded: {exc}") from exc


def _pack_uuid(value: Any) -> Any:
    """A canonical lowercase UUID string as ``~`` + 22 base64url characters (36 -> 23 bytes)."""
    if isinstance(value, str) and len(value) == 36 and _UUID.fullmatch(value):
        return _PACKED + base64.urlsafe_b64encode(bytes.fromhex(value.replace("-", ""))).decode("ascii")[:22]
    return value


_UNPACKED: dict[str, str] = {}  # packed -> uuid: a producer's reply_to is in each of its messages


def _unpack_uuid(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_PACKED):
        found = _UNPACKED.get(value)
        if found is not None:
            return found
        h = base64.urlsafe_b64decode(value[1:] + "==").hex()
        if len(h) != 32:
            raise ValueError("malformed packed uuid")
        found = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        if len(_UNPACKED) >= 4096:
            _UNPACKED.clear()
        _UNPACKED[value] = found
        return found
    return value

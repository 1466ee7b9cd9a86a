"""The stored encoding of format versions 2 and 3 (layout 2), as the code before format 4 wrote
it: kept to write entries the way older stores hold them, so tests can check they are still read.
A verbatim copy of that version's module (its ``StoredMessage`` is field for field the same)."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from celery_zset_scheduler.errors import PoisonMessage
from celery_zset_scheduler.model.times import isoformat_us, us_isoformat

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
# The positional slots of the meta array: headers, then properties, then the routing key.
_HEADER_SLOTS = ("task", "argsrepr", "kwargsrepr", "origin")
_PROPERTY_SLOTS = ("reply_to", "delivery_mode")
_SLOTS = len(_HEADER_SLOTS) + len(_PROPERTY_SLOTS) + 1
#: Kombu's JSON of the protocol-2 embed part with nothing in it; most bodies end with it.
EMBED_SUFFIX = b', {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'

# reply_to (Celery: the client's uuid, in every message) is stored packed; other values never start
# with the marker in the slot (such a value is kept in the extras instead).
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PACKED = "~"

_dumps: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON. A lone surrogate (Celery's argsrepr keeps one from an argument) has no
    UTF-8 form: it is written as a ``\\udXXX`` escape, as Kombu's JSON writes it, which reads back
    as the same string; character by character, so a :class:`Template` gives the same bytes."""
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
    meta: list[Any] = [headers.pop(k, None) for k in _HEADER_SLOTS]
    reply_to = properties.pop("reply_to", None)
    if isinstance(reply_to, str) and reply_to.startswith(_PACKED):  # would read as packed: keep aside
        properties["reply_to"] = reply_to
        extra["a"] = [*extra.get("a", ()), "reply_to"]
        reply_to = None
    meta += [_pack_uuid(reply_to), properties.pop("delivery_mode", None)]
    meta.append(message.routing_key)
    if headers:
        extra["h"] = headers
    if properties:
        extra["p"] = properties
    body = message.body
    if body.endswith(EMBED_SUFFIX):
        body = body[: -len(EMBED_SUFFIX)]
    else:
        extra["ne"] = 1
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
    return _json_bytes(meta) + b"\n" + body


def decode(task_id: str, raw: bytes) -> StoredMessage:
    """Rebuild a message; anything malformed raises :class:`PoisonMessage`."""
    try:
        end = raw.index(b"\n")
        meta = json.loads(raw[:end])
        if not isinstance(meta, list) or len(meta) < _SLOTS:
            raise ValueError("not an encoded message")
        rest = meta[_SLOTS:]
        eta_us = rest.pop(0) if rest and type(rest[0]) is int else None
        if len(rest) > 1:
            raise ValueError("not an encoded message")
        extra = rest[0] if rest else {}
        if not isinstance(extra, dict):
            raise ValueError("malformed extras")
        absent = set(extra.get("a", ()))
        headers: dict[str, Any] = dict(extra.get("h", {}))
        for key, value in zip(_HEADER_SLOTS, meta, strict=False):
            if key not in absent:
                headers[key] = value
        missing = extra.get("m", ())
        for key, default in _HEADER_DEFAULTS.items():
            if key not in headers and key not in missing:
                # A fresh copy of the list/dict defaults (flat: a shallow copy is enough).
                headers[key] = default.copy() if isinstance(default, (list, dict)) else default
        if eta_us is not None:
            headers["eta"] = us_isoformat(eta_us)
        if "i" not in extra:
            headers["id"] = task_id
        if "r" not in extra:
            headers["root_id"] = task_id
        properties: dict[str, Any] = dict(extra.get("p", {}))
        for key, value in zip(_PROPERTY_SLOTS, meta[len(_HEADER_SLOTS):], strict=False):
            if key not in absent:
                properties[key] = _unpack_uuid(value) if key == "reply_to" else value
        if "c" not in extra:
            properties["correlation_id"] = task_id
        body = raw[end + 1:]
        if not extra.get("ne"):
            body += EMBED_SUFFIX
        routing_key = str(meta[_SLOTS - 1])
        queue = None if extra.get("nq") else str(extra.get("q", routing_key))
        if not isinstance(headers.get("task"), str):
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


class Template:
    """Encodes many messages that differ from one template only in id, argsrepr, kwargsrepr, body
    and ``eta``.

    Bulk scheduling calls :meth:`encode` once per task. The constant parts are cut out of the
    real :func:`encode` of the template (with marker values where the per-task ones go), so the
    result is byte for byte what :func:`encode` gives for the full message, at a fraction of the cost.
    The template's ``id``, ``root_id`` (when it is the task's own) and ``correlation_id`` must be
    its task id; each encoded task gets its own id the same way (that is how they are left out).
    A template with an ``eta`` takes each task's as epoch microseconds (written as UTC).
    """

    _ARGS, _KWARGS = "\x00zset-argsrepr\x00", "\x00zset-kwargsrepr\x00"
    _ETA_US = 9_999_999_999_999_999  # a marker no real eta has (the year 2286)

    def __init__(self, message: StoredMessage) -> None:
        headers = message.headers
        if "argsrepr" not in headers or "kwargsrepr" not in headers:
            raise ValueError("the template has no argsrepr/kwargsrepr headers")
        if headers.get("id") != message.task_id or message.properties.get("correlation_id") != message.task_id:
            raise ValueError("the template's id and correlation_id must be its task id")
        self.has_eta = headers.get("eta") is not None
        marks: dict[str, Any] = {"argsrepr": self._ARGS, "kwargsrepr": self._KWARGS}
        if self.has_eta:
            marks["eta"] = us_isoformat(self._ETA_US)
        marked = replace(message, headers={**headers, **marks}, body=b"\x00" + EMBED_SUFFIX)
        raw = encode(marked)
        meta, _ = raw.split(b"\n", 1)
        args_at = meta.index(_quoted(self._ARGS))
        kwargs_at = meta.index(_quoted(self._KWARGS))
        if not args_at < kwargs_at:
            raise ValueError("unexpected template layout")
        self._head = meta[:args_at]
        self._middle = meta[args_at + len(_quoted(self._ARGS)):kwargs_at]
        rest = meta[kwargs_at + len(_quoted(self._KWARGS)):] + b"\n"
        self._tail, self._after_eta = rest, b""
        if self.has_eta:
            mark = b",%d" % self._ETA_US
            if rest.count(mark) != 1:
                raise ValueError("unexpected template layout")
            at = rest.index(mark) + 1
            self._tail, self._after_eta = rest[:at], rest[at + len(mark) - 1:]

    def encode(self, argsrepr: str, kwargsrepr: str, stripped_body: bytes, eta_us: int | None = None) -> bytes:
        """The encoding of the template with these values, for a body that ends with
        :data:`EMBED_SUFFIX`, given without it (the caller never builds the suffix at all)."""
        parts = [self._head, _quoted(argsrepr), self._middle, _quoted(kwargsrepr), self._tail]
        if self.has_eta:
            if eta_us is None:
                raise ValueError("this template needs each task's eta")
            parts += (b"%d" % eta_us, self._after_eta)
        parts.append(stripped_body)
        return b"".join(parts)


def _pack_uuid(value: Any) -> Any:
    """A canonical lowercase UUID string as ``~`` + 22 base64url characters (36 -> 23 bytes)."""
    if isinstance(value, str) and len(value) == 36 and _UUID.fullmatch(value):
        return _PACKED + base64.urlsafe_b64encode(bytes.fromhex(value.replace("-", ""))).decode("ascii")[:22]
    return value


def _unpack_uuid(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_PACKED):
        h = base64.urlsafe_b64decode(value[1:] + "==").hex()
        if len(h) != 32:
            raise ValueError("malformed packed uuid")
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return value


def _quoted(text: str) -> bytes:
    return _json_bytes(text)


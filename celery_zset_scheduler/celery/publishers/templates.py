"""Kombu's Redis envelope of a stored message, from a template of its task, queue and routing.

Kombu's ``prepare_message``, ``_inplace_augment_message`` and its JSON encoder build every envelope
of the same task, queue, routing, properties and header keys the same way, except for a few values
per message: the ids, argsrepr/kwargsrepr, the moved ``eta``, ``expires`` and its TTL, the body
(base64) and the delivery tag. A :class:`Template` is Kombu's own envelope of one such message with
marker values in those places, cut at the markers; an envelope is then the template's text with
each message's values, JSON-encoded by the same encoder, in between: byte for byte what Kombu's
path (:mod:`.redis_queue`) gives, for a fraction of its cost.

A template is used only for a message whose every other value is the template's, compared with
its JSON type (``True`` is not ``1``, ``1.0`` is not ``1``): a message that differs anywhere else
gets a template of its own, and anything a template cannot reproduce takes Kombu's path.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kombu.utils.json import JSONEncoder

from ...model.codec import StoredMessage
from ...model.headers import ZSET_ETA
from ..core.messages import publishable
from .envelope import kombu_expiration, values_of

#: Header values that differ from message to message of one template (the ``eta`` only when it is
#: moved to ``zset_eta``: then the published ``eta`` is always None).
VARYING_HEADERS = frozenset({"id", "root_id", "parent_id", "group", "group_index", "retries", "argsrepr",
                             "kwargsrepr", "expires"})
VARYING_PROPERTIES = frozenset({"correlation_id", "expiration"})
LIMIT = 1024  # shapes kept (distinct task/queue/routing/header sets): cleared when full
PER_SHAPE = 4  # templates kept per shape (messages of one shape whose other values differ), latest first

#: What a slot holds: a header's value, a property's, the body (base64), the delivery tag, the TTL,
#: or the stored ``eta`` (written as ``zset_eta``).
HEADER, PROPERTY, BODY, TAG, EXPIRATION, MOVED_ETA = range(6)
Slot = tuple[int, str]
#: Kombu's ``dumps`` with the encoder made once: the same text.
ENVELOPE_JSON: Callable[[Any], str] = JSONEncoder().encode
#: The encoder of strings Kombu's JSON uses (``ensure_ascii``): the same text, without the call.
_QUOTE: Callable[[str], str] = json.encoder.encode_basestring_ascii
#: JSON types that ``==`` plus a type check compares exactly.
_SCALARS = (str, int, bool, type(None))

#: Builds Kombu's message for ``m`` with the given headers, properties and expiration text:
#: ``(message dict, priority level, exchange)``.
Envelope = Callable[[StoredMessage, dict[str, Any], dict[str, Any], "str | None"], tuple[dict[str, Any], int, str]]


def shape(m: StoredMessage, moved_eta: bool, expiring: bool) -> tuple[Any, ...]:
    """What a template is chosen by: never shared between tasks, queues, routings or header sets."""
    return (m.headers.get("task"), m.queue, m.exchange, m.routing_key, m.content_type, m.content_encoding,
            tuple(m.headers), tuple(m.properties), moved_eta, expiring)


@dataclass(frozen=True)
class Template:
    slots: tuple[Slot, ...]  # what goes between parts[n] and parts[n + 1]
    level: int  # the priority level (Kombu's sub-queue)
    exchange: str  # the exchange Kombu publishes to
    constants: tuple[Any, ...]  # the other header, then property, values
    types: tuple[type, ...]  # their types
    flat: tuple[tuple[int, tuple[Any, ...] | None, tuple[type, ...]], ...]  # lists/dicts of scalars
    deep: tuple[int, ...]  # the other values (compared by same_json)
    get_constants: Callable[[StoredMessage], tuple[Any, ...]]
    text: str  # the envelope as a format string: "{n}" for the slots, the rest with braces doubled
    get_varying: Callable[[StoredMessage], tuple[Any, ...]]  # the header and property values of the slots
    expiring: bool

    def fits(self, m: StoredMessage) -> bool:
        """Whether every constant value of ``m`` is this template's, JSON type included."""
        values = self.get_constants(m)
        if values != self.constants or tuple(map(type, values)) != self.types:
            return False
        for n, keys, inner in self.flat:  # a list or dict of scalars: its keys' order, its values' types
            value = values[n]
            if keys is not None and tuple(value) != keys:
                return False
            if tuple(map(type, value.values() if keys is not None else value)) != inner:
                return False
        return all(same_json(values[n], self.constants[n]) for n in self.deep)

    def render(self, m: StoredMessage, tag: str, expiration: float | None) -> bytes:
        """The envelope of ``m`` (``tag``: its delivery tag as JSON, ``expiration``: its TTL)."""
        values = [_QUOTE(v) if type(v) is str else "null" if v is None else str(v) if type(v) is int
                  else ENVELOPE_JSON(v) for v in self.get_varying(m)]
        values.append(f'"{base64.b64encode(m.body).decode("ascii")}"')
        values.append(tag)
        if self.expiring:
            if expiration is None:
                raise ValueError("this template needs the message's TTL")
            values.append(_QUOTE(kombu_expiration(expiration)))
        return self.text.format(*values).encode("ascii")


def same_json(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are written as the same JSON (types compared, as the text would)."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind in _SCALARS:
        return bool(a == b)
    if kind is float:
        return repr(a) == repr(b)
    if kind is list or kind is tuple:
        return len(a) == len(b) and all(map(same_json, a, b))
    if kind is dict:
        return len(a) == len(b) and all(
            type(ka) is type(kb) and ka == kb and same_json(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True))
    return False


def make(m: StoredMessage, moved_eta: bool, expiring: bool, envelope: Envelope) -> Template | None:
    """The template of ``m``'s shape, cut out of Kombu's own envelope of ``m`` with markers in the
    varying places (``envelope``: the Kombu path, given the headers, properties and expiration
    text to publish, as :func:`.envelope.outgoing` makes them). None when it cannot be cut exactly."""
    headers = dict(m.headers)
    properties = publishable(m.properties)
    marks: dict[Slot, str] = {}

    def mark(slot: Slot) -> str:
        marks[slot] = f"\x00zset-slot-{slot[0]}-{slot[1]}\x00"
        return marks[slot]

    for key in headers:  # in place: the published headers keep the stored order (as outgoing)
        if key in VARYING_HEADERS:
            headers[key] = mark((HEADER, key))
        elif moved_eta and key == ZSET_ETA:
            headers[key] = mark((MOVED_ETA, ""))
    if moved_eta:
        headers["eta"] = None
        if ZSET_ETA not in headers:
            headers[ZSET_ETA] = mark((MOVED_ETA, ""))
    if "correlation_id" in properties:
        properties["correlation_id"] = mark((PROPERTY, "correlation_id"))
    properties.pop("expiration", None)
    expiration = mark((EXPIRATION, "")) if expiring else None
    message, level, exchange = envelope(m, headers, properties, expiration)
    message["body"] = mark((BODY, ""))
    message["properties"]["delivery_tag"] = mark((TAG, ""))
    full = ENVELOPE_JSON(message)
    quoted = {slot: _QUOTE(text) for slot, text in marks.items()}
    if any(full.count(q) != 1 for q in quoted.values()):
        return None  # a constant value holds a marker's text: Kombu's path for this shape
    ordered = sorted(quoted, key=lambda s: full.index(quoted[s]))
    # The format's arguments: the header and property values, then the body, tag and TTL.
    fed = [s for s in ordered if s[0] in (HEADER, MOVED_ETA, PROPERTY)]
    fed += [s for s in ((BODY, ""), (TAG, ""), (EXPIRATION, "")) if s in quoted]
    parts: list[str] = []
    at = 0
    for slot in ordered:
        found = full.index(quoted[slot])
        parts.append(full[at:found].replace("{", "{{").replace("}", "}}") + f"{{{fed.index(slot)}}}")
        at = found + len(quoted[slot])
    parts.append(full[at:].replace("{", "{{").replace("}", "}}"))
    text = "".join(parts)
    if not text.isascii():
        return None
    header_keys = tuple("eta" if k == MOVED_ETA else key for k, key in fed if k in (HEADER, MOVED_ETA))
    property_keys = tuple(key for k, key in fed if k == PROPERTY)
    constant_h = tuple(k for k in m.headers if k not in VARYING_HEADERS and not (moved_eta and k in ("eta", ZSET_ETA)))
    constant_p = tuple(k for k in m.properties if k not in VARYING_PROPERTIES)
    constants = tuple(m.headers[k] for k in constant_h) + tuple(m.properties[k] for k in constant_p)
    flat: list[tuple[int, tuple[Any, ...] | None, tuple[type, ...]]] = []
    deep: list[int] = []
    for n, value in enumerate(constants):
        kind = type(value)
        if kind in _SCALARS:
            continue  # == and the type say it all
        inner = list(value.values()) if kind is dict else value if kind in (list, tuple) else None
        if inner is not None and all(type(v) in _SCALARS for v in inner):
            flat.append((n, tuple(value) if kind is dict else None, tuple(map(type, inner))))
        else:
            deep.append(n)  # floats (0.0 == -0.0), nested containers, anything else
    return Template(tuple(ordered), level, exchange, constants, tuple(map(type, constants)), tuple(flat),
                    tuple(deep), _both(values_of(constant_h), values_of(constant_p)), text,
                    _both(values_of(header_keys), values_of(property_keys)), expiring)


def _both(headers: Callable[[dict[str, Any]], tuple[Any, ...]] | None,
          properties: Callable[[dict[str, Any]], tuple[Any, ...]] | None) -> Callable[[StoredMessage], Any]:
    """The values of some headers, then of some properties, of a message."""
    if properties is None:
        return (lambda m: ()) if headers is None else (lambda m: headers(m.headers))
    if headers is None:
        return lambda m: properties(m.properties)
    return lambda m: headers(m.headers) + properties(m.properties)


def delivery_tags(count: int) -> list[str]:
    """``count`` random version-4 UUIDs as JSON strings: Kombu's delivery tag (``str(uuid4())``)."""
    raw = os.urandom(16 * count)
    tags = []
    for n in range(0, 16 * count, 16):
        b = bytearray(raw[n:n + 16])
        b[6] = (b[6] & 0x0F) | 0x40
        b[8] = (b[8] & 0x3F) | 0x80
        h = b.hex()
        tags.append(f'"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"')
    return tags


class Templates:
    """The templates of one channel setup (a change of it starts afresh)."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._setup: Any = None
        self._by_shape: dict[tuple[Any, ...], list[Template] | None] = {}

    def follow(self, setup: Any) -> None:
        """``setup``: what an envelope depends on besides the message (the channel's body
        encoding and priorities, the producer's exchange): templates of another setup are dropped."""
        if setup != self._setup:
            self._setup = setup
            self._by_shape = {}

    def get(self, m: StoredMessage, moved_eta: bool, expiring: bool, envelope: Envelope) -> Template | None:
        """The template for ``m`` (made from it if none of its shape fits it); None when its shape
        cannot be templated."""
        key = shape(m, moved_eta, expiring)
        found = self._by_shape.get(key, ())
        if found is None:
            return None
        for template in found:
            if template.fits(m):
                return template
        try:
            made = make(m, moved_eta, expiring, envelope)
        except Exception:  # Kombu's path gives this message's error, if it has one
            return None
        if len(self._by_shape) >= self.limit:
            self._by_shape = {}
        self._by_shape[key] = None if made is None else [made, *found][:PER_SHAPE]
        return made

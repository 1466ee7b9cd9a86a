"""The AMQP properties of a stored message, and templates that encode them faster.

:func:`amqp_properties` is what Kombu's ``Producer.publish`` would give the stored message (its
``eta`` moved aside, its ``expiration`` computed now: :mod:`.envelope`); :class:`Templates`
encodes them as :class:`~.amqp_wire.PropertyEncoder` does (py-amqp's bytes), without building them.

A Celery message carries about twenty headers, and most of their values, like most of its other
properties, are the same in every message of one task to one queue (``lang``, ``task``,
``origin``, ``timelimit``, ``reply_to``, ``delivery_mode``...). Encoding them all again for each
message was the largest share of the dispatcher's CPU; a :class:`Template` holds them already
encoded, in their places, and encodes only the rest (``id``, ``root_id``, ``argsrepr``, the ``eta``,
the correlation id, the expiration...). A field table is a length-prefixed run of
``(key, type, value)`` entries, so the constant entries between two per-message ones are one
piece of bytes.

A template serves a message only when every value it holds encoded equals the message's, with the
same type (``0``, ``False`` and ``0.0`` are equal in Python but have AMQP types of their own). A
value that differs makes that header or property per-message for that shape of message from then
on (a header set on each call, messages of several tasks in one queue), so each shape rebuilds its
template at most once per header.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ...model.codec import StoredMessage
from ...model.headers import ZSET_ETA
from ..core.messages import publishable
from .amqp_wire import PropertyEncoder, _item, _key, check_expiration
from .envelope import expiration_of, kombu_expiration, outgoing, values_of

DELIVERY_MODES = {"transient": 1, "persistent": 2}

# Per message in a Celery message (its own id, arguments, times and place in a workflow);
# any other value is held in the template until a message differs.
_PER_MESSAGE_HEADERS = frozenset({
    "id", "root_id", "parent_id", "group", "group_index", "eta", "expires", "retries", "argsrepr",
    "kwargsrepr", ZSET_ETA,
})
_PER_MESSAGE_PROPERTIES = frozenset({"correlation_id", "priority", "message_id", "timestamp"})
# Properties taken from the message's attributes, or computed: never read from its properties.
_DERIVED = frozenset({"content_type", "content_encoding", "application_headers", "expiration"})
# The Basic class's properties in wire order, with their AMQP types (amqp.basic_message.Message).
_PROPERTIES = (
    ("content_type", "s"), ("content_encoding", "s"), ("application_headers", "F"), ("delivery_mode", "o"),
    ("priority", "o"), ("correlation_id", "s"), ("reply_to", "s"), ("expiration", "s"), ("message_id", "s"),
    ("timestamp", "L"), ("type", "s"), ("user_id", "s"), ("app_id", "s"), ("cluster_id", "s"),
)
_SHAPES_MAX = 1024
_U32 = struct.Struct(">I").pack
_U16 = struct.Struct(">H").pack
_U8 = struct.Struct("B").pack
_U64 = struct.Struct(">Q").pack


def amqp_properties(m: StoredMessage, now: float | None = None) -> dict[str, Any]:
    """The AMQP properties Kombu's ``Producer.publish`` would give the stored message."""
    headers, properties, expiration = outgoing(m, now)
    mode = properties.get("delivery_mode")
    properties["delivery_mode"] = DELIVERY_MODES.get(mode, mode) if mode is not None else 2
    if expiration is not None:
        properties["expiration"] = kombu_expiration(expiration)
    check_expiration(properties.get("expiration"))
    properties["content_type"] = m.content_type
    properties["content_encoding"] = m.content_encoding
    properties["application_headers"] = headers
    return properties


def _constant(v: Any) -> bool:
    """Whether equal values of this kind always encode the same (floats: NaN equals nothing)."""
    t = type(v)
    if t is str or t is int or t is bool or v is None:
        return True
    if t is list or t is tuple:
        return all(x is None or type(x) is str for x in v)
    return t is dict and not v


def _getter(keys: list[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    return values_of(keys) or _no_values


def _no_values(d: dict[str, Any]) -> tuple[Any, ...]:
    return ()


def _value(v: Any) -> bytes:
    if type(v) is str:
        raw = v.encode("utf-8", "surrogatepass")
        return b"S" + _U32(len(raw)) + raw
    if v is None:
        return b"V"
    return _item(v)


def _property(kind: str, value: Any) -> bytes:
    """One property's bytes, exactly as :meth:`PropertyEncoder.encode` writes them."""
    if kind == "s":
        raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
        return _U8(len(raw)) + raw
    if kind == "o":
        return _U8(value)
    return _U64(value)


def _delivery_mode(mode: Any) -> Any:
    return DELIVERY_MODES.get(mode, mode) if mode is not None else 2


# The properties ``publishable`` keeps (the others are Kombu's publish arguments, never written).
_KEPT = frozenset(publishable({name: None for name, _ in _PROPERTIES}))


class Template:
    """The encoded properties of one shape of message, with slots for the per-message values."""

    def __init__(self, m: StoredMessage, headers_varying: frozenset[str], properties_varying: frozenset[str],
                 now: float | None = None) -> None:
        built = amqp_properties(m, now)  # raises as the plain path would for a message it cannot encode
        h, p = m.headers, m.properties
        moved = bool(h.get("eta"))
        # The field table: constant entries as bytes, a slot (the header read) for each other.
        self.h_keys: list[str] = []
        self.segments: list[bytes] = []
        self.slots: list[str] = []
        run: list[bytes] = []
        for k, v in built["application_headers"].items():
            if moved and k == "eta":  # moved to zset_eta: always null here
                run.append(_key(k) + b"V")
                continue
            source = "eta" if moved and k == ZSET_ETA else k
            if source != k or k in headers_varying or not _constant(v):
                run.append(_key(k))
                self.segments.append(b"".join(run))
                self.slots.append(source)
                run = []
            else:
                run.append(_key(k) + _item(v))
                self.h_keys.append(k)
        self.tail = b"".join(run)
        self._h_get = _getter(self.h_keys)
        self.h_values = self._h_get(h)
        self.h_types = tuple(map(type, self.h_values))
        # The property list: constant runs as bytes, steps for the table and per-message values.
        self.p_keys = [k for k in p if k not in properties_varying and k not in _DERIVED]
        if not all(_constant(p[k]) for k in self.p_keys):
            raise _NoTemplate
        self._p_get = _getter(self.p_keys)
        self.p_values = self._p_get(p)
        self.p_types = tuple(map(type, self.p_values))
        # Per message: the table, the expiration (when the shape can have one) and the varying
        # properties the shape has; each after the constant bytes before it.
        self.flags = 0
        self.steps: list[tuple[bytes, str, str, int]] = []
        run = []
        for shift, (name, kind) in zip(range(15, 1, -1), _PROPERTIES, strict=True):
            bit = 1 << shift
            if name == "application_headers":
                step = "F"
            elif name == "expiration":
                step = "x" if "expires" in h or "expiration" in p else ""
            elif name in properties_varying and name in _KEPT:
                step = ("m" if name == "delivery_mode" else kind) if name in p else ""
            else:
                value = built.get(name)
                if value is not None:
                    self.flags |= bit
                    run.append(_property(kind, value))
                continue
            if step:
                self.steps.append((b"".join(run), step, name, bit))
                run = []
        self.end = b"".join(run)
        self._slot_get = _getter(self.slots)

    def matches(self, h: dict[str, Any], p: dict[str, Any]) -> bool:
        hv = self._h_get(h)
        pv = self._p_get(p)
        return (hv == self.h_values and pv == self.p_values and tuple(map(type, hv)) == self.h_types
                and tuple(map(type, pv)) == self.p_types)

    def differing(self, h: dict[str, Any], p: dict[str, Any]) -> tuple[set[str], set[str]]:
        """The headers and properties whose value (or its type) is not the template's."""
        hv, pv = self._h_get(h), self._p_get(p)
        return ({k for k, a, b in zip(self.h_keys, hv, self.h_values, strict=True) if a != b or type(a) is not type(b)},
                {k for k, a, b in zip(self.p_keys, pv, self.p_values, strict=True) if a != b or type(a) is not type(b)})

    def encode(self, m: StoredMessage, now: float | None = None) -> bytes:
        h, p = m.headers, m.properties
        parts: list[bytes] = []
        append = parts.append
        for segment, v in zip(self.segments, self._slot_get(h), strict=True):
            append(segment)
            if type(v) is str:
                raw = v.encode("utf-8", "surrogatepass")
                append(b"S" + _U32(len(raw)) + raw)
            elif v is None:
                append(b"V")
            else:
                append(_item(v))
        append(self.tail)
        data = b"".join(parts)
        flags = self.flags
        out = [b""]
        for before, step, name, bit in self.steps:
            out.append(before)
            if step == "F":
                flags |= bit
                out.append(_U32(len(data)))
                out.append(data)
                continue
            if step == "x":
                ttl = expiration_of(m, now)
                value: Any = None if ttl is None else kombu_expiration(ttl)
                check_expiration(value)
                step = "s"
            elif step == "m":
                value = _delivery_mode(p[name])
                step = "o"
            else:
                value = p[name]
            if value is not None:
                flags |= bit
                out.append(_property(step, value))
        out.append(self.end)
        out[0] = _U16(flags)
        return b"".join(out)


class _NoTemplate(Exception):
    """This shape of message is encoded the plain way (a property value of an unusual kind)."""


class _Shape:
    __slots__ = ("headers_varying", "plain", "properties_varying", "template")

    def __init__(self) -> None:
        self.plain = False  # encoded the plain way (see _NoTemplate)
        self.headers_varying = _PER_MESSAGE_HEADERS
        self.properties_varying = _PER_MESSAGE_PROPERTIES
        self.template: Template | None = None


class Templates:
    """The encoded properties of stored messages, as ``PropertyEncoder().encode(amqp_properties(m))``
    gives them; one :class:`Template` for each shape of message (its routing, content type and
    encoding, header and property names, whether it has an ``eta``)."""

    def __init__(self, plain: PropertyEncoder | None = None) -> None:
        self.plain = plain or PropertyEncoder()
        self._shapes: dict[tuple[Any, ...], _Shape] = {}
        self.built = 0  # templates built (each shape's first, and one more each time it learns)

    def encode(self, m: StoredMessage, now: float | None = None) -> bytes:
        """``now``: the time the expiration is computed at (the clock's, by default)."""
        h, p = m.headers, m.properties
        key = (m.exchange, m.routing_key, m.content_type, m.content_encoding, tuple(h), tuple(p), bool(h.get("eta")))
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= _SHAPES_MAX:
                self._shapes.clear()
            shape = self._shapes[key] = _Shape()
        if shape.plain:
            return self.plain.encode(amqp_properties(m, now))
        template = shape.template
        if template is None or not template.matches(h, p):
            if template is not None:
                headers, properties = template.differing(h, p)
                shape.headers_varying = shape.headers_varying | headers
                shape.properties_varying = shape.properties_varying | properties
            try:
                template = shape.template = Template(m, shape.headers_varying, shape.properties_varying, now)
            except _NoTemplate:
                shape.plain = True
                return self.plain.encode(amqp_properties(m, now))
            self.built += 1
        return template.encode(m, now)

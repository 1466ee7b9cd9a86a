"""Celery's task messages in the store's form (:class:`~..model.codec.StoredMessage`), both ways in.

- :func:`build`: what the sender stores for ``send_task_message``'s arguments: routed exactly as
  ``celery.app.amqp`` routes, serialized and compressed with the task's settings, with the
  message properties Kombu's ``Producer.publish`` would write (its own arguments, such as
  ``mandatory``/``immediate``/``timeout``, are not properties). The ``eta`` header stays as Celery
  wrote it (the dispatcher moves it aside when it publishes, see :mod:`..publishers.envelope`); the
  ``expiration`` TTL Celery derives from ``expires`` is dropped: it is computed again at dispatch.
- :func:`received`: a message as a worker received it (for a dead letter: the body byte for byte),
  so a requeue schedules the same message again.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any

from kombu.common import Broadcast
from kombu.compression import compress
from kombu.compression import decompress as kombu_decompress
from kombu.entity import Exchange
from kombu.exceptions import EncodeError
from kombu.messaging import Producer
from kombu.serialization import dumps, loads, registry

from ...errors import NotSerializable
from ...model.codec import StoredMessage
from ...model.headers import TRANSPORT_PROPERTIES
from ...settings import Settings

# Producer.publish's own arguments are not message properties, except those it writes into the
# message itself. Celery passes task options such as mandatory=None/immediate=None among the
# properties and relies on publish() taking them as arguments.
_WRITTEN_BY_PUBLISH = frozenset({"delivery_mode", "priority", "expiration"})
PUBLISH_ARGUMENTS = frozenset(inspect.signature(Producer.publish).parameters) - {"self", "body", "properties"}


class TaskNotSerializable(NotSerializable, EncodeError):
    """Raised at the ``apply_async`` call site; also a Kombu ``EncodeError`` as Celery raises."""


@dataclass(frozen=True)
class Built:
    """A stored message and the routing values Celery's publish signals and events report."""

    message: StoredMessage
    exchange: Any
    routing_key: str | None
    queue_name: str | None
    declare: Any
    retry_policy: dict[str, Any]


def build(
    app: Any, settings: Settings, name: str, message: Any, *,
    exchange: Any = None, routing_key: str | None = None, queue: Any = None,
    serializer: str | None = None, delivery_mode: int | None = None, compression: str | None = None,
    declare: Any = None, headers: dict[str, Any] | None = None, exchange_type: str | None = None,
    retry_policy: dict[str, Any] | None = None, properties: dict[str, Any] | None = None,
    before_serialize: Any = None,
) -> Built:
    """Route and serialize one ``send_task_message`` call's message; mirrors Celery's sender.

    ``before_serialize(built_routing)`` runs once routing is known and before the body is
    serialized (the sender fires ``before_task_publish`` there, as Celery does).
    """
    headers2, properties2, body, _ = message
    if headers:
        headers2.update(headers)
    if properties:
        properties2.update(properties)
    amqp, conf = app.amqp, app.conf

    # Routing, exactly as celery.app.amqp resolves it.
    qname = queue
    if queue is None and exchange is None:
        queue = amqp.default_queue
    if queue is not None:
        if isinstance(queue, str):
            qname, queue = queue, amqp.queues[queue]
        else:
            qname = queue.name
    if delivery_mode is None:
        delivery_mode = getattr(getattr(queue, "exchange", None), "delivery_mode", None)
        delivery_mode = delivery_mode or conf.task_default_delivery_mode
    if exchange_type is None:
        exchange_type = getattr(getattr(queue, "exchange", None), "type", None) or "direct"
    if (not exchange or not routing_key) and exchange_type == "direct":
        exchange, routing_key = "", qname
    elif exchange is None:
        exchange = queue.exchange.name or amqp.default_exchange
        routing_key = routing_key or queue.routing_key or conf.task_default_routing_key
    declared = qname if queue is not None and not isinstance(queue, Broadcast) else None
    exchange_name = exchange.name if isinstance(exchange, Exchange) else str(exchange or "")
    if declare is None and declared is not None:
        declare = [queue]
    policy = dict(conf.task_publish_retry_policy, **(retry_policy or {}))
    if before_serialize is not None:
        before_serialize(exchange, routing_key, declare, headers2, properties2, policy)

    serializer = serializer or conf.task_serializer
    content_type, content_encoding, data = _serialize(settings, name, headers2, body, serializer)
    compression = compression or conf.task_compression
    if compression:
        data, headers2["compression"] = compress(data, compression)
    stored_properties = message_properties(properties2, headers2)
    stored_properties["delivery_mode"] = delivery_mode
    stored = StoredMessage(
        task_id=headers2["id"],
        body=data,
        headers=headers2,
        content_type=content_type,
        content_encoding=content_encoding,
        properties=stored_properties,
        exchange=exchange_name,
        routing_key=str(routing_key or ""),
        queue=declared,
    )
    return Built(stored, exchange, routing_key, qname, declare, policy)


def message_properties(properties: dict[str, Any], headers: dict[str, Any]) -> dict[str, Any]:
    """What of ``properties`` goes into the message: not Kombu's publish arguments, and not the
    ``expiration`` Celery computed from ``expires`` at send time (the dispatcher computes it
    again from ``expires`` when it publishes). An ``expiration`` given without ``expires`` is a
    TTL from the moment the message reaches its queue, so it is kept as it is."""
    out = publishable(properties)
    if headers.get("expires") is not None:
        out.pop("expiration", None)
    return out


def publishable(properties: dict[str, Any]) -> dict[str, Any]:
    """``properties`` without Kombu's publish arguments that are not written into the message."""
    return {k: v for k, v in properties.items() if k not in PUBLISH_ARGUMENTS or k in _WRITTEN_BY_PUBLISH}


def _serialize(settings: Settings, name: str, headers: dict[str, Any], body: Any,
               serializer: str) -> tuple[str, str, bytes]:
    allowed = {registry.name_to_type.get(n, n) for n in settings.accept_content}
    content_type = registry.name_to_type.get(serializer, serializer)
    if content_type not in allowed:
        raise TaskNotSerializable(
            f"task {name!r} uses the {serializer!r} serializer, which the store does not accept: "
            f"only {', '.join(sorted(settings.accept_content))} (add it to "
            "zset_scheduler_accept_content to opt in)"
        )
    try:
        content_type, content_encoding, data = dumps(body, serializer=serializer)
    except (EncodeError, TypeError, ValueError) as exc:
        raise TaskNotSerializable(
            f"task {name!r} (id {headers.get('id')}) cannot be stored: its arguments are not "
            f"{serializer}-serializable ({exc}); pass plain values (str, int, float, bool, None, "
            "list, dict) or ids instead of objects"
        ) from exc
    if isinstance(data, str):
        data = data.encode(content_encoding or "utf-8")
    return content_type, content_encoding, data


def received(message: Any, task_id: str | None = None) -> StoredMessage:
    """A Kombu message as a worker received it, in the store's form (the body byte for byte)."""
    delivery = message.delivery_info or {}
    headers = dict(message.headers or {})
    body = message.body
    return StoredMessage(
        task_id=str(task_id or headers.get("id") or ""),
        body=body.encode() if isinstance(body, str) else bytes(body),
        headers=headers,
        content_type=message.content_type or "application/json",
        content_encoding=message.content_encoding or "utf-8",
        properties={k: v for k, v in (message.properties or {}).items() if k not in TRANSPORT_PROPERTIES},
        exchange=str(delivery.get("exchange") or ""),
        routing_key=str(delivery.get("routing_key") or ""),
        queue=None,
    )


def decompress(body: bytes, compression: str) -> bytes:
    """Kombu's decompression, for the views of stored and dead-lettered messages."""
    result: bytes = kombu_decompress(body, compression)
    return result


class MessageCheck:
    """Why a worker would discard a message without running it (None: it would run it).

    The dispatcher calls it before the hand-off, so that an entry written into the store by another
    program (a pickle message, a broken body) is dead-lettered with the reason instead of being
    "ignored and discarded" by the worker, neither run nor kept.
    """

    def __init__(self, accept: tuple[str, ...]) -> None:
        self.accept = accept
        self.allowed = {registry.name_to_type.get(n, n) for n in accept}

    def __call__(self, message: StoredMessage) -> str | None:
        if message.content_type not in self.allowed:
            return (f"content type {message.content_type!r} is not in zset_scheduler_accept_content "
                    f"({', '.join(sorted(self.accept))}): a worker would discard it")
        headers = message.headers
        malformed = _malformed_header(headers, message.task_id)
        if malformed:
            return malformed
        body = message.body
        try:
            if headers.get("compression"):
                body = decompress(body, headers["compression"])
            if _plain_json(message, body):
                # What Kombu's loads does for such a body, without its per-call wrapping.
                data = json.loads(body.decode("utf-8"))
            else:
                data = loads(body, message.content_type, message.content_encoding, accept=self.allowed)
        except Exception as exc:  # any codec error means the worker cannot decode it either
            return f"the body does not decode as {message.content_type}: {type(exc).__name__}: {exc}"
        if isinstance(data, (list, tuple)):
            if len(data) != 3 or not isinstance(data[0], (list, tuple)) or not isinstance(data[1], dict):
                return "the body is not Celery's [args, kwargs, embed]"
        elif not isinstance(data, dict):  # protocol 1 bodies are a mapping
            return "the body is not a Celery task message"
        return None


def _plain_json(message: StoredMessage, body: bytes) -> bool:
    """A UTF-8 JSON body without Kombu's typed values (``__type__`` objects), which Kombu's JSON
    ``loads`` reads exactly as ``json.loads`` does."""
    return (message.content_type == "application/json" and message.content_encoding == "utf-8"
            and isinstance(body, bytes) and b"__type__" not in body)


_TEXT_OR_NONE = (str, type(None))


def _malformed_header(headers: dict[str, Any], task_id: str) -> str | None:
    get = headers.get
    retries, limits = get("retries", 0), get("timelimit")
    # The common message at once (exact types: what decode gives); anything else is looked at below.
    if (type(get("task")) is str and get("task") and type(get("id", task_id)) is str and type(retries) is int
            and retries >= 0 and type(get("eta")) in _TEXT_OR_NONE and type(get("expires")) in _TEXT_OR_NONE
            and type(limits) is list and len(limits) == 2):
        return None
    if not isinstance(headers.get("task"), str) or not headers["task"]:
        return "the task header is missing or not a task name"
    if not isinstance(headers.get("id", task_id), str):
        return "the id header is not a string"
    retries = headers.get("retries", 0)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        return f"the retries header is malformed: {retries!r}"
    for name in ("eta", "expires"):
        if not isinstance(headers.get(name), (str, type(None))):
            return f"the {name} header is malformed: {headers[name]!r}"
    limits = headers.get("timelimit", [None, None])
    if not (isinstance(limits, (list, tuple)) and len(limits) == 2):
        return f"the timelimit header is malformed: {limits!r}"
    return None

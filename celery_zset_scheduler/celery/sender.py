"""The store path of ``send_task_message``: a timed task is serialized and stored, not published.

Celery's ``send_task_message`` (``celery.app.amqp``) is wrapped per app. A message whose ``eta``
is at least ``zset_scheduler_min_countdown`` away is routed exactly as Celery would route it,
serialized with the task's serializer and compression, and stored with its due time. Everything
else goes to the original sender untouched. ``before_task_publish``/``after_task_publish`` fire as
they do for a published task, so stamping and tracing hooks see the same message.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import redis
from celery import signals
from celery.utils.time import maybe_make_aware
from kombu.common import Broadcast
from kombu.compression import compress
from kombu.entity import Exchange
from kombu.exceptions import EncodeError
from kombu.serialization import dumps, registry

from ..codec import StoredMessage, encode
from ..connection import describe
from ..errors import NotSerializable, StoreUnavailable
from ..store import ScheduleResult
from .installation import Installation, installation_for

# Options a caller may pass to apply_async for the store; never sent as message properties.
IDEMPOTENCY_KEY = "idempotency_key"
# The message header that carries a task's idempotency key to the worker.
KEY_HEADER = "zset_idempotency_key"
REPLACE = "zset_replace"
# Message properties that make no sense after waiting in the store (a TTL relative to send time).
_DROPPED_PROPERTIES = ("expiration",)

# When set, store_message hands the message it built to this list instead of storing it
# (bulk scheduling builds one message the normal way and uses it as a template).
capture: contextvars.ContextVar[list[StoredMessage] | None] = contextvars.ContextVar("zset_capture", default=None)

# The outcome of the last store call in this context, for callers that want the existing handle.
last_schedule: contextvars.ContextVar[ScheduleResult | None] = contextvars.ContextVar(
    "zset_last_schedule", default=None
)


class TaskNotSerializable(NotSerializable, EncodeError):
    """Raised at the ``apply_async`` call site; also a Kombu ``EncodeError`` as Celery raises."""


def wrap_sender(app: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """The app's ``send_task_message`` with the store path in front of it."""

    def send_task_message(producer: Any, name: str, message: Any, **options: Any) -> Any:
        inst = installation_for(app)
        headers = message[0]
        eta = headers.get("eta") if isinstance(headers, dict) and "task" in headers else None
        if inst is None or not eta:
            options.pop(IDEMPOTENCY_KEY, None)
            options.pop(REPLACE, None)
            return original(producer, name, message, **options)
        due_ms = eta_to_ms(app, eta)
        # Retries always wait in the store; only first sends honour min_countdown.
        is_retry = bool(headers.get("retries"))
        if not is_retry and due_ms - time.time() * 1000 < inst.settings.min_countdown * 1000:
            options.pop(IDEMPOTENCY_KEY, None)
            options.pop(REPLACE, None)
            return original(producer, name, message, **options)
        return store_message(app, inst, name, message, due_ms, **options)

    send_task_message.__wrapped__ = original  # type: ignore[attr-defined]
    return send_task_message


def eta_to_ms(app: Any, eta: str | datetime) -> int:
    """Epoch milliseconds of an ETA header; naive times are read as the worker reads them."""
    when = datetime.fromisoformat(eta) if isinstance(eta, str) else eta
    aware: datetime = maybe_make_aware(when, app.conf.timezone)
    # Rounded up: a claim takes scores <= Redis time in whole ms, so a task never runs early.
    return math.ceil(aware.timestamp() * 1000)


def store_message(
    app: Any, inst: Installation, name: str, message: Any, due_ms: int, *,
    exchange: Any = None, routing_key: str | None = None, queue: Any = None,
    event_dispatcher: Any = None, retry: bool | None = None, retry_policy: dict[str, Any] | None = None,
    serializer: str | None = None, delivery_mode: int | None = None, compression: str | None = None,
    declare: Any = None, headers: dict[str, Any] | None = None, exchange_type: str | None = None,
    timeout: Any = None, confirm_timeout: Any = None, **kwargs: Any,
) -> ScheduleResult:
    """Route, serialize and store one task message; mirrors Celery's send_task_message."""
    headers2, properties, body, sent_event = message
    idempotency_key = kwargs.pop(IDEMPOTENCY_KEY, None)
    replace = bool(kwargs.pop(REPLACE, False))
    if headers:
        headers2.update(headers)
    if kwargs:
        properties.update(kwargs)
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
    retry_policy = dict(conf.task_publish_retry_policy, **(retry_policy or {}))

    signals.before_task_publish.send(
        sender=name, body=body, exchange=exchange, routing_key=routing_key, declare=declare,
        headers=headers2, properties=properties, retry_policy=retry_policy,
    )
    content_type, content_encoding, data = _serialize(inst, name, headers2, body, serializer or conf.task_serializer)
    compression = compression or conf.task_compression
    if compression:
        data, headers2["compression"] = compress(data, compression)
    stored_properties = {k: v for k, v in properties.items() if k not in _DROPPED_PROPERTIES}
    stored_properties["delivery_mode"] = delivery_mode
    stored = StoredMessage(
        task_id=headers2["id"],
        body=data,
        headers={**headers2, "eta": None},
        content_type=content_type,
        content_encoding=content_encoding,
        properties=stored_properties,
        exchange=exchange_name,
        routing_key=str(routing_key or ""),
        queue=declared,
    )
    captured = capture.get()
    if captured is not None:
        captured.append(stored)
        return ScheduleResult("scheduled", stored.task_id)
    try:
        result = inst.store.schedule(
            stored.task_id, due_ms, encode(stored), idempotency_key=idempotency_key, replace=replace
        )
    except redis.RedisError as exc:
        # Named as ours: inside send_task, Kombu would re-raise a Redis error as a broker error.
        raise StoreUnavailable(
            f"cannot store task {name!r} in the zset store at {describe(str(inst.settings.url))}: {exc}"
        ) from exc
    last_schedule.set(result)
    if not result.created:  # already pending (same id or key): nothing was sent
        return result
    signals.after_task_publish.send(
        sender=name, body=body, headers=headers2, exchange=exchange, routing_key=routing_key,
    )
    if sent_event:
        evd = event_dispatcher or amqp._event_dispatcher
        sent_event.update({"queue": qname, "exchange": exchange_name, "routing_key": routing_key})
        with app.producer_or_acquire() as producer:
            evd.publish("task-sent", sent_event, producer, retry=retry, retry_policy=retry_policy)
    return result


def _serialize(inst: Installation, name: str, headers: dict[str, Any], body: Any,
               serializer: str) -> tuple[str, str, bytes]:
    allowed = {registry.name_to_type.get(n, n) for n in inst.settings.accept_content}
    content_type = registry.name_to_type.get(serializer, serializer)
    if content_type not in allowed:
        raise TaskNotSerializable(
            f"task {name!r} uses the {serializer!r} serializer, which the store does not accept: "
            f"only {', '.join(sorted(inst.settings.accept_content))} (add it to "
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

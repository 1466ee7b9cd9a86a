# mypy: disallow-untyped-calls=False
# (Celery and Kombu are untyped or partly typed; calling them is allowed here.)
"""Prototype: take timed tasks for quorum queues before Celery's native delayed delivery rewrites them.

With a quorum queue among ``app.amqp.queues`` and a non-direct exchange, ``Celery.send_task``
turns a countdown/ETA message into one for RabbitMQ's delay exchanges (``celery_delayed_27``, a
routing key of 28 delay bits before the original key) and drops the ``queue`` option, all
*before* ``amqp.send_task_message`` (the point the package wraps today) sees it. There the
original exchange and queue are gone (NOTES.md).

Both interceptions here wrap ``app.send_task`` (every path goes through it: ``apply_async``,
signatures, retries, ``send_task`` by name) and ``app.amqp.send_task_message`` (as the package does):

``strategy="untimed"`` (recommended)
    For a call the store will take, ``send_task`` is called *without* ``countdown``/``eta``: the
    rewrite never happens, Celery routes and builds the message as for an immediate task, and the
    ``send_task_message`` wrapper writes the ``eta`` header (the value Celery would have written,
    computed the same way) before storing it. No 28-bit key, no whole-second truncation, no
    ``ValueError`` for a countdown under a second, no dependency on a worker having declared the
    delay exchanges.
``strategy="capture"``
    ``send_task`` runs as usual, with a router of the wrapper's own (around the app's, or the
    caller's ``router=``) that records a *copy* of the routed options (``send_task`` goes on to
    mutate the very dict the router returned); the ``send_task_message`` wrapper puts the recorded
    queue/exchange/routing key back in place of the delayed-delivery ones. Recovers the routing,
    but Celery's rewrite still runs (and still raises for a countdown under a second).

The store is a minimal one (a Redis sorted set, scored by due time in ms); ``dispatch_due``
publishes what is due with the confirms publisher, the ``eta`` header cleared, to the queue's own
exchange and routing key. Not package code: the shape of what the package needs.
"""

from __future__ import annotations

import base64
import contextvars
import json
import math
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from celery.utils.time import maybe_make_aware
from kombu.entity import Exchange
from kombu.serialization import dumps
from kombu.transport.native_delayed_delivery import CELERY_DELAYED_DELIVERY_EXCHANGE as DELIVERY_EXCHANGE
from kombu.transport.native_delayed_delivery import _delay_prefix_re, level_name

from prototype.confirm_publisher import ConfirmPublisher, Outgoing

#: The exchange ``send_task`` routes delayed messages to (the top level of the delay tree).
DELAY_EXCHANGE = level_name(27)
DUE_KEY = "zt:due"

# The routing of the current send_task call as its router resolved it, before any rewrite.
_routed: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar("zt_routed", default=None)
# The eta header of the current send_task call, taken out of the call ("untimed" strategy).
_eta: contextvars.ContextVar[str | None] = contextvars.ContextVar("zt_eta", default=None)


class CapturingRouter:
    """Delegates to a Celery router and keeps a copy of each routing it returns."""

    def __init__(self, router: Any, sink: list[dict[str, Any]]) -> None:
        self._router = router
        self._sink = sink

    def route(self, options: dict[str, Any], name: str, args: Any = (), kwargs: Any = None,
              task_type: Any = None) -> dict[str, Any]:
        routed: dict[str, Any] = self._router.route(options, name, args, kwargs, task_type)
        self._sink.append(dict(routed))
        return routed

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._router, attr)


def is_delayed_delivery(options: dict[str, Any]) -> bool:
    """True when ``send_task`` rewrote these options for RabbitMQ's native delayed delivery."""
    exchange = options.get("exchange")
    name = exchange.name if isinstance(exchange, Exchange) else exchange
    return name == DELAY_EXCHANGE


def original_options(options: dict[str, Any], routed: dict[str, Any] | None) -> dict[str, Any]:
    """``send_task_message``'s options with the routing as it was before the rewrite."""
    if routed is None or not is_delayed_delivery(options):
        return options
    restored = {k: v for k, v in options.items() if k not in ("queue", "exchange", "routing_key")}
    for key in ("queue", "exchange", "routing_key"):
        if routed.get(key) is not None:
            restored[key] = routed[key]
    return restored


class ZSetStore:
    """The smallest store that shows the idea: due time in ms -> one serialized message."""

    def __init__(self, redis: Any, key: str = DUE_KEY) -> None:
        self.redis = redis
        self.key = key

    def add(self, due_ms: int, message: Outgoing, queue: str | None) -> None:
        entry = {"body": base64.b64encode(message.body).decode(), "headers": message.headers,
                 "exchange": message.exchange, "routing_key": message.routing_key,
                 "content_type": message.content_type, "content_encoding": message.content_encoding,
                 "properties": message.properties, "queue": queue}
        self.redis.zadd(self.key, {json.dumps(entry, default=str): due_ms})

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.redis.zrange(self.key, 0, -1)]

    def due(self, now_ms: int) -> list[tuple[bytes, dict[str, Any]]]:
        return [(raw, json.loads(raw)) for raw in self.redis.zrangebyscore(self.key, "-inf", now_ms)]

    def remove(self, raws: list[bytes]) -> None:
        if raws:
            self.redis.zrem(self.key, *raws)


def stored_message(app: Any, name: str, message: Any, options: dict[str, Any]) -> tuple[Outgoing, str | None]:
    """Routing and serialization as ``celery.app.amqp``'s ``send_task_message`` does them."""
    headers, properties, body, _ = message
    amqp, conf = app.amqp, app.conf
    queue: Any = options.get("queue")
    exchange, routing_key = options.get("exchange"), options.get("routing_key")
    if options.get("headers"):
        headers.update(options["headers"])
    qname = queue
    if queue is None and exchange is None:
        queue = amqp.default_queue
    if queue is not None:
        if isinstance(queue, str):
            qname, queue = queue, amqp.queues[queue]
        else:
            qname = queue.name
    exchange_type = options.get("exchange_type") or getattr(getattr(queue, "exchange", None), "type", None) or "direct"
    if (not exchange or not routing_key) and exchange_type == "direct":
        exchange, routing_key = "", qname
    elif exchange is None:
        exchange = queue.exchange.name or amqp.default_exchange
        routing_key = routing_key or queue.routing_key or conf.task_default_routing_key
    exchange_name = exchange.name if isinstance(exchange, Exchange) else str(exchange or "")
    if exchange_name in (DELAY_EXCHANGE, DELIVERY_EXCHANGE) and queue is not None:
        # A retry of a task that came through native delayed delivery carries that delivery's
        # exchange and delay-prefixed key: publish it to its queue's own exchange instead.
        exchange_name = queue.exchange.name
        routing_key = _delay_prefix_re.sub("", str(routing_key or ""), count=1) or queue.routing_key
    delivery_mode = options.get("delivery_mode") or getattr(getattr(queue, "exchange", None), "delivery_mode", None)
    content_type, content_encoding, data = dumps(body, serializer=options.get("serializer") or conf.task_serializer)
    if isinstance(data, str):
        data = data.encode(content_encoding or "utf-8")
    props = {k: v for k, v in properties.items() if k != "expiration"}  # a TTL from send time: meaningless later
    props["delivery_mode"] = delivery_mode or conf.task_default_delivery_mode
    if options.get("priority") is not None:
        props["priority"] = options["priority"]
    out = Outgoing(data, {**headers, "eta": None}, exchange_name, str(routing_key or ""), content_type,
                   content_encoding, props)
    return out, qname


def eta_ms(app: Any, eta: str | datetime) -> int:
    when = datetime.fromisoformat(eta) if isinstance(eta, str) else eta
    aware: datetime = maybe_make_aware(when, app.conf.timezone)
    return math.ceil(aware.timestamp() * 1000)


def eta_header(app: Any, countdown: Any, eta: Any) -> str:
    """The ``eta`` header ``amqp.as_task_v2`` writes for these ``send_task`` arguments."""
    if countdown:
        app.amqp._verify_seconds(countdown, "countdown")
        now = app.now()
        return str(maybe_make_aware(now + timedelta(seconds=countdown), tz=app.timezone).isoformat())
    return eta if isinstance(eta, str) else str(eta.isoformat())


def install(app: Any, store: ZSetStore, *, strategy: str = "untimed", min_countdown: float = 0.0) -> Callable[[], None]:
    """Put the interception on ``app``; returns a function that takes it off again. Tasks due
    sooner than ``min_countdown`` seconds are left to Celery (and its delayed delivery)."""
    if strategy not in ("untimed", "capture"):
        raise ValueError(f"unknown strategy {strategy!r}")
    original_send_task = app.send_task
    original_stm = app.amqp.send_task_message  # a cached property: built once, then an attribute

    def send_task(name: str, args: Any = None, kwargs: Any = None, countdown: Any = None, eta: Any = None,
                  *rest: Any, **options: Any) -> Any:
        if rest or not (countdown or eta):
            return original_send_task(name, args, kwargs, countdown, eta, *rest, **options)
        header = eta_header(app, countdown, eta)
        if eta_ms(app, header) - time.time() * 1000 < min_countdown * 1000:
            return original_send_task(name, args, kwargs, countdown, eta, **options)
        if strategy == "untimed":
            eta_token = _eta.set(header)
            try:
                return original_send_task(name, args, kwargs, None, None, **options)
            finally:
                _eta.reset(eta_token)
        sink: list[dict[str, Any]] = []
        options["router"] = CapturingRouter(options.get("router") or app.amqp.router, sink)
        token = _routed.set(sink)
        try:
            return original_send_task(name, args, kwargs, countdown, eta, **options)
        finally:
            _routed.reset(token)

    def send_task_message(producer: Any, name: str, message: Any, **options: Any) -> Any:
        headers, _, _, sent_event = message
        pending = _eta.get()
        if pending is not None:
            _eta.set(None)  # this message only, not one the call might send after it
            headers["eta"] = pending
            if isinstance(sent_event, dict):
                sent_event["eta"] = pending
        elif not headers.get("eta") or _routed.get() is None:
            return original_stm(producer, name, message, **options)
        else:
            sink = _routed.get()
            options = original_options(options, sink[-1] if sink else None)
        out, queue = stored_message(app, name, message, options)
        store.add(eta_ms(app, headers["eta"]), out, queue)
        return None

    app.send_task = send_task
    app.amqp.send_task_message = send_task_message

    def uninstall() -> None:
        del app.send_task  # back to the class's method
        app.amqp.send_task_message = original_stm

    return uninstall


def dispatch_due(app: Any, store: ZSetStore, publisher: ConfirmPublisher, now_ms: int | None = None) -> int:
    """Publish every due entry to its queue (declared first, as Celery would); returns how many
    were confirmed. Entries not confirmed stay in the store for the next round."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    due = store.due(now_ms)
    if not due:
        return 0
    for name in {e["queue"] for _, e in due if e["queue"]}:
        queue = app.amqp.queues.get(name)
        if queue is not None:
            queue(publisher.channel).declare()
    batch = [Outgoing(base64.b64decode(e["body"]), e["headers"], e["exchange"], e["routing_key"],
                      e["content_type"], e["content_encoding"], e["properties"]) for _, e in due]
    result = publisher.publish(batch)
    store.remove([due[i][0] for i in result.confirmed])
    return len(result.confirmed)

"""The ``send_task`` path: a timed send the store takes reaches Celery as an untimed one.

Celery 5.5+ rewrites a countdown/eta message inside ``Celery.send_task``, before
``send_task_message`` sees it, when the broker is RabbitMQ and any queue of the app is a quorum
queue (native delayed delivery: the message goes to the ``celery_delayed_27`` exchange with the
countdown's bits in its routing key, and the queue option is dropped). Stored like that, the task
would wait twice (in the store, then in the delay queues) or be lost where no worker declared the
delay exchanges.

So the app's ``send_task`` is wrapped (every timed path goes through it: ``apply_async``,
signatures and canvas, ``Task.retry``, ``send_task`` by name). When the store will take the call
(``retries`` > 0, or due at least ``zset_scheduler_min_countdown`` ahead), the wrapper computes the
``eta`` header exactly as Celery's ``as_task_v2`` would, and calls the original ``send_task``
without ``countdown``/``eta`` and with the header in the ``zset_due`` option: Celery routes and
builds an immediate task (no rewrite, on any broker), the option passes through the router to
``send_task_message`` (:mod:`.sender`), which writes the header and stores the message. Calls the
store does not take go to Celery untouched, native delayed delivery included.

A retry of a task that reached its worker through native delayed delivery carries that delivery's
exchange (``celery_delayed_delivery``) and delay-prefixed routing key: the wrapper gives the retry
its queue's own routing back, so the stored retry is published straight to its queue when due.

A call the store takes goes on through the lane (:mod:`.lane`: calls of a shape seen before are
stored without Celery's ``send_task``, the others go through it). It is given a producer of its
own (:func:`idle_producer`, unless the caller gave one or a connection, or the result backend uses
it), so that Celery does not acquire one from the broker pool for a call that never publishes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from celery.backends.base import BaseBackend
from celery.backends.redis import RedisBackend
from celery.utils.time import maybe_make_aware

from ...model import headers as names
from ..core.compat import seconds_after, verify_seconds
from ..core.state import Installation, installation_for
from .lane import Lane
from .sender import stores

#: Kombu's native delayed delivery: the exchanges a delayed message travels through, and the
#: prefix of 28 delay bits it puts before the routing key (kombu.transport.native_delayed_delivery).
DELAY_EXCHANGES = frozenset({"celery_delayed_delivery", "celery_delayed_27"})
DELAY_PREFIX = re.compile(r"^(?:[01]\.){28}")


def wrap_send_task(app: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """The app's ``send_task`` with the store's timed sends taken out of Celery's timed path."""

    def send_task(name: str, args: Any = None, kwargs: Any = None, countdown: Any = None, eta: Any = None,
                  *rest: Any, **options: Any) -> Any:
        if rest or not (countdown or eta) or names.DUE_OPTION in options:
            return original(name, args, kwargs, countdown, eta, *rest, **options)
        inst = installation_for(app)
        if inst is None:
            return original(name, args, kwargs, countdown, eta, **options)
        lane = inst.lane
        if lane is None:
            lane = inst.lane = Lane(app, inst, original)
        # Protocol 1 is refused by the sender; a usable lane means Celery builds protocol 2 messages.
        if not lane.usable and app.conf.task_protocol == 1:
            return original(name, args, kwargs, countdown, eta, **options)
        header, due_ms, eta_us = lane.due(countdown, eta, lambda c, e: eta_header(app, c, e))
        if not stores(inst, options.get("retries"), due_ms):
            return original(name, args, kwargs, countdown, eta, **options)
        undelayed(options)
        options[names.DUE_OPTION] = header
        if options.get("producer") is None and options.get("connection") is None and _producer_unused(app):
            options["producer"] = idle_producer(inst)
        return lane.send(name, args, kwargs, header, due_ms, eta_us, options)

    send_task.__wrapped__ = original  # type: ignore[attr-defined]
    return send_task


def _producer_unused(app: Any) -> bool:
    """Whether the result backend leaves the producer of a send alone (``on_task_call``: the base
    backend's does nothing, the Redis backend's subscribes; the RPC backend's declares its reply
    queue on the producer's channel, which needs a connection)."""
    return type(app.backend).on_task_call in _PRODUCER_FREE


#: Backends' ``on_task_call`` that do not touch the producer they are given.
_PRODUCER_FREE = frozenset({BaseBackend.on_task_call, RedisBackend.on_task_call})


def idle_producer(inst: Installation) -> Any:
    """A producer for a send the store takes, made once per thread and app (kept with the app's
    installation, so it goes with the app): Celery's ``send_task`` acquires one from the broker
    pool for every call, and this call never publishes with it. Its connection is lazy (Kombu
    connects on first use), so it costs no broker connection."""
    producer = getattr(inst.per_thread, "producer", None)
    if producer is None:
        app = inst.app
        producer = inst.per_thread.producer = app.amqp.Producer(app.connection_for_write(), auto_declare=False)
    return producer


def eta_header(app: Any, countdown: Any, eta: Any) -> str:
    """The ``eta`` header Celery's ``as_task_v2`` writes for these ``send_task`` arguments."""
    if countdown:
        verify_seconds(countdown, "countdown")
        when = maybe_make_aware(seconds_after(app.now(), countdown), tz=app.timezone)
        return str(when.isoformat())
    if isinstance(eta, datetime):
        return eta.isoformat()
    return str(eta)


def undelayed(options: dict[str, Any]) -> None:
    """Drop native delayed delivery's exchange and routing-key prefix from a retry's options (the
    router then routes it as the task's own), in place."""
    exchange = options.get("exchange")
    if getattr(exchange, "name", exchange) not in DELAY_EXCHANGES:
        return
    options.pop("exchange")
    options.pop("exchange_type", None)
    key = options.get("routing_key")
    if isinstance(key, str):
        options["routing_key"] = DELAY_PREFIX.sub("", key, count=1)
    if not options.get("routing_key"):
        options.pop("routing_key", None)

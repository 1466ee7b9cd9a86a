"""Which calls and apps the lane may take (:mod:`.lane`); everything else goes Celery's full way.

A call's options must be known ones with scalar values (their values are part of its shape), sent
through the task's own class; the app must run Celery's own ``send_task``, ``as_task_v2``, task
sender and clock, and route with mappings only: what the lane does in their place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from celery.app.routes import MapRoute
from celery.app.task import Task

from .mixins import ZSetAMQPMixin

Send = Callable[..., Any]

#: Options a shape may hold (their values are part of the shape): the task's execution options
#: ``apply_async`` merges in, and send options that only reach the message as it was built.
SCALAR_OPTIONS = frozenset({
    "queue", "routing_key", "exchange", "exchange_type", "priority", "serializer", "delivery_mode",
    "compression", "time_limit", "soft_time_limit", "immediate", "mandatory", "ignore_result",
    "add_to_parent", "retry", "timeout", "confirm_timeout",
})
#: Options ``apply_async`` always passes, which the lane takes only as None.
NONE_OPTIONS = frozenset({"link", "link_error", "shadow", "expires"})
_SCALARS = (type(None), bool, int, float, str)

def may_be_shape(opts: dict[str, Any]) -> bool:
    """Whether these options can make a shape: known ones, scalar values, the task's own class."""
    task_type = opts.get("task_type")
    if not isinstance(task_type, Task):  # send_task by name: Celery merges the task's options itself
        return False
    for k, v in opts.items():
        if k in NONE_OPTIONS:
            if v is not None:
                return False
        elif k in SCALAR_OPTIONS:
            if type(v) not in _SCALARS:
                return False
        elif k not in ("task_type", "result_cls"):
            return False
    return True


def app_is_plain(app: Any, original: Send) -> bool:
    """Whether the app runs Celery's own ``send_task``, ``as_task_v2``, task sender, clock and
    a router of mappings only (what the lane does in their place)."""
    amqp = app.amqp
    create = getattr(amqp.create_task_message, "__func__", None)
    return (getattr(original, "__func__", None) is Celery.send_task and type(app).now is Celery.now
            and create is AMQP.as_task_v2 and type(amqp).as_task_v2 is AMQP.as_task_v2
            and not _overrides(type(amqp), AMQP, ("_create_task_sender", "send_task_message"))
            and getattr(amqp.send_task_message, "__wrapped__", None) is not None
            and all(type(route) is MapRoute for route in amqp.router.routes))


def _overrides(cls: type, base: type, names_: tuple[str, ...]) -> bool:
    """Whether a class between ``cls`` and ``base`` defines one of ``names_`` (our own mixin's
    ``send_task_message`` wraps Celery's and does not count)."""
    return any(name in vars(klass) for klass in cls.__mro__[:cls.__mro__.index(base)]
               if klass is not ZSetAMQPMixin for name in names_)

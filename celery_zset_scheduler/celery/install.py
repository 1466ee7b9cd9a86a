"""``install(app)``: the one line that sends an app's timed tasks to the store.

It points ``app.amqp_cls``/``app.control_cls`` at subclasses (of Celery's classes, or of the
user's own) before they are instantiated, so installing reads no configuration and opens no
connection: the wrapped sender is built when Celery first builds its own. It wraps the app's
``send_task`` (:mod:`.producer.timed`: a timed send the store takes reaches Celery as an untimed one, so
RabbitMQ quorum queues' native delayed delivery never rewrites it). It connects the
worker-side signal handlers (:mod:`.worker.hooks`), which act only for installed apps.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from celery.app.amqp import AMQP
from celery.app.control import Control
from celery.utils.imports import symbol_by_name

from .core import reports
from .core.state import Installation, ensure_installation
from .producer.mixins import ZSetAMQPMixin, ZSetControlMixin
from .producer.sender import wrap_sender
from .producer.timed import wrap_send_task
from .transport import choose
from .worker import hooks as worker_side
from .worker import periodic as periodic_worker
from .worker.revokes import RevokedSet

if TYPE_CHECKING:
    from celery import Celery

_DEFAULT_AMQP = "celery.app.amqp:AMQP"
_DEFAULT_CONTROL = "celery.app.control:Control"
_OURS_AMQP = "celery_zset_scheduler.celery.install:ZSetAMQP"
_OURS_CONTROL = "celery_zset_scheduler.celery.install:ZSetControl"


def install(app: Celery, **overrides: Any) -> Installation:
    """Make ``apply_async(countdown=/eta=)``, ``send_task(eta=)`` and ``retry(countdown=)`` of
    ``app`` store the task, and every revoke cancel stored ones and hold for the others (I10).

    Cheap and side-effect free: no connection, thread or configuration read until first use.
    Calling it again (or on other apps) is safe. ``overrides`` take precedence over the app's
    ``zset_scheduler_*`` settings (``install(app, shards=4)``).
    """
    inst = ensure_installation(app, overrides)
    worker_side.connect()
    periodic_worker.connect()
    reports.mask_store_url_in_reports()
    if "amqp" in app.__dict__:  # already built: wrap its sender in place
        amqp = app.amqp
        if not getattr(amqp.send_task_message, "__wrapped__", None):
            amqp.send_task_message = wrap_sender(app, amqp.send_task_message)
        amqp.Connection = functools.partial(choose.connection, app)  # a redis:// broker: our transport
    else:
        app.amqp_cls = _subclass(app.amqp_cls, _DEFAULT_AMQP, _OURS_AMQP, ZSetAMQPMixin)
    if "control" in app.__dict__:
        control = app.control
        if not isinstance(control, ZSetControlMixin):
            control.__class__ = _subclass_of(type(control), ZSetControlMixin)
    else:
        app.control_cls = _subclass(app.control_cls, _DEFAULT_CONTROL, _OURS_CONTROL, ZSetControlMixin)
    app.steps["worker"].add(RevokedSet)  # the worker's revoked set follows the store's records
    if "send_task" not in app.__dict__:  # timed sends the store takes skip Celery's timed path
        app.send_task = wrap_send_task(app, app.send_task)
    return inst


class ZSetAMQP(ZSetAMQPMixin, AMQP):
    pass


class ZSetControl(ZSetControlMixin, Control):
    pass


def _subclass(current: Any, default: str, ours: str, mixin: type) -> Any:
    """Our class for Celery's default (by name, so the app stays picklable), else a subclass."""
    if current in (default, ours):
        return ours
    cls = symbol_by_name(current) if isinstance(current, str) else current
    if cls is symbol_by_name(default):
        return ours
    return _subclass_of(cls, mixin)


_subclasses: dict[tuple[type, type], type] = {}


def _subclass_of(cls: type, mixin: type) -> type:
    if issubclass(cls, mixin):
        return cls
    made = _subclasses.get((cls, mixin))
    if made is None:  # one subclass per class, so isinstance checks stay stable
        made = _subclasses[(cls, mixin)] = type(f"ZSet{cls.__name__}", (mixin, cls), {"__module__": __name__})
    return made


__all__ = ["ZSetAMQP", "ZSetControl", "install"]
